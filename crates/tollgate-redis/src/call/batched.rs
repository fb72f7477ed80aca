//! One call's answer inside the batch script's reply: the plan script's
//! reply, the error it would have raised alone, or word that another
//! master of a cluster holds the call's keys.

use redis::Value;

use super::{script_error, CallReply};
use crate::RedisStoreError;

/// What became of one call of a batch.
#[derive(Debug)]
pub(crate) enum Batched {
    /// Decided (or refused) by the node that ran the batch: the call's own
    /// reply or error.
    Answered(CallReply),
    /// Not run: another master of the cluster holds the call's keys (the
    /// store's map of slots was out of date). Nothing was written for it.
    Elsewhere,
}

/// Redis's error text for a key that a script touched on a cluster node
/// that does not serve its slot (Redis 7: "Script attempted to access a non
/// local key in a cluster node"; Redis 6 starts with "Lua script").
const NOT_LOCAL: &[u8] = b"attempted to access a non local key in a cluster node";

/// One entry of the batch script's reply: the plan script's reply to the
/// call, or the text of the error it would have raised alone.
pub(super) fn batched(entry: Value) -> Batched {
    match entry {
        Value::BulkString(text) if contains(&text, NOT_LOCAL) => Batched::Elsewhere,
        entry => Batched::Answered(call_reply(entry)),
    }
}

fn contains(text: &[u8], part: &[u8]) -> bool {
    text.windows(part.len()).any(|w| w == part)
}

/// One entry of the batch script's reply, as the call's own answer.
fn call_reply(entry: Value) -> CallReply {
    match entry {
        Value::Array(_) => redis::from_redis_value::<Vec<i64>>(entry)
            .map_err(|e| RedisStoreError::Reply(format!("a batched call's answer: {e}"))),
        Value::BulkString(text) => Err(error_reply(&text)),
        other => Err(RedisStoreError::Reply(format!(
            "a batched call's answer: {other:?}"
        ))),
    }
}

/// The store's error for an error reply whose text is `text` (`CODE
/// message`), parsed as an error reply of its own, so that it carries the
/// code, and thus the classification, that the call sent alone would have met.
fn error_reply(text: &[u8]) -> RedisStoreError {
    let mut wire = Vec::with_capacity(text.len() + 3);
    wire.push(b'-');
    wire.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    wire.extend_from_slice(b"\r\n");
    match redis::parse_redis_value(&wire) {
        Ok(Value::ServerError(error)) => script_error(error.into()),
        other => RedisStoreError::Reply(format!("a batched call's error: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batched_calls_error_text_keeps_its_code_and_classification() {
        let oom = call_reply(Value::BulkString(
            b"OOM command not allowed when used memory > 'maxmemory'.".to_vec(),
        ))
        .expect_err("an error");
        let RedisStoreError::Redis(e) = &oom else {
            panic!("{oom:?}")
        };
        assert_eq!(e.code(), Some("OOM"));
        assert!(oom.is_transient());
        let refused = call_reply(Value::BulkString(
            b"TOLLGATE cost is not\r\na number".to_vec(),
        ))
        .expect_err("an error");
        assert!(
            matches!(&refused, RedisStoreError::Script(m) if m == "cost is not  a number"),
            "{refused:?}"
        );
        assert!(!refused.is_transient());
        let wrong =
            call_reply(Value::BulkString(b"WRONGTYPE Operation".to_vec())).expect_err("an error");
        assert!(!wrong.is_transient());
        let answer = call_reply(Value::Array(vec![Value::Int(7), Value::Int(-1)]));
        assert_eq!(answer.expect("an answer"), vec![7, -1]);
        assert!(matches!(
            call_reply(Value::Nil),
            Err(RedisStoreError::Reply(_))
        ));
    }

    #[test]
    fn a_key_of_another_master_is_told_apart_from_an_error_of_the_call() {
        for text in [
            "ERR Script attempted to access a non local key in a cluster node script: 1f, on @user_script:9.",
            "ERR Lua script attempted to access a non local key in a cluster node",
        ] {
            let entry = Value::BulkString(text.as_bytes().to_vec());
            assert!(matches!(batched(entry), Batched::Elsewhere), "{text}");
        }
        let other = batched(Value::BulkString(b"ERR something else".to_vec()));
        assert!(matches!(other, Batched::Answered(Err(_))), "{other:?}");
        let answer = batched(Value::Array(vec![Value::Int(7), Value::Int(-1)]));
        assert!(matches!(answer, Batched::Answered(Ok(_))), "{answer:?}");
    }
}
