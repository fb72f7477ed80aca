//! Work of several clients split by client, so that each client's part
//! runs in order in a task of its own while the clients' run at once (the
//! claims of lost calls, [`crate::call::lost`], and refunds, [`crate::call::refund`]:
//! one client's must go newest first, and one client's wait for a master
//! that is down must not hold back another's).

use std::collections::HashMap;

/// `items` by client (`client` gives an item's last-seen key), each
/// client's in the order given, the clients in the order they first come.
pub(crate) fn by_client<T>(items: Vec<T>, client: impl Fn(&T) -> Option<&String>) -> Vec<Vec<T>> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut clients: Vec<Vec<T>> = Vec::new();
    for item in items {
        let key = client(&item).cloned().unwrap_or_default();
        match index.get(&key) {
            Some(&at) => clients[at].push(item),
            None => {
                index.insert(key, clients.len());
                clients.push(vec![item]);
            }
        }
    }
    clients
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_clients_items_stay_in_order_and_the_clients_in_first_come_order() {
        let items = [("b", 1), ("a", 1), ("b", 2), ("c", 1), ("a", 2)]
            .map(|(c, n)| (c.to_owned(), n))
            .to_vec();
        let split = by_client(items, |(client, _)| Some(client));
        let numbers: Vec<Vec<(&str, i32)>> = split
            .iter()
            .map(|part| part.iter().map(|(c, n)| (c.as_str(), *n)).collect())
            .collect();
        assert_eq!(
            numbers,
            vec![
                vec![("b", 1), ("b", 2)],
                vec![("a", 1), ("a", 2)],
                vec![("c", 1)]
            ]
        );
    }
}
