//! The IETF RateLimit header fields (draft-ietf-httpapi-ratelimit-headers),
//! formatted once here for every front end (HTTP API, middleware, proxy, Envoy).
//!
//! ```text
//! RateLimit-Policy: "free-1s";q=10;w=1, "free-1d";q=1000;w=86400
//! RateLimit: "free-1s";r=3;t=1, "free-1d";r=997;t=260
//! Retry-After: 1
//! ```
//!
//! Each limit is one item named `PLAN-LIMIT`; `q` is its quota, `w` its
//! window and `t` the time until its quota is fully back, in whole seconds
//! rounded up. Shadow limits are left out: they never reject, so clients need
//! not pace themselves by them.

use crate::plan::PlanDecision;

/// The header values for one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// The value of `RateLimit-Policy`.
    pub policy: String,
    /// The value of `RateLimit`.
    pub ratelimit: String,
    /// The value of `Retry-After` (delay in seconds, rounded up so that it is
    /// never earlier than the real wait): present only on a rejection that
    /// waiting can cure.
    pub retry_after: Option<String>,
}

/// The `RateLimit-Policy` header field name, as HTTP writes it (lower case).
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// The `RateLimit` header field name.
pub const RATELIMIT: &str = "ratelimit";
/// The `Retry-After` header field name.
pub const RETRY_AFTER: &str = "retry-after";

impl RateLimitHeaders {
    /// The header values for `decision`, taken against the plan named `plan`.
    pub fn new(plan: &str, decision: &PlanDecision) -> Self {
        Self::combined([(plan, decision)])
    }

    /// The header values for several decisions of one request (Envoy's
    /// descriptors, each against its own plan): every enforced limit of every
    /// decision, in order, and `Retry-After` for the longest wait among the
    /// rejecting decisions that waiting can cure.
    pub fn combined<'a>(decisions: impl IntoIterator<Item = (&'a str, &'a PlanDecision)>) -> Self {
        // One allocation per value for the usual plan of a limit or two.
        let mut policy = String::with_capacity(64);
        let mut ratelimit = String::with_capacity(64);
        let mut retry_after_ms: Option<u64> = None;
        for (plan, decision) in decisions {
            write_items(&mut policy, &mut ratelimit, plan, decision);
            if let (false, Some(ms)) = (decision.allowed, decision.retry_after_ms) {
                retry_after_ms = Some(retry_after_ms.map_or(ms, |m| m.max(ms)));
            }
        }
        Self {
            policy,
            ratelimit,
            retry_after: retry_after_ms
                .map(|ms| itoa::Buffer::new().format(seconds_up(ms)).to_owned()),
        }
    }

    /// The fields to send, as (lower-case name, value) pairs in this order:
    /// `RateLimit-Policy` and `RateLimit` (left out when every limit is a
    /// shadow one, so there is nothing to say), then `Retry-After` when set.
    pub fn fields(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let limits = (!self.policy.is_empty())
            .then_some([
                (RATELIMIT_POLICY, self.policy.as_str()),
                (RATELIMIT, self.ratelimit.as_str()),
            ])
            .into_iter()
            .flatten();
        let retry_after = self.retry_after.as_deref().map(|v| (RETRY_AFTER, v));
        limits.chain(retry_after)
    }
}

/// Appends the items of `decision`'s enforced limits to both field values
/// (written piece by piece: this runs for every answer of every front end).
fn write_items(policy: &mut String, ratelimit: &mut String, plan: &str, decision: &PlanDecision) {
    let mut number = itoa::Buffer::new();
    for limit in decision.limits.iter().filter(|l| !l.shadow) {
        if !policy.is_empty() {
            policy.push_str(", ");
            ratelimit.push_str(", ");
        }
        let name_start = policy.len();
        push_sf_string(policy, &[plan, "-", &limit.name]);
        ratelimit.push_str(&policy[name_start..]);
        let d = &limit.decision;
        policy.push_str(";q=");
        policy.push_str(number.format(d.limit));
        policy.push_str(";w=");
        policy.push_str(number.format(seconds_up(limit.window_ms)));
        ratelimit.push_str(";r=");
        ratelimit.push_str(number.format(d.remaining));
        ratelimit.push_str(";t=");
        ratelimit.push_str(number.format(seconds_up(d.reset_after_ms)));
    }
}

