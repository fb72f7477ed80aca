//! The batch script's reply, read into each call's answer: the plan
//! script's reply, the error it would have raised alone, or word that
//! another master of a cluster holds the call's keys.

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

/// The kind byte of a call's answer in the batch script's reply when the
/// numbers of the plan script's reply follow.
const ANSWER: u8 = 0;
/// The kind byte when the text of the error the call would have raised
/// alone follows.
const REFUSAL: u8 = 1;

/// The batch script's reply (one string, laid out in batch.lua) read into
/// each of its `calls` calls' answers, in order; an error when it is not
/// laid out as batch.lua lays it out, or does not answer every call.
pub(super) fn answers(reply: Value, calls: usize) -> Result<Vec<Batched>, RedisStoreError> {
    let Value::BulkString(reply) = reply else {
        return Err(RedisStoreError::Reply(format!(
            "a batch's reply: {reply:?}"
        )));
    };
    let mut answers = Vec::with_capacity(calls);
    let mut rest = reply.as_slice();
    while !rest.is_empty() {
        let (answer, after) = next_answer(rest)?;
        answers.push(answer);
        rest = after;
    }
    if answers.len() != calls {
        return Err(RedisStoreError::Reply(format!(
            "{} answers to a batch of {calls} calls",
            answers.len()
        )));
    }
    Ok(answers)
}

/// The first answer in `reply`, and what follows it: a kind byte, a count
/// (4 bytes), then that many numbers of 8 bytes or bytes of text, every
/// number little-endian.
fn next_answer(reply: &[u8]) -> Result<(Batched, &[u8]), RedisStoreError> {
    let cut = || {
        RedisStoreError::Reply(format!(
            "a batch's reply cut short ({} bytes left)",
            reply.len()
        ))
    };
    let (&kind, rest) = reply.split_first().ok_or_else(cut)?;
    let (count, rest) = rest.split_first_chunk::<4>().ok_or_else(cut)?;
    let count = usize::try_from(u32::from_le_bytes(*count)).map_err(|_| cut())?;
    match kind {
        ANSWER => {
            let bytes = count.checked_mul(8).ok_or_else(cut)?;
            let (numbers, rest) = rest.split_at_checked(bytes).ok_or_else(cut)?;
            let (numbers, _) = numbers.as_chunks::<8>();
            let numbers = numbers.iter().map(|n| i64::from_le_bytes(*n)).collect();
            Ok((Batched::Answered(Ok(numbers)), rest))
        }
        REFUSAL => {
            let (text, rest) = rest.split_at_checked(count).ok_or_else(cut)?;
            Ok((refused(text), rest))
        }
        other => Err(RedisStoreError::Reply(format!(
            "a batch's reply holds an answer of unknown kind {other}"
        ))),
    }
}

/// A call of a batch that failed with the error whose text is `text`.
fn refused(text: &[u8]) -> Batched {
    if contains(text, NOT_LOCAL) {
        Batched::Elsewhere
    } else {
        Batched::Answered(Err(error_reply(text)))
    }
}

