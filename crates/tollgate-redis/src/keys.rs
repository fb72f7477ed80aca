//! The key layout: every key of one client shares one hash tag.
//!
//! ```text
//! <prefix>:{c:<client>}:seen          the latest time seen for the client
//! <prefix>:{c:<client>}:receipts      the receipts of its open calls (crate::receipts)
//! <prefix>:{c:<client>}:refund:<id>   the answer of one refund, kept 180 s (crate::call::refund)
//! <prefix>:{c:<client>}:<limit id>    the client's state under one limit (16 hex digits)
//! <prefix>:{c:<client>}:<limit id>:v<n>   the same, in version n >= 2 of the policy's state format
//! ```
//!
//! A policy's stored state format has a version ([`crate::scripts::state_format`]),
//! part of the key from version 2 on: a script that stores a policy's state
//! differently uses a new key, so it never reads a state written in the old
//! format (servers running the old and the new script side by side, as during
//! a rolling upgrade, each keep their own state, and the old keys expire).
//!
//! `<client>` is the client id percent-encoded: the bytes `A-Z a-z 0-9 - _ . ~`
//! stay as they are and every other byte becomes `%XX` (upper-case hex), so
//! `{`, `}`, `:`, `%`, spaces, newlines and non-UTF-8-looking bytes cannot
//! change the layout, and two different ids never share a key. The `c:` in the
//! tag keeps it non-empty for the empty client id (Redis hashes a whole key
//! whose tag `{}` is empty, which would split a client over slots).
//! On Redis Cluster the tag puts all of a client's keys in one slot, so the
//! plan script never fails with CROSSSLOT. The prefix may not contain `{` or
//! `}` (it would capture the hash tag).

use redis::{RedisWrite, ToRedisArgs};

use crate::RedisStoreError;

/// Builds the keys of one store's key space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// A layout with keys under `prefix`.
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] when the prefix is empty or contains `{` or `}`.
    pub fn new(prefix: impl Into<String>) -> Result<Self, RedisStoreError> {
        let prefix = prefix.into();
        if prefix.is_empty() {
            return Err(RedisStoreError::Config("the key prefix is empty".into()));
        }
        if prefix.contains(['{', '}']) {
            return Err(RedisStoreError::Config(format!(
                "the key prefix {prefix:?} contains '{{' or '}}', which would capture the Redis Cluster hash tag"
            )));
        }
        Ok(Self { prefix })
    }

    /// The prefix every key starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>:{c:<escaped client>}`, the part every key of the client shares.
    pub fn client_base(&self, client: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + client.len() + 32);
        key.push_str(&self.prefix);
        key.push_str(":{c:");
        escape_into(client.as_bytes(), &mut key);
        key.push('}');
        key
    }

    /// The key of the client's latest seen time.
    pub fn seen_key(&self, client: &str) -> String {
        Self::seen_key_from_base(&self.client_base(client))
    }

    /// [`KeyLayout::seen_key`] from an already built [`KeyLayout::client_base`].
    pub fn seen_key_from_base(base: &str) -> String {
        let mut key = String::with_capacity(base.len() + 5);
        key.push_str(base);
        key.push_str(":seen");
        key
    }

    /// The key that keeps the answer of the refund with this `id`
    /// ([`crate::call::refund`]), beside the client's `seen_key`.
    pub(crate) fn refund_key(seen_key: &str, id: &str) -> String {
        let base = seen_key.strip_suffix("seen").unwrap_or(seen_key);
        format!("{base}refund:{id}")
    }

    /// The key of the client's receipts ([`crate::receipts`]), beside its
    /// `seen_key`, as a command argument written without a `String` of its
    /// own: the scripts declare it (`plan.lua`), though they find it from
    /// the last-seen key (`common.lua`'s `receipts_key`).
    pub(crate) fn receipts_key(seen_key: &str) -> ReceiptsKey<'_> {
        ReceiptsKey {
            base: seen_key.strip_suffix("seen").unwrap_or(seen_key),
        }
    }

    /// The key of the client's state under the limit with this id, stored in
    /// version `format` of its policy's state format (1 adds no suffix).
    pub fn limit_key(&self, client: &str, limit_id: u64, format: u32) -> String {
        Self::limit_key_from_base(&self.client_base(client), limit_id, format)
    }

    /// [`KeyLayout::limit_key`] from an already built [`KeyLayout::client_base`],
    /// so that a plan of several limits escapes the client id once.
    pub fn limit_key_from_base(base: &str, limit_id: u64, format: u32) -> String {
        let mut key = String::with_capacity(base.len() + 21);
        key.push_str(base);
        key.push(':');
        for shift in (0..16).rev() {
            key.push(char::from(
                b"0123456789abcdef"[((limit_id >> (shift * 4)) & 15) as usize],
            ));
        }
        if format > 1 {
            key.push_str(":v");
            key.push_str(&format.to_string());
        }
        key
    }
}

