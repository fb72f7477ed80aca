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

/// The first byte of a call's answer packed by the batch script
/// (`packed` in batch.lua); an error's text starts with its code.
const PACKED: u8 = 0;

/// One entry of the batch script's reply: the plan script's reply to the
/// call, or the text of the error it would have raised alone.
pub(super) fn batched(entry: Value) -> Batched {
    match entry {
        Value::BulkString(text) if text.first() != Some(&PACKED) && contains(&text, NOT_LOCAL) => {
            Batched::Elsewhere
        }
        entry => Batched::Answered(call_reply(entry)),
    }
}

fn contains(text: &[u8], part: &[u8]) -> bool {
    text.windows(part.len()).any(|w| w == part)
}

/// One entry of the batch script's reply, as the call's own answer.
fn call_reply(entry: Value) -> CallReply {
    match entry {
        Value::BulkString(text) => match text.split_first() {
            Some((&PACKED, numbers)) => unpacked(numbers),
            _ => Err(error_reply(&text)),
        },
        other => Err(RedisStoreError::Reply(format!(
            "a batched call's answer: {other:?}"
        ))),
    }
}

/// The plan script's reply from its packed form: 8 bytes per number,
/// signed, little-endian.
fn unpacked(bytes: &[u8]) -> CallReply {
    let (numbers, rest) = bytes.as_chunks::<8>();
    if !rest.is_empty() {
        return Err(RedisStoreError::Reply(format!(
            "a batched call's answer of {} bytes, not whole 8-byte numbers",
            bytes.len()
        )));
    }
    Ok(numbers.iter().map(|n| i64::from_le_bytes(*n)).collect())
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
        assert!(matches!(
            call_reply(Value::Nil),
            Err(RedisStoreError::Reply(_))
        ));
    }

    /// What batch.lua's `packed` makes of `numbers`.
    fn packed(numbers: &[i64]) -> Value {
        let mut text = vec![PACKED];
        for n in numbers {
            text.extend_from_slice(&n.to_le_bytes());
        }
        Value::BulkString(text)
    }

    #[test]
    fn a_packed_answer_reads_back_as_its_numbers() {
        let numbers = [
            1_764_000_000_123_456,
            1,
            -1,
            0,
            i64::MAX,
            i64::MIN,
            86_400_000,
        ];
        assert_eq!(call_reply(packed(&numbers)).expect("an answer"), numbers);
        assert_eq!(
            call_reply(packed(&[])).expect("an answer"),
            Vec::<i64>::new()
        );
        let Value::BulkString(mut cut) = packed(&[7, -1]) else {
            unreachable!()
        };
        cut.pop();
        let e = call_reply(Value::BulkString(cut)).expect_err("a cut answer");
        assert!(
            matches!(&e, RedisStoreError::Reply(m) if m.contains("15 bytes, not whole")),
            "{e:?}"
        );
        // An array of integers (the plan script's own form) is not what the
        // batch script answers.
        assert!(matches!(
            call_reply(Value::Array(vec![Value::Int(7)])),
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
        let answer = batched(packed(&[7, -1]));
        assert!(matches!(answer, Batched::Answered(Ok(_))), "{answer:?}");
        // Packed numbers are never read as text, whatever their bytes.
        let mut text = vec![PACKED];
        text.extend_from_slice(NOT_LOCAL);
        text.extend_from_slice(&[0; 3]);
        let answer = batched(Value::BulkString(text));
        assert!(
            matches!(answer, Batched::Answered(Ok(ref n)) if n.len() == 7),
            "{answer:?}"
        );
    }
}