fn contains(text: &[u8], part: &[u8]) -> bool {
    text.windows(part.len()).any(|w| w == part)
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

    /// A batch's reply as batch.lua writes it, from each call's numbers or
    /// error text.
    fn reply(answers: &[Result<&[i64], &str>]) -> Vec<u8> {
        let mut reply = Vec::new();
        for answer in answers {
            match answer {
                Ok(numbers) => {
                    reply.push(ANSWER);
                    reply.extend_from_slice(&u32::try_from(numbers.len()).unwrap().to_le_bytes());
                    for n in *numbers {
                        reply.extend_from_slice(&n.to_le_bytes());
                    }
                }
                Err(text) => {
                    reply.push(REFUSAL);
                    reply.extend_from_slice(&u32::try_from(text.len()).unwrap().to_le_bytes());
                    reply.extend_from_slice(text.as_bytes());
                }
            }
        }
        reply
    }

    fn read(reply: Vec<u8>, calls: usize) -> Result<Vec<Batched>, RedisStoreError> {
        answers(Value::BulkString(reply), calls)
    }

    fn error_of(text: &str) -> RedisStoreError {
        match read(reply(&[Err(text)]), 1).expect("a reply").pop() {
            Some(Batched::Answered(Err(e))) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_calls_numbers_read_back_in_order() {
        let first = [
            1_764_000_000_123_456,
            1,
            -1,
            0,
            i64::MAX,
            i64::MIN,
            86_400_000,
        ];
        let late = [1_764_000_000_123_999, -1];
        let read =
            read(reply(&[Ok(&first), Err("ERR x"), Ok(&late), Ok(&[])]), 4).expect("a reply");
        let numbers: Vec<_> = read
            .iter()
            .map(|b| match b {
                Batched::Answered(Ok(n)) => Some(n.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            numbers,
            [
                Some(first.to_vec()),
                None,
                Some(late.to_vec()),
                Some(vec![])
            ]
        );
    }

    #[test]
    fn a_batched_calls_error_text_keeps_its_code_and_classification() {
        let oom = error_of("OOM command not allowed when used memory > 'maxmemory'.");
        let RedisStoreError::Redis(e) = &oom else {
            panic!("{oom:?}")
        };
        assert_eq!(e.code(), Some("OOM"));
        assert!(oom.is_transient());
        let refused = error_of("TOLLGATE cost is not\r\na number");
        assert!(
            matches!(&refused, RedisStoreError::Script(m) if m == "cost is not  a number"),
            "{refused:?}"
        );
        assert!(!refused.is_transient());
        assert!(!error_of("WRONGTYPE Operation").is_transient());
    }

    #[test]
    fn a_key_of_another_master_is_told_apart_from_an_error_of_the_call() {
        for text in [
            "ERR Script attempted to access a non local key in a cluster node script: 1f, on @user_script:9.",
            "ERR Lua script attempted to access a non local key in a cluster node",
        ] {
            let read = read(reply(&[Err(text)]), 1).expect("a reply");
            assert!(matches!(read[..], [Batched::Elsewhere]), "{text}");
        }
        // Numbers are never read as text, whatever their bytes.
        let mut words = NOT_LOCAL.to_vec();
        words.resize(56, 0);
        let numbers: Vec<i64> = words
            .as_chunks::<8>()
            .0
            .iter()
            .map(|w| i64::from_le_bytes(*w))
            .collect();
        let read = read(reply(&[Ok(&numbers)]), 1).expect("a reply");
        assert!(
            matches!(&read[..], [Batched::Answered(Ok(n))] if *n == numbers),
            "{read:?}"
        );
    }

    #[test]
    fn a_reply_not_laid_out_as_the_script_lays_it_out_is_an_error() {
        let whole = reply(&[Ok(&[7, -1]), Err("ERR x")]);
        for end in 0..whole.len() {
            let cut = read(whole[..end].to_vec(), 2);
            assert!(
                matches!(cut, Err(RedisStoreError::Reply(_))),
                "{end}: {cut:?}"
            );
        }
        assert!(read(whole.clone(), 2).is_ok());
        let miscounted = read(whole.clone(), 3);
        assert!(
            matches!(&miscounted, Err(RedisStoreError::Reply(m)) if m == "2 answers to a batch of 3 calls"),
            "{miscounted:?}"
        );
        let mut unknown = whole;
        unknown[0] = 2;
        assert!(matches!(read(unknown, 2), Err(RedisStoreError::Reply(_))));
        // The plan script's own form, an array of integers, is not a batch's.
        let array = answers(Value::Array(vec![Value::Int(7)]), 1);
        assert!(matches!(array, Err(RedisStoreError::Reply(_))), "{array:?}");
    }
}
