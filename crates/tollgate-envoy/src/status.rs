//! From tollgate decisions to Envoy's `DescriptorStatus` and response headers.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration;
use tollgate::headers::push_sf_string_content;
use tollgate::{LimitDecision, PlanDecision, RateLimitHeaders};

/// The status of a descriptor decided by `decision` under the plan `plan`.
///
/// A plan may hold several limits, a status reports one: for a rejection,
/// the rejecting limit with the longest wait (the first among equals, as
/// the server's metrics and logs name it); otherwise the enforced limit
/// with the fewest requests left (the one that will reject first).
pub(crate) fn descriptor_status(plan: &str, decision: &PlanDecision) -> DescriptorStatus {
    let code = if decision.allowed {
        Code::Ok
    } else {
        Code::OverLimit
    };
    let mut status = DescriptorStatus {
        code: code as i32,
        ..DescriptorStatus::default()
    };
    if let Some(limit) = reported_limit(decision) {
        let (unit, requests_per_unit) = closest_unit(limit.decision.limit, limit.window_ms);
        status.current_limit = Some(RateLimit {
            name: limit_name(plan, &limit.name),
            requests_per_unit,
            unit: unit as i32,
        });
        status.limit_remaining = limit.decision.remaining;
        status.duration_until_reset = Some(duration(limit.decision.reset_after_ms));
    }
    status
}

/// `PLAN-LIMIT`, in one allocation, written as the IETF RateLimit headers
/// write a limit's name ([`push_sf_string_content`]): Envoy puts it between
/// quotes into its `x-ratelimit-limit` header as it comes, so a CR or LF in
/// an operator's plan name would split Envoy's response and a `"` end the
/// string.
fn limit_name(plan: &str, limit: &str) -> String {
    let mut name = String::with_capacity(plan.len() + 1 + limit.len());
    push_sf_string_content(&mut name, plan);
    name.push('-');
    push_sf_string_content(&mut name, limit);
    name
}

/// A status without numbers (no rule matched, or a failure policy decided).
pub(crate) fn bare_status(code: Code) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        ..DescriptorStatus::default()
    }
}

/// The limit a status reports. A rejection names the limit the server's
/// metrics, logs and dashboard name ([`PlanDecision::refused_by`]), so that
/// every view of one refusal agrees, ties included.
fn reported_limit(decision: &PlanDecision) -> Option<&LimitDecision> {
    let chosen = if decision.allowed {
        (decision.limits.iter())
            .filter(|l| !l.shadow)
            .min_by_key(|l| l.decision.remaining)
    } else {
        decision.refused_by()
    };
    chosen.or_else(|| decision.limits.first())
}

/// Envoy's `RateLimit` has a unit, tollgate's limits a window in ms: the
/// unit nearest the window (on a log scale, so 30 s is a minute and 5 s a
/// second), with the limit scaled to that unit and rounded (at least 1).
/// A window that is exactly a unit keeps its limit as it is. A week is 7
/// days, a month 30 and a year 365, as Envoy's own ratelimit service
/// counts them.
pub(crate) fn closest_unit(limit: u32, window_ms: u64) -> (Unit, u32) {
    const DAY: u64 = 86_400_000;
    const UNITS: [(Unit, u64); 7] = [
        (Unit::Second, 1_000),
        (Unit::Minute, 60_000),
        (Unit::Hour, 3_600_000),
        (Unit::Day, DAY),
        (Unit::Week, 7 * DAY),
        (Unit::Month, 30 * DAY),
        (Unit::Year, 365 * DAY),
    ];
    let window = window_ms.max(1);
    let mut best = UNITS[0];
    for candidate in UNITS {
        // Compare |log(window / unit)|: window/unit vs unit/window.
        let distance = |unit: u64| {
            let (a, b) = (u128::from(window), u128::from(unit));
            if a >= b {
                (a, b)
            } else {
                (b, a)
            }
        };
        let (n1, d1) = distance(candidate.1);
        let (n2, d2) = distance(best.1);
        // n1/d1 < n2/d2, in integers.
        if n1 * d2 < n2 * d1 {
            best = candidate;
        }
    }
    let (unit, unit_ms) = best;
    let window = u128::from(window);
    let scaled = (u128::from(limit) * u128::from(unit_ms) + window / 2) / window;
    let requests = u32::try_from(scaled.max(1)).unwrap_or(u32::MAX);
    (unit, requests)
}

