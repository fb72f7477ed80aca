//! The upstream's answers the proxy cannot pass on as they are, each a
//! `502` saying why (as `unforwardable.rs` holds the requests it cannot
//! pass on): a `101` no one asked for, and `Content-Length`s that do not
//! parse or disagree.

use http::header::CONTENT_LENGTH;
use http::{HeaderMap, HeaderValue, StatusCode};

/// Whether an answer of `status` with `headers` can go to the client;
/// `Err` saying why not: a `101` (the proxy passes no `Upgrade` on, so no
/// one asked to switch protocols: RFC 9110 §15.2.2), or `Content-Length`s
/// that do not parse or disagree (hyper's client checks them only where
/// they frame a body, not on the answer to a `HEAD`, nor a `204` or `304`,
/// and its server then fails to write them). Repeated equal lengths, as
/// headers or a list, are made one (RFC 9110 §8.6): hyper's client accepts
/// `5, 5` and its server would pass the list on.
pub(crate) fn relayable(status: StatusCode, headers: &mut HeaderMap) -> Result<(), &'static str> {
    if status == StatusCode::SWITCHING_PROTOCOLS {
        return Err("switched protocols, which no request through the proxy asks for");
    }
    let mut lengths = (headers.get_all(CONTENT_LENGTH).iter())
        .flat_map(|value| value.as_bytes().split(|&byte| byte == b','))
        .map(|part| length(part.trim_ascii()));
    let Some(first) = lengths.next() else {
        return Ok(());
    };
    let first = first?;
    let mut repeated = false;
    for other in lengths {
        if other? != first {
            return Err("answered with Content-Length values that disagree");
        }
        repeated = true;
    }
    if repeated {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(first));
    }
    Ok(())
}

/// One `Content-Length` value: digits only (no sign, no space inside).
fn length(text: &[u8]) -> Result<u64, &'static str> {
    let not_a_number = "answered with a Content-Length that is not a number";
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return Err(not_a_number);
    }
    (std::str::from_utf8(text).ok())
        .and_then(|digits| digits.parse().ok())
        .ok_or(not_a_number)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `relayable` on a bodyless `200` with these `Content-Length` values:
    /// the outcome, and the values left.
    fn lengths(values: &[&str]) -> (Result<(), &'static str>, Vec<String>) {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(CONTENT_LENGTH, HeaderValue::from_str(value).unwrap());
        }
        let outcome = relayable(StatusCode::OK, &mut headers);
        let left = (headers.get_all(CONTENT_LENGTH).iter())
            .map(|value| value.to_str().unwrap().to_owned())
            .collect();
        (outcome, left)
    }

    #[test]
    fn equal_lengths_are_made_one_however_written() {
        for values in [&["5", "5"][..], &["5, 5"], &["5,5", " 5"], &["05", "5"]] {
            assert_eq!(
                lengths(values),
                (Ok(()), vec!["5".to_owned()]),
                "{values:?}"
            );
        }
        assert_eq!(lengths(&["7"]), (Ok(()), vec!["7".to_owned()]));
        assert_eq!(lengths(&[]), (Ok(()), vec![]));
    }

    #[test]
    fn lengths_that_disagree_or_are_not_numbers_are_refused() {
        let disagree = Err("answered with Content-Length values that disagree");
        let not_a_number = Err("answered with a Content-Length that is not a number");
        assert_eq!(lengths(&["3", "5"]).0, disagree);
        assert_eq!(lengths(&["3, 5"]).0, disagree);
        for bad in ["abc", "+5", "-1", "", "5 5", "18446744073709551616"] {
            assert_eq!(lengths(&[bad]).0, not_a_number, "{bad:?}");
        }
    }

    #[test]
    fn a_101_is_refused() {
        let switched = relayable(StatusCode::SWITCHING_PROTOCOLS, &mut HeaderMap::new());
        assert!(switched.is_err());
    }
}