/// Milliseconds as whole seconds, rounded up.
pub fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// Appends the concatenation of `parts` as a structured-field string (RFC
/// 8941 sf-string): quoted, with `"` and `\` escaped and characters outside
/// printable ASCII replaced by `?`.
fn push_sf_string(out: &mut String, parts: &[&str]) {
    out.push('"');
    for c in parts.iter().flat_map(|part| part.chars()) {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AnyPolicy, Limit, Plan, PlanLimiter};

    fn plan() -> Plan {
        Plan::new(
            "free",
            vec![
                Limit::new(
                    "1s",
                    AnyPolicy::from_name("sliding-window", 2, 1_000).unwrap(),
                    false,
                ),
                Limit::new(
                    "1d",
                    AnyPolicy::from_name("token-bucket", 1_000, 86_400_000).unwrap(),
                    false,
                ),
                Limit::new(
                    "dark",
                    AnyPolicy::from_name("gcra", 1, 1_000).unwrap(),
                    true,
                ),
            ],
        )
        .unwrap()
    }

    #[test]
    fn allowed_decision_lists_every_enforced_limit() {
        let limiter = PlanLimiter::new();
        let decision = limiter.check(&plan(), "a", 0, 1);
        let headers = RateLimitHeaders::new("free", &decision);
        assert_eq!(
            headers.policy,
            r#""free-1s";q=2;w=1, "free-1d";q=1000;w=86400"#
        );
        assert_eq!(
            headers.ratelimit,
            r#""free-1s";r=1;t=1, "free-1d";r=999;t=87"#
        );
        assert_eq!(headers.retry_after, None);
    }

    #[test]
    fn rejection_rounds_retry_after_up() {
        let limiter = PlanLimiter::new();
        let plan = plan();
        limiter.check(&plan, "a", 0, 1);
        limiter.check(&plan, "a", 1, 1);
        let decision = limiter.check(&plan, "a", 1, 1);
        assert!(!decision.allowed);
        assert_eq!(decision.retry_after_ms, Some(999));
        let headers = RateLimitHeaders::new("free", &decision);
        assert_eq!(headers.retry_after.as_deref(), Some("1"));
    }

    #[test]
    fn combined_joins_items_in_order_and_retries_after_the_longest_wait() {
        let limiter = PlanLimiter::new();
        let plan = plan();
        let allowed = limiter.check(&plan, "a", 0, 1);
        limiter.check(&plan, "b", 0, 2);
        let rejected = limiter.check(&plan, "b", 500, 1);
        assert_eq!(rejected.retry_after_ms, Some(500));
        let one = RateLimitHeaders::new("free", &allowed);
        let other = RateLimitHeaders::new("paid", &rejected);
        let both = RateLimitHeaders::combined([("free", &allowed), ("paid", &rejected)]);
        assert_eq!(both.policy, format!("{}, {}", one.policy, other.policy));
        assert_eq!(
            both.ratelimit,
            format!("{}, {}", one.ratelimit, other.ratelimit)
        );
        assert_eq!(both.retry_after.as_deref(), Some("1"));
        let fields: Vec<_> = both.fields().map(|(name, _)| name).collect();
        assert_eq!(fields, ["ratelimit-policy", "ratelimit", "retry-after"]);
    }

    #[test]
    fn only_shadow_limits_send_no_limit_fields() {
        let shadow = Plan::new(
            "s",
            vec![Limit::new(
                "1s",
                AnyPolicy::from_name("gcra", 1, 1_000).unwrap(),
                true,
            )],
        )
        .unwrap();
        let decision = PlanLimiter::new().check(&shadow, "a", 0, 1);
        assert_eq!(RateLimitHeaders::new("s", &decision).fields().count(), 0);
        let allowed = RateLimitHeaders::new("free", &PlanLimiter::new().check(&plan(), "a", 0, 1));
        assert_eq!(allowed.fields().count(), 2);
    }

    #[test]
    fn names_are_escaped() {
        let mut out = String::new();
        push_sf_string(&mut out, &["a\"b", "\\c\u{e9}"]);
        assert_eq!(out, r#""a\"b\\c?""#);
    }
}
