//! The exact range of the Redis store.
//!
//! Redis runs the scripts in Lua 5.1, whose numbers are doubles: integers are
//! exact up to 2^53 - 1 ([`MAX_EXACT`]) and silently rounded beyond. The
//! store therefore refuses, before calling Redis, any call whose arithmetic
//! could leave that range; the script checks the same bounds again (against
//! the time it actually uses, which may be the client's later last-seen time
//! or Redis's own clock) before its first write.
//!
//! With `now` the time of the decision (each policy's bound is in its
//! descriptor, [`crate::policies::RedisPolicy::bound`]):
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
//!
//! [`check_limit`] answers, for a config checker, whether a limit is exact at
//! every time until [`HORIZON_MS`] (year 2100): GCRA then takes limits up to
//! about 2,195 per window, the other policies any limit with windows up to
//! about 9×10^15 ms.

use tollgate::{Plan, Policy};

use crate::policies::{self, RedisPolicy};
use crate::{RedisStoreConfig, RedisStoreError};

/// The largest integer a Lua number holds exactly: 2^53 - 1.
pub const MAX_EXACT: u64 = (1 << 53) - 1;

/// The latest decision time [`check_limit`] asks a limit to be exact at:
/// 2100-01-01T00:00:00Z in ms since the Unix epoch. A limit that passes is
/// served exactly by the Redis store for every decision until then.
pub const HORIZON_MS: u64 = 4_102_444_800_000;

/// The descriptor of `name`, or [`RedisStoreError::UnsupportedPolicy`].
fn descriptor(name: &str) -> Result<&'static RedisPolicy, RedisStoreError> {
    policies::by_name(name).ok_or_else(|| RedisStoreError::UnsupportedPolicy(name.to_owned()))
}

/// Checks one limit of `policy_name` (`limit` per `window_ms`) against the
/// store's bounds: `window_ms + margin_ms` always, and the policy's
/// [`policies::Bound`] at `now_ms` when given. `what` names the limit in
/// the message.
fn check_one(
    what: &str,
    policy_name: &str,
    limit: u32,
    window_ms: u64,
    now_ms: Option<u64>,
    margin_ms: u64,
) -> Result<(), RedisStoreError> {
    let policy = descriptor(policy_name)?;
    let max = u128::from(MAX_EXACT);
    let window = u128::from(window_ms);
    if window + u128::from(margin_ms) > max {
        return Err(RedisStoreError::OutOfRange(format!(
            "{what}: window_ms {window} plus the expiry margin {margin_ms} exceeds 2^53 - 1"
        )));
    }
    let Some(now) = now_ms.map(u128::from) else {
        return Ok(());
    };
    let largest = (policy.bound.largest)(now, u128::from(limit), window);
    if largest > max {
        return Err(RedisStoreError::OutOfRange(format!(
            "{what} ({policy_name}, limit {limit}, window_ms {window}) at now_ms {now}: {} = {largest} exceeds 2^53 - 1 = {MAX_EXACT}",
            policy.bound.formula
        )));
    }
    Ok(())
}

/// Checks that every limit of `plan` can be decided exactly at `now_ms`
/// (`None` when the time is read from Redis: then only the time-free bounds
/// are checked here and the script checks the rest).
///
/// # Errors
/// [`RedisStoreError::OutOfRange`] naming the limit and the bound, or
/// [`RedisStoreError::UnsupportedPolicy`].
pub fn check(plan: &Plan, now_ms: Option<u64>, margin_ms: u64) -> Result<(), RedisStoreError> {
    if let Some(now) = now_ms {
        if now > MAX_EXACT {
            return Err(RedisStoreError::OutOfRange(format!(
                "now_ms {now} exceeds 2^53 - 1 = {MAX_EXACT}"
            )));
        }
    }
    for limit in plan.limits() {
        let policy = limit.policy();
        check_one(
            &format!("limit {:?}", limit.name()),
            policy.name(),
            policy.limit(),
            policy.window_ms(),
            now_ms,
            margin_ms,
        )?;
    }
    Ok(())
}

/// Whether some decision of `plan` could be exact on a store whose expiry
/// margin is `margin_ms`: [`check`] at time 0, the earliest, so a plan
/// refused here is refused at every time (for `tollgate replay`, whose
/// sessions choose their own times, to refuse such a plan where it is
/// named rather than on every call).
///
/// # Errors
/// As [`check`].
pub fn check_servable(plan: &Plan, margin_ms: u64) -> Result<(), RedisStoreError> {
    check(plan, Some(0), margin_ms)
}

