//! Which master of a Redis Cluster holds a key: the key's slot, computed as
//! Redis computes it, and the cluster's map of slots to masters, read with
//! `CLUSTER SLOTS`. The store uses it only to put decisions for one master
//! in one batch ([`crate::masters`]); where the map is stale, the master
//! says so and the decision is sent alone, so a wrong map costs a call,
//! never an answer.

use redis::Value;

use crate::RedisStoreError;

/// The number of slots of a Redis Cluster.
const SLOT_COUNT: usize = 16384;

/// The slot of `key`: CRC16 (XMODEM) of its hash tag (the bytes between
/// the first `{` and the first `}` after it, when there are any), else of
/// the whole key, modulo 16384; the rule of the Redis Cluster specification.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    let crc = crc16::State::<crc16::XMODEM>::calculate(hashed);
    crc % SLOT_COUNT as u16
}

fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// Slot ranges and the master serving each, as `CLUSTER SLOTS` gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// The index in `masters` of each slot's master; `u16::MAX` for a slot
    /// no master serves.
    owner: Vec<u16>,
    /// Each master's address, `host:port`.
    masters: Vec<String>,
}

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply: for each range, its first and last
    /// slot, then its master's host and port, then its replicas (ignored).
    pub(crate) fn from_reply(reply: &Value) -> Result<Self, RedisStoreError> {
        let bad = |what: &str| RedisStoreError::Reply(format!("CLUSTER SLOTS: {what}: {reply:?}"));
        let Value::Array(ranges) = reply else {
            return Err(bad("not an array"));
        };
        let mut map = SlotMap {
            owner: vec![u16::MAX; SLOT_COUNT],
            masters: Vec::new(),
        };
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(bad("a range that is not an array"));
            };
            let (Some(first), Some(last), Some(Value::Array(master))) =
                (slot(fields.first()), slot(fields.get(1)), fields.get(2))
            else {
                return Err(bad("a range without its slots and master"));
            };
            let (Some(host), Some(Value::Int(port))) = (text(master.first()), master.get(1)) else {
                return Err(bad("a master without its host and port"));
            };
            let address = format!("{host}:{port}");
            let index = match map.masters.iter().position(|m| *m == address) {
                Some(index) => index,
                None => {
                    map.masters.push(address);
                    map.masters.len() - 1
                }
            };
            let index = u16::try_from(index).map_err(|_| bad("more masters than slots"))?;
            for owner in map.owner.iter_mut().take(last + 1).skip(first) {
                *owner = index;
            }
        }
        Ok(map)
    }

    /// The masters' addresses, `host:port`, indexed as [`SlotMap::master_of`]
    /// answers.
    pub(crate) fn masters(&self) -> &[String] {
        &self.masters
    }

    /// The index of the master serving `key`'s slot, if the map knows one.
    pub(crate) fn master_of(&self, key: &[u8]) -> Option<usize> {
        let owner = self.owner[usize::from(slot_of(key))];
        (owner != u16::MAX).then_some(usize::from(owner))
    }
}

/// A slot number of a reply: an integer below 16384.
fn slot(value: Option<&Value>) -> Option<usize> {
    match value {
        Some(Value::Int(n)) => usize::try_from(*n).ok().filter(|&n| n < SLOT_COUNT),
        _ => None,
    }
}

fn text(value: Option<&Value>) -> Option<String> {
    match value {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Some(Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_computes() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.0 and the specification's
        // CRC16 check value (0x31C3 for "123456789").
        assert_eq!(slot_of(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"{a}"), 15495);
        assert_eq!(slot_of(b"{b}"), 3300);
        assert_eq!(slot_of(b"tollgate:{b}:seen"), 3300);
        assert_eq!(slot_of(b"x{b}y{a}"), 3300, "the first tag counts");
        // An empty tag hashes the whole key.
        assert_eq!(slot_of(b"{}b"), 6680);
        assert_eq!(slot_of(b"{}{b}"), 8193);
        assert_eq!(slot_of(b"foo"), 12182);
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn a_cluster_slots_reply_maps_each_slot_to_its_master() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.9", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(10922),
                node("10.0.0.2", 7000),
            ]),
            Value::Array(vec![
                Value::Int(10923),
                Value::Int(16383),
                node("10.0.0.1", 7000),
            ]),
        ]);
        let map = SlotMap::from_reply(&reply).expect("a map");
        assert_eq!(map.masters(), ["10.0.0.1:7000", "10.0.0.2:7000"]);
        assert_eq!(map.master_of(b"{b}"), Some(0)); // 3300
        assert_eq!(map.master_of(b"{c}"), Some(1)); // 7365
        assert_eq!(map.master_of(b"{a}"), Some(0)); // 15495
    }

    #[test]
    fn unserved_slots_have_no_master_and_bad_replies_are_refused() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(5460),
            node("h", 1),
        ])]);
        let map = SlotMap::from_reply(&reply).expect("a map");
        assert_eq!(map.master_of(b"{b}"), Some(0));
        assert_eq!(map.master_of(b"{a}"), None);
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Array(vec![
                Value::Int(0),
                Value::Int(16384),
                node("h", 1),
            ])]),
            Value::Array(vec![Value::Array(vec![
                Value::Int(0),
                Value::Int(1),
                Value::Nil,
            ])]),
        ] {
            assert!(
                matches!(SlotMap::from_reply(&bad), Err(RedisStoreError::Reply(_))),
                "{bad:?}"
            );
        }
    }
}