fn duration(ms: u64) -> Duration {
    Duration {
        seconds: i64::try_from(ms / 1000).unwrap_or(i64::MAX),
        // Below 1_000_000_000, so it fits.
        nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap_or(0),
    }
}

/// The IETF RateLimit headers over every plan decision of a request (items
/// joined in descriptor order), plus `Retry-After` (the longest wait of the
/// rejecting ones, when waiting can help), as [`RateLimitHeaders::combined`]
/// writes them for every front end.
pub(crate) fn response_headers<'a>(
    decisions: impl Iterator<Item = (&'a str, &'a PlanDecision)> + Clone,
) -> Vec<HeaderValue> {
    let headers = RateLimitHeaders::combined(decisions);
    let mut values = Vec::with_capacity(3);
    values.extend(headers.fields().map(|(field, value)| HeaderValue {
        key: field.name().to_owned(),
        value: value.to_owned(),
        ..HeaderValue::default()
    }));
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_the_nearest_on_a_log_scale_and_limits_scale_with_them() {
        assert_eq!(closest_unit(10, 1_000), (Unit::Second, 10));
        assert_eq!(closest_unit(10, 5_000), (Unit::Second, 2));
        assert_eq!(closest_unit(10, 30_000), (Unit::Minute, 20));
        assert_eq!(closest_unit(100, 60_000), (Unit::Minute, 100));
        assert_eq!(closest_unit(1_000, 86_400_000), (Unit::Day, 1_000));
        // The proto's longer units too, as Envoy's own ratelimit service
        // counts them: a week of 7 days, a month of 30, a year of 365.
        assert_eq!(closest_unit(1, 7 * 86_400_000), (Unit::Week, 1));
        assert_eq!(closest_unit(1, 30 * 86_400_000), (Unit::Month, 1));
        assert_eq!(closest_unit(12, 365 * 86_400_000), (Unit::Year, 12));
        assert_eq!(closest_unit(4, 2 * 86_400_000), (Unit::Day, 2));
        assert_eq!(closest_unit(5, 1), (Unit::Second, 5_000));
        assert_eq!(closest_unit(u32::MAX, 1), (Unit::Second, u32::MAX));
    }

    /// Envoy writes `current_limit.name` into its `x-ratelimit-limit`
    /// header (`name="..."`) as it comes: CR or LF would split the header,
    /// a `"` end the string. The name is written as the IETF RateLimit
    /// headers write theirs, the inside of an sf-string.
    #[test]
    fn limit_names_reach_envoys_headers_as_sf_string_content() {
        assert_eq!(limit_name("free", "1s"), "free-1s");
        assert_eq!(
            limit_name("p\r\nSet-Cookie: session=attacker", "1\"m\\"),
            "p??Set-Cookie: session=attacker-1\\\"m\\\\"
        );
        assert_eq!(limit_name("caf\u{e9}\u{1b}", "\u{7f}\t"), "caf??-??");
    }

    /// Two limits refusing with the same wait, or both never passing (a
    /// cost over each): the status names the limit `refused_by` names (the
    /// first), as the metrics and logs of the same refusal do. It named the
    /// last.
    #[test]
    fn a_tie_between_refusing_limits_reports_the_limit_refused_by_names() {
        use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter};
        let limit = |name: &str| {
            let policy = AnyPolicy::from_name("sliding-window", 2, 1_000).expect("policy");
            Limit::new(name, policy, false)
        };
        let plan = Plan::new("p", vec![limit("first"), limit("second")]).expect("plan");
        let limiter = PlanLimiter::new();
        let over_both = limiter.check(&plan, "a", 0, 3);
        assert_eq!(over_both.retry_after_ms, None);
        limiter.check(&plan, "b", 0, 2);
        let same_wait = limiter.check(&plan, "b", 10, 1);
        assert_eq!(same_wait.retry_after_ms, Some(990));
        for decision in [over_both, same_wait] {
            assert!(!decision.allowed);
            let refused = decision.refused_by().expect("refused");
            assert_eq!(refused.name.as_ref(), "first");
            let status = descriptor_status("p", &decision);
            assert_eq!(status.current_limit.expect("limit").name, "p-first");
        }
    }

    #[test]
    fn durations_split_seconds_and_nanos() {
        let d = duration(61_250);
        assert_eq!((d.seconds, d.nanos), (61, 250_000_000));
    }
}
