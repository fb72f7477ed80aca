//! Claiming lost calls: the claim script's call and its answer
//! ([`crate::call::lost`]).

use redis::Value;

use super::{script_error, Arg, Call, Scripts};
use crate::evalsha::Evalsha;
use crate::keys::KeyLayout;
use crate::RedisStoreError;

impl Scripts {
    /// Takes back what `calls` (of one client, in the order they were
    /// sent, at least one), whose replies never came, consumed, by their
    /// receipts ([`crate::scripts::CLAIM`]).
    pub(crate) async fn claim(&self, calls: &[&Call]) -> Result<Claimed, RedisStoreError> {
        let seen = calls
            .first()
            .and_then(|c| c.keys.first())
            .map_or("", String::as_str);
        // Every key the script touches is declared (`claim.lua`).
        let mut states: Vec<&str> = calls
            .iter()
            .flat_map(|c| c.keys.iter().skip(1).map(String::as_str))
            .collect();
        states.sort_unstable();
        states.dedup();
        let declared = 2 + states.len();
        let words = calls.iter().map(|c| 5 + 4 * c.keys.len()).sum::<usize>();
        let mut invocation = Evalsha::new(&self.claim, declared, declared + 1 + words);
        invocation.arg(seen);
        invocation.arg(KeyLayout::receipts_key(seen));
        for key in states {
            invocation.arg(key);
        }
        invocation.arg(calls.len());
        for call in calls {
            let limits = call.keys.len().saturating_sub(1);
            invocation.arg(limits);
            for key in &call.keys {
                invocation.arg(key);
            }
            let receipt = call.args.len().saturating_sub(2);
            for at in [receipt, 3, 1] {
                invocation.arg(call.args.get(at).copied().unwrap_or(Arg::Number(0)));
            }
            for limit in 0..limits {
                for arg in call
                    .args
                    .get(4 + 4 * limit..7 + 4 * limit)
                    .unwrap_or_default()
                {
                    invocation.arg(arg);
                }
            }
        }
        let reply: Value = self
            .connection
            .invoke(&invocation)
            .await
            .map_err(script_error)?;
        Claimed::read(reply, calls.len())
    }
}

/// The claim script's answer ([`Scripts::claim`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// Redis's clock (µs) had not passed every call's deadline: nothing done.
    Early(u64),
    /// Per call, in order: `None` when it had no receipt, else per limit
    /// whether it was restored.
    Calls(Vec<Option<Vec<bool>>>),
}

impl Claimed {
    fn read(reply: Value, calls: usize) -> Result<Claimed, RedisStoreError> {
        let bad = |what: &str| RedisStoreError::Reply(format!("the claim script's answer: {what}"));
        let Value::Array(entries) = reply else {
            return Err(bad("not an array"));
        };
        if let [Value::Int(-1), Value::Int(redis_us)] = entries.as_slice() {
            return Ok(Claimed::Early(u64::try_from(*redis_us).unwrap_or(0)));
        }
        if entries.len() != calls {
            return Err(bad("not one entry per call"));
        }
        let mut claimed = Vec::with_capacity(calls);
        for entry in entries {
            let numbers: Vec<i64> =
                redis::from_redis_value(entry).map_err(|e| bad(&e.to_string()))?;
            claimed.push(match numbers.split_first() {
                Some((&0, [])) => None,
                Some((&1, restored)) => Some(restored.iter().map(|&r| r == 1).collect()),
                _ => return Err(bad("an entry that is neither 0 nor 1")),
            });
        }
        Ok(Claimed::Calls(claimed))
    }
}