/// [`check_servable`] for a plan of one limit that has no name of its own
/// (`tollgate replay`'s `new`), which the error names by its numbers.
///
/// # Errors
/// As [`check`].
pub fn check_servable_limit(
    policy_name: &str,
    limit: u32,
    window_ms: u64,
    margin_ms: u64,
) -> Result<(), RedisStoreError> {
    let what = format!("{policy_name} {limit} per {window_ms} ms");
    check_one(&what, policy_name, limit, window_ms, Some(0), margin_ms)
}

/// Whether the Redis store (with its default configuration) can serve a
/// limit of `limit` per `window_ms` under the policy named `policy_name`
/// exactly, at every decision time up to [`HORIZON_MS`] (year 2100): for
/// `tollgate check` and start-up, which refuse a config whose limits the
/// store could never answer.
///
/// # Errors
/// [`RedisStoreError::UnsupportedPolicy`] for a policy the store has no
/// script for; [`RedisStoreError::OutOfRange`] saying which bound fails,
/// e.g. `gcra, limit 10000, window_ms 1000 ...: (now_ms + 2 * window_ms) *
/// limit = ... exceeds 2^53 - 1` (permanent errors: retrying cannot help).
pub fn check_limit(policy_name: &str, limit: u32, window_ms: u64) -> Result<(), RedisStoreError> {
    check_one(
        &format!("a limit of {limit} per {window_ms} ms served until {HORIZON_MS} ms (2100-01-01)"),
        policy_name,
        limit,
        window_ms,
        Some(HORIZON_MS),
        RedisStoreConfig::default().expiry_margin_ms,
    )
}

/// Which number of a limit [`check_limit`] refused is the one to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtFault {
    /// The window alone is out of range, whatever the limit.
    Window,
    /// The same window with a limit of 1 would pass: the limit is too large.
    Limit,
}

/// For a limit [`check_limit`] refused: the window when the same window
/// with a limit of 1 fails too, else the limit (what `tollgate check` points
/// at in a file, and what `tollgate proxy` names among its flags).
pub fn at_fault(policy_name: &str, window_ms: u64) -> AtFault {
    if check_limit(policy_name, 1, window_ms).is_ok() {
        AtFault::Limit
    } else {
        AtFault::Window
    }
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
    fn check_servable_refuses_a_plan_no_time_could_serve() {
        for name in tollgate::POLICY_NAMES {
            assert!(check_servable(&plan(name, 1_000, 1_000_000_000), 3_600_000).is_ok());
            assert!(check_servable(&plan(name, 1, MAX_EXACT), 3_600_000).is_err());
        }
        for name in ["sliding-window", "token-bucket"] {
            let longest = MAX_EXACT - 3_600_000;
            assert!(check_servable(&plan(name, 1, longest), 3_600_000).is_ok());
            assert!(check_servable(&plan(name, 1, longest + 1), 3_600_000).is_err());
        }
        // GCRA's bound at time 0: 2 * window_ms * limit.
        let edge = MAX_EXACT / 2 / 4;
        assert!(check_servable(&plan("gcra", 4, edge), 0).is_ok());
        assert!(check_servable(&plan("gcra", 4, edge + 1), 0).is_err());
    }

    #[test]
    fn check_limit_refuses_what_the_store_could_never_serve() {
        for name in tollgate::POLICY_NAMES {
            assert!(check_limit(name, 1_000, 1_000_000_000).is_ok(), "{name}");
            // "100000000000d": never exact.
            let error = check_limit(name, 10, 100_000_000_000 * 86_400_000).unwrap_err();
            assert!(matches!(error, RedisStoreError::OutOfRange(_)), "{error}");
            assert!(error.to_string().contains("exceeds 2^53 - 1"), "{error}");
            assert!(!error.is_transient());
        }
        // GCRA scales times by the limit: exact until 2100 up to ~2,195 per window.
        assert!(check_limit("gcra", 2_000, 1_000).is_ok());
        let error = check_limit("gcra", 10_000, 1_000).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("(now_ms + 2 * window_ms) * limit"),
            "{error}"
        );
        assert!(check_limit("sliding-window", 10_000, 1_000).is_ok());
        assert!(matches!(
            check_limit("leaky-bucket", 1, 1),
            Err(RedisStoreError::UnsupportedPolicy(_))
        ));
    }
}