/// `<prefix>:{c:<client>}:receipts`, written into a command
/// ([`KeyLayout::receipts_key`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReceiptsKey<'a> {
    /// `<prefix>:{c:<client>}:`.
    base: &'a str,
}

impl ToRedisArgs for ReceiptsKey<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(format_args!("{}receipts", self.base));
    }
}

/// Percent-encodes every byte outside `A-Z a-z 0-9 - _ . ~`.
pub fn escape_into(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receipts_key_is_beside_the_last_seen_key() {
        let layout = KeyLayout::new("tg").unwrap();
        let seen = layout.seen_key("a:b");
        let written = KeyLayout::receipts_key(&seen).to_redis_args();
        assert_eq!(written, [b"tg:{c:a%3Ab}:receipts".to_vec()]);
    }

    #[test]
    fn keys_keep_the_layout_whatever_the_client_id() {
        let layout = KeyLayout::new("tg").unwrap();
        assert_eq!(layout.seen_key("rahul"), "tg:{c:rahul}:seen");
        assert_eq!(
            layout.limit_key("rahul", 0xab, 1),
            "tg:{c:rahul}:00000000000000ab"
        );
        assert_eq!(
            layout.limit_key("rahul", 0xab, 2),
            "tg:{c:rahul}:00000000000000ab:v2"
        );
        assert_eq!(layout.seen_key(""), "tg:{c:}:seen");
        assert_eq!(
            layout.seen_key("a}:{b%\n é"),
            "tg:{c:a%7D%3A%7Bb%25%0A%20%C3%A9}:seen"
        );
        // The tag of every key is the part between the first '{' and '}'.
        for client in ["x", "", "}{", "{x}", ":seen", "%7D", "a b"] {
            let key = layout.limit_key(client, 7, 2);
            let open = key.find('{').unwrap();
            let close = open + key[open..].find('}').unwrap();
            assert_eq!(&key[..=close], layout.client_base(client));
            assert!(close > open + 1, "non-empty tag for {client:?}");
        }
    }

    #[test]
    fn different_clients_never_share_keys() {
        let layout = KeyLayout::new("tg").unwrap();
        let ids = ["a", "A", "%41", "a%", "a:", "a%3A", "", "%", " "];
        for (i, a) in ids.iter().enumerate() {
            for b in &ids[i + 1..] {
                assert_ne!(layout.seen_key(a), layout.seen_key(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn prefixes_that_would_capture_the_tag_are_refused() {
        assert!(matches!(
            KeyLayout::new("a{b"),
            Err(RedisStoreError::Config(_))
        ));
        assert!(matches!(
            KeyLayout::new("a}"),
            Err(RedisStoreError::Config(_))
        ));
        assert!(matches!(
            KeyLayout::new(""),
            Err(RedisStoreError::Config(_))
        ));
        assert!(KeyLayout::new("tollgate:prod").is_ok());
    }
}
