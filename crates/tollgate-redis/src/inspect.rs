//! Reading the inspection script's reply ([`crate::scripts::INSPECT`]):
//! each limit's raw stored state, decoded into the core policy's state, so
//! that [`tollgate::inspect_plan`] computes every number with the same
//! arithmetic as for the memory store.

use tollgate::policy::{Bucket, GcraState, SlidingLog};
use tollgate::{AnyPolicy, AnyState, Inspection, Plan, PlanStates, Policy};

use crate::RedisStoreError;

fn bad(message: String) -> RedisStoreError {
    RedisStoreError::Reply(message)
}

/// A non-negative integer of the reply.
fn whole(value: i64, what: &str) -> Result<u64, RedisStoreError> {
    u64::try_from(value).map_err(|_| bad(format!("negative {what} {value}")))
}

/// One limit's state from its raw integers (see each policy's `raw` in
/// `src/scripts/policies/`); `None` when nothing is stored.
fn decode_state(policy: &AnyPolicy, raw: &[i64]) -> Result<Option<AnyState>, RedisStoreError> {
    if raw.is_empty() {
        return Ok(None);
    }
    let name = policy.name();
    let state = match (policy, raw) {
        (AnyPolicy::Gcra(_), &[tat]) => AnyState::Gcra(GcraState {
            tat_scaled: u128::from(whole(tat, "GCRA TAT")?),
        }),
        (AnyPolicy::TokenBucket(_), &[anchor, full_at]) => AnyState::TokenBucket(Bucket {
            anchor: whole(anchor, "bucket anchor")?,
            full_at: whole(full_at, "bucket full_at")?,
        }),
        (AnyPolicy::SlidingWindow(_), pairs) if pairs.len() % 2 == 0 => {
            AnyState::SlidingWindow(decode_log(policy.limit(), pairs)?)
        }
        _ => return Err(bad(format!("{} integers for a {name} state", raw.len()))),
    };
    Ok(Some(state))
}

/// A sliding log from `time, count` pairs, oldest first, checked to be one
/// the policy could have written: times increasing, counts at least 1,
/// at most `limit` units in all (the reply holds only the live ones).
fn decode_log(limit: u32, pairs: &[i64]) -> Result<SlidingLog, RedisStoreError> {
    let mut runs = Vec::with_capacity(pairs.len() / 2);
    let mut total: u64 = 0;
    for pair in pairs.chunks_exact(2) {
        let time = whole(pair[0], "log time")?;
        let count = u32::try_from(pair[1])
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| bad(format!("log count {} out of range", pair[1])))?;
        if runs.last().is_some_and(|&(before, _)| before >= time) {
            return Err(bad(format!("log times out of order at {time}")));
        }
        total += u64::from(count);
        runs.push((time, count));
    }
    if total > u64::from(limit) {
        return Err(bad(format!(
            "a log of {total} units over its limit {limit}"
        )));
    }
    Ok(SlidingLog::from_runs(runs))
}

/// The inspection from the script's reply: `now_used`, then per limit the
/// count of its integers and the integers.
pub(crate) fn read_inspection(plan: &Plan, reply: &[i64]) -> Result<Inspection, RedisStoreError> {
    let (&now, mut rest) = reply
        .split_first()
        .ok_or_else(|| bad("an empty inspection reply".into()))?;
    let now = whole(now, "time")?;
    let mut states: PlanStates = Vec::with_capacity(plan.limits().len());
    for limit in plan.limits() {
        let (&count, after) = rest
            .split_first()
            .ok_or_else(|| bad(format!("no state for limit {:?}", limit.name())))?;
        let count = usize::try_from(count)
            .ok()
            .filter(|&c| c <= after.len())
            .ok_or_else(|| bad(format!("{count} integers announced, {} left", after.len())))?;
        let (raw, after) = after.split_at(count);
        if let Some(state) = decode_state(limit.policy(), raw)? {
            states.push((limit.id(), state));
        }
        rest = after;
    }
    if !rest.is_empty() {
        return Err(bad(format!("{} integers past the last limit", rest.len())));
    }
    Ok(tollgate::inspect_plan(plan, &states, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Limit;

    fn plan() -> Plan {
        let limit = |name: &str, policy: &str| {
            Limit::new(name, AnyPolicy::from_name(policy, 2, 1_000).unwrap(), false)
        };
        let limits = vec![
            limit("s", "sliding-window"),
            limit("t", "token-bucket"),
            limit("g", "gcra"),
        ];
        Plan::new("p", limits).unwrap()
    }

    #[test]
    fn states_decode_into_the_core_policies_numbers() {
        // A log of 2 units at 100, a bucket anchored at 0 full at drip 1
        // (one token out until 500), GCRA's TAT at 600 (scaled by 2).
        let got = read_inspection(&plan(), &[300, 2, 100, 2, 2, 0, 1, 1, 1_200]).unwrap();
        let numbers: Vec<(u32, u64)> = got
            .limits
            .iter()
            .map(|l| (l.remaining, l.retry_after_ms))
            .collect();
        assert_eq!(numbers, [(0, 800), (1, 0), (1, 0)]);
        assert_eq!((got.now_ms, got.allowed), (300, false));
        // Nothing stored: all full.
        let fresh = read_inspection(&plan(), &[300, 0, 0, 0]).unwrap();
        assert!(fresh.limits.iter().all(|l| l.remaining == 2));
    }

    #[test]
    fn a_reply_no_script_wrote_is_an_error() {
        for (reply, says) in [
            (&[][..], "empty"),
            (&[300, 1, 100, 0, 0][..], "for a sliding-window state"),
            (&[300, 2, 100, 0, 0, 0][..], "count 0"),
            (&[300, 4, 100, 1, 100, 1, 0, 0][..], "out of order"),
            (&[300, 6, 1, 1, 2, 1, 3, 1, 0, 0][..], "over its limit"),
            (&[300, 0, 3, 1, 0][..], "announced"),
            (&[300, 0, 0, 0, 9][..], "past the last limit"),
            (&[-1, 0, 0, 0][..], "negative"),
        ] {
            let error = read_inspection(&plan(), reply).unwrap_err().to_string();
            assert!(error.contains(says), "{reply:?}: {error}");
        }
    }
}
