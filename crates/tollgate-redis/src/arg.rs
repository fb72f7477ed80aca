//! One ARGV word of a script call, written straight into the command.

use redis::{RedisWrite, ToRedisArgs};

/// One ARGV word of a call: a number, written in decimal straight into the
/// command (no `String` of its own, on every decision), or a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A number, in decimal.
    Number(u64),
    /// A word known at compile time (`redis`, a policy's code, a flag).
    Text(&'static str),
    /// A number that may be negative (a refund's undo numbers).
    Signed(i64),
    /// A call's receipt id, `<tag in hex>:<seq>` ([`crate::receipts`]).
    Receipt {
        /// The store's tag.
        tag: u64,
        /// The call's number in the store.
        seq: u64,
    },
}

impl ToRedisArgs for Arg {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            Arg::Number(n) => n.write_redis_args(out),
            Arg::Text(text) => text.write_redis_args(out),
            Arg::Signed(n) => n.write_redis_args(out),
            Arg::Receipt { tag, seq } => out.write_arg_fmt(format_args!("{tag:016x}:{seq}")),
        }
    }
}
