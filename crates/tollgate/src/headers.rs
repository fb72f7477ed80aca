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

use std::ops::Range;

use crate::plan::PlanDecision;

/// One of the header fields a decision is told by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// `RateLimit-Policy`: each enforced limit's quota and window.
    RateLimitPolicy,
    /// `RateLimit`: what each enforced limit has left, and when it is back.
    RateLimit,
    /// `Retry-After`: how long to wait before the same request can pass.
    RetryAfter,
}

impl Field {
    /// The field's name as HTTP/2 and gRPC metadata write it (lower case).
    pub const fn name(self) -> &'static str {
        match self {
            Self::RateLimitPolicy => RATELIMIT_POLICY,
            Self::RateLimit => RATELIMIT,
            Self::RetryAfter => RETRY_AFTER,
        }
    }
}

/// The header values for one decision, written back to back into one
/// `String` (one allocation, which an HTTP front end can hand over whole
/// to its header values instead of copying each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// `RateLimit-Policy`, `RateLimit`, then `Retry-After` (empty when absent).
    text: String,
    /// Where `RateLimit-Policy`'s value ends and `RateLimit`'s begins.
    policy_end: usize,
    /// Where `RateLimit`'s value ends and `Retry-After`'s begins.
    ratelimit_end: usize,
}

/// The `RateLimit-Policy` header field name, as HTTP writes it (lower case).
pub const RATELIMIT_POLICY: &str = "ratelimit-policy";
/// The `RateLimit` header field name.
pub const RATELIMIT: &str = "ratelimit";
/// The `Retry-After` header field name.
pub const RETRY_AFTER: &str = "retry-after";

/// Room for the usual plan of a limit or two, so that writing the values
/// takes one allocation.
const TEXT_BYTES: usize = 128;

impl RateLimitHeaders {
    /// The header values for `decision`, taken against the plan named `plan`.
    pub fn new(plan: &str, decision: &PlanDecision) -> Self {
        Self::combined([(plan, decision)])
    }

    /// The header values for several decisions of one request (Envoy's
    /// descriptors, each against its own plan): every enforced limit of every
    /// decision, in order, and `Retry-After` for the longest wait among the
    /// rejecting decisions, when waiting cures them all (none when one asks
    /// for more than its limit: retrying after the others' wait still fails).
    pub fn combined<'a, I>(decisions: I) -> Self
    where
        I: IntoIterator<Item = (&'a str, &'a PlanDecision)>,
        I::IntoIter: Clone,
    {
        let decisions = decisions.into_iter();
        let mut text = String::with_capacity(TEXT_BYTES);
        // One pass per value, so that both go into the one buffer.
        let mut retry_after_ms: Option<u64> = None;
        let mut curable = true;
        for (plan, decision) in decisions.clone() {
            write_items(&mut text, 0, plan, decision, Value::Policy);
            match (decision.allowed, decision.retry_after_ms) {
                (true, _) => {}
                (false, Some(ms)) => {
                    retry_after_ms = Some(retry_after_ms.map_or(ms, |m| m.max(ms)))
                }
                (false, None) => curable = false,
            }
        }
        let retry_after_ms = retry_after_ms.filter(|_| curable);
        let policy_end = text.len();
        for (plan, decision) in decisions {
            write_items(&mut text, policy_end, plan, decision, Value::RateLimit);
        }
        let ratelimit_end = text.len();
        if let Some(ms) = retry_after_ms {
            text.push_str(itoa::Buffer::new().format(seconds_up(ms)));
        }
        Self {
            text,
            policy_end,
            ratelimit_end,
        }
    }

    /// The value of `RateLimit-Policy` (empty when every limit is a shadow one).
    pub fn policy(&self) -> &str {
        &self.text[..self.policy_end]
    }

    /// The value of `RateLimit` (empty when every limit is a shadow one).
    pub fn ratelimit(&self) -> &str {
        &self.text[self.policy_end..self.ratelimit_end]
    }

    /// The value of `Retry-After` (delay in seconds, rounded up so that it is
    /// never earlier than the real wait): present only on a rejection that
    /// waiting can cure.
    pub fn retry_after(&self) -> Option<&str> {
        Some(&self.text[self.ratelimit_end..]).filter(|v| !v.is_empty())
    }

    /// The fields to send, as (field, value) pairs in this order:
    /// `RateLimit-Policy` and `RateLimit` (left out when every limit is a
    /// shadow one, so there is nothing to say), then `Retry-After` when set.
    pub fn fields(&self) -> impl Iterator<Item = (Field, &str)> {
        self.field_ranges()
            .map(|(field, range)| (field, &self.text[range]))
    }

    /// [`Self::fields`], each value given by where it sits in the text
    /// [`Self::into_text`] hands over.
    pub fn field_ranges(&self) -> impl Iterator<Item = (Field, Range<usize>)> {
        let (policy_end, ratelimit_end, end) =
            (self.policy_end, self.ratelimit_end, self.text.len());
        let limits = (policy_end > 0)
            .then_some([
                (Field::RateLimitPolicy, 0..policy_end),
                (Field::RateLimit, policy_end..ratelimit_end),
            ])
            .into_iter()
            .flatten();
        let retry_after = (end > ratelimit_end).then_some((Field::RetryAfter, ratelimit_end..end));
        limits.chain(retry_after)
    }

