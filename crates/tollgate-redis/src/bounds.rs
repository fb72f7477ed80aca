//! The exact range of the Redis store.
//!
//! Redis runs the scripts in Lua 5.1, whose numbers are doubles: integers are
//! exact up to 2^53 - 1 ([`MAX_EXACT`]) and silently rounded beyond. The
//! store therefore refuses, before calling Redis, any call whose arithmetic
//! could leave that range; the script checks the same bounds again (against
//! the time it actually uses, which may be the client's later last-seen time
//! or Redis's own clock) before its first write.
//!
//! With `now` the time of the decision:
//!
//! | policy | bound |
//! | --- | --- |
//! | sliding-window | `now + window_ms <= 2^53 - 1` |
//! | token-bucket | `now + window_ms <= 2^53 - 1` |
//! | gcra | `(now + 2 * window_ms) * limit <= 2^53 - 1` |
//!
//! and for every limit `window_ms + expiry margin <= 2^53 - 1`; limits and
//! costs are at most `u32::MAX` as everywhere in tollgate. The contract's
//! domain (times up to 2×10^12, windows up to 10^9, limits up to 1,000) is
//! far inside: GCRA's largest scaled time there is about 2.002×10^15, while
//! 2^53 is about 9.007×10^15. With times near today's Unix time in ms
//! (1.8×10^12), GCRA stays exact for `limit * window_ms` up to about 4.5×10^15
//! (e.g. a limit of 1,000,000 per 1.5 hours of window).

use tollgate::{Plan, Policy};

use crate::RedisStoreError;

/// The largest integer a Lua number holds exactly: 2^53 - 1.
pub const MAX_EXACT: u64 = (1 << 53) - 1;

/// The script's code for a policy, or `None` for a policy without a script.
pub(crate) fn policy_code(name: &str) -> Option<&'static str> {
    match name {
        "sliding-window" => Some("s"),
        "token-bucket" => Some("t"),
        "gcra" => Some("g"),
        _ => None,
    }
}

/// Checks that every limit of `plan` can be decided exactly at `now_ms`
/// (`None` when the time is read from Redis: then only the time-free bounds
/// are checked here and the script checks the rest).
///
/// # Errors
/// [`RedisStoreError::OutOfRange`] naming the limit and the bound, or
/// [`RedisStoreError::UnsupportedPolicy`].
pub fn check(plan: &Plan, now_ms: Option<u64>, margin_ms: u64) -> Result<(), RedisStoreError> {
    let max = u128::from(MAX_EXACT);
    if let Some(now) = now_ms {
        if u128::from(now) > max {
            return Err(RedisStoreError::OutOfRange(format!(
                "now_ms {now} exceeds 2^53 - 1 = {MAX_EXACT}"
            )));
        }
    }
    for limit in plan.limits() {
        let policy = limit.policy();
        let code = policy_code(policy.name())
            .ok_or_else(|| RedisStoreError::UnsupportedPolicy(policy.name().to_owned()))?;
        let window = u128::from(policy.window_ms());
        let count = u128::from(policy.limit());
        if window + u128::from(margin_ms) > max {
            return Err(RedisStoreError::OutOfRange(format!(
                "limit {:?}: window_ms {window} plus the expiry margin {margin_ms} exceeds 2^53 - 1",
                limit.name()
            )));
        }
        let Some(now) = now_ms.map(u128::from) else {
            continue;
        };
        let (largest, formula) = match code {
            "g" => (
                (now + 2 * window) * count,
                "(now_ms + 2 * window_ms) * limit",
            ),
            _ => (now + window, "now_ms + window_ms"),
        };
        if largest > max {
            return Err(RedisStoreError::OutOfRange(format!(
                "limit {:?} ({}, limit {count}, window_ms {window}) at now_ms {now}: {formula} = {largest} exceeds 2^53 - 1 = {MAX_EXACT}",
                limit.name(),
                policy.name()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{AnyPolicy, Limit};

    fn plan(policy: &str, limit: u32, window: u64) -> Plan {
        let policy = AnyPolicy::from_name(policy, limit, window).unwrap();
        Plan::new("p", vec![Limit::new("l", policy, false)]).unwrap()
    }

    #[test]
    fn the_contract_domain_is_inside_the_bounds() {
        for name in tollgate::POLICY_NAMES {
            let p = plan(name, 1_000, 1_000_000_000);
            assert!(
                check(&p, Some(2_000_000_000_000), 3_600_000).is_ok(),
                "{name}"
            );
        }
    }

    #[test]
    fn bounds_are_exact_at_the_edge() {
        let p = plan("sliding-window", 3, 1_000);
        assert!(check(&p, Some(MAX_EXACT - 1_000), 0).is_ok());
        assert!(matches!(
            check(&p, Some(MAX_EXACT - 999), 0),
            Err(RedisStoreError::OutOfRange(_))
        ));
        let g = plan("gcra", 4, 1_000);
        let edge = MAX_EXACT / 4 - 2_000;
        assert!(check(&g, Some(edge), 0).is_ok());
        assert!(check(&g, Some(edge + 1), 0).is_err());
        assert!(check(&p, Some(u64::MAX), 0).is_err());
        assert!(check(&p, None, MAX_EXACT).is_err());
        assert!(check(&p, None, MAX_EXACT - 1_000).is_ok());
    }

    #[test]
    fn every_registered_policy_has_a_script() {
        for name in tollgate::POLICY_NAMES {
            assert!(policy_code(name).is_some(), "{name} has no Redis script");
        }
    }
}