    /// Every value, back to back, in the order of [`Self::field_ranges`].
    pub fn into_text(self) -> String {
        self.text
    }
}

/// Which of the two per-limit values [`write_items`] writes.
#[derive(Clone, Copy)]
enum Value {
    Policy,
    RateLimit,
}

/// Appends one value's items for `decision`'s enforced limits to `text`,
/// where that value began at `start` (written piece by piece: this runs for
/// every answer of every front end).
fn write_items(text: &mut String, start: usize, plan: &str, decision: &PlanDecision, value: Value) {
    let mut number = itoa::Buffer::new();
    for limit in decision.limits.iter().filter(|l| !l.shadow) {
        if text.len() > start {
            text.push_str(", ");
        }
        push_sf_string(text, &[plan, "-", &limit.name]);
        let d = &limit.decision;
        let mut param = |key: &str, n: u64| {
            text.push_str(key);
            text.push_str(number.format(n));
        };
        match value {
            Value::Policy => {
                param(";q=", d.limit.into());
                param(";w=", seconds_up(limit.window_ms));
            }
            Value::RateLimit => {
                param(";r=", d.remaining.into());
                param(";t=", seconds_up(d.reset_after_ms));
            }
        }
    }
}

/// Milliseconds as whole seconds, rounded up.
pub fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// Appends the concatenation of `parts` as a structured-field string (RFC
/// 8941 sf-string): quoted, its content written by [`push_sf_string_content`].
fn push_sf_string(out: &mut String, parts: &[&str]) {
    out.push('"');
    for part in parts {
        push_sf_string_content(out, part);
    }
    out.push('"');
}

/// Appends `text` as the inside of a structured-field string (RFC 8941
/// sf-string, without its quotes): `"` and `\` escaped, and every
/// character outside printable ASCII (CR, LF and the other control
/// characters, DEL, anything not ASCII) replaced by `?`.
///
/// The one way a plan's or a limit's name is made fit for a header: the
/// items of the fields here, and Envoy's `current_limit.name`, which Envoy
/// writes between quotes into its `x-ratelimit-limit` header as it comes
/// (a CR or LF there would split the response, a `"` end the string).
pub fn push_sf_string_content(out: &mut String, text: &str) {
    // Names are plain as a rule: copied whole, not char by char.
    if text
        .bytes()
        .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
    {
        out.push_str(text);
        return;
    }
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
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
            headers.policy(),
            r#""free-1s";q=2;w=1, "free-1d";q=1000;w=86400"#
        );
        assert_eq!(
            headers.ratelimit(),
            r#""free-1s";r=1;t=1, "free-1d";r=999;t=87"#
        );
        assert_eq!(headers.retry_after(), None);
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
        assert_eq!(headers.retry_after(), Some("1"));
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
        assert_eq!(
            both.policy(),
            format!("{}, {}", one.policy(), other.policy())
        );
        assert_eq!(
            both.ratelimit(),
            format!("{}, {}", one.ratelimit(), other.ratelimit())
        );
        assert_eq!(both.retry_after(), Some("1"));
        let fields: Vec<_> = both.fields().map(|(field, _)| field.name()).collect();
        assert_eq!(fields, ["ratelimit-policy", "ratelimit", "retry-after"]);
    }

    #[test]
    fn combined_sends_no_retry_after_when_one_rejection_can_never_pass() {
        // One decision waiting cures (500 ms), one whose cost is over the
        // limit (no wait helps): retrying after the first wait still fails.
        let limiter = PlanLimiter::new();
        let plan = plan();
        limiter.check(&plan, "b", 0, 2);
        let curable = limiter.check(&plan, "b", 500, 1);
        assert_eq!(curable.retry_after_ms, Some(500));
        let never = limiter.check(&plan, "c", 500, 1_000);
        assert_eq!(never.retry_after_ms, None);
        for pair in [
            [("p", &curable), ("q", &never)],
            [("q", &never), ("p", &curable)],
        ] {
            assert_eq!(RateLimitHeaders::combined(pair).retry_after(), None);
        }
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
        out.clear();
        push_sf_string(&mut out, &["plain", "-", "a\"b"]);
        assert_eq!(out, r#""plain-a\"b""#);
    }

    #[test]
    fn ranges_find_each_value_in_the_text() {
        let limiter = PlanLimiter::new();
        let plan = plan();
        limiter.check(&plan, "a", 0, 2);
        let headers = RateLimitHeaders::new("free", &limiter.check(&plan, "a", 1, 1));
        let fields: Vec<_> = headers.fields().map(|(f, v)| (f, v.to_owned())).collect();
        let ranges: Vec<_> = headers.field_ranges().collect();
        let text = headers.into_text();
        let from_ranges: Vec<_> = ranges
            .into_iter()
            .map(|(f, r)| (f, text[r].to_owned()))
            .collect();
        assert_eq!(fields, from_ranges);
        assert_eq!(
            fields,
            [
                (
                    Field::RateLimitPolicy,
                    r#""free-1s";q=2;w=1, "free-1d";q=1000;w=86400"#.to_owned()
                ),
                (
                    Field::RateLimit,
                    r#""free-1s";r=0;t=1, "free-1d";r=998;t=173"#.to_owned()
                ),
                (Field::RetryAfter, "1".to_owned()),
            ]
        );
    }
}
