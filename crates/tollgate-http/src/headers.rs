//! The one writer of the rate-limit header fields into an HTTP header map.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue};
use tollgate::headers::Field;
use tollgate::RateLimitHeaders;

/// The `RateLimit-Policy` header field name.
pub const RATELIMIT_POLICY: HeaderName =
    HeaderName::from_static(tollgate::headers::RATELIMIT_POLICY);
/// The `RateLimit` header field name.
pub const RATELIMIT: HeaderName = HeaderName::from_static(tollgate::headers::RATELIMIT);

/// The HTTP name of `field`: a constant, so that no name is parsed per
/// answer.
fn header_name(field: Field) -> HeaderName {
    match field {
        Field::RateLimitPolicy => RATELIMIT_POLICY,
        Field::RateLimit => RATELIMIT,
        Field::RetryAfter => header::RETRY_AFTER,
    }
}

/// Inserts (replacing any earlier value) every field of `values`:
/// `RateLimit-Policy` and `RateLimit` unless every limit is a shadow one,
/// and `Retry-After` on a rejection that waiting can cure.
///
/// The values' one buffer becomes the header values' shared bytes (each
/// value a slice of it), instead of a copy per value.
pub fn insert_headers(headers: &mut HeaderMap, values: RateLimitHeaders) {
    let fields = values.field_ranges();
    let text = Bytes::from(values.into_text());
    for (field, range) in fields {
        // The core writes printable ASCII only (names are sf-strings); a
        // value that still could not be sent is left out rather than
        // failing the request.
        if let Ok(value) = HeaderValue::from_maybe_shared(text.slice(range)) {
            headers.insert(header_name(field), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{AnyPolicy, Limit, Plan, PlanLimiter};

    fn plan(shadow: bool) -> Plan {
        let policy = AnyPolicy::from_name("sliding-window", 1, 1_000).unwrap();
        Plan::new("free", vec![Limit::new("1s", policy, shadow)]).unwrap()
    }

    #[test]
    fn a_rejection_gets_all_three_fields_and_replaces_old_ones() {
        let limiter = PlanLimiter::new();
        let plan = plan(false);
        limiter.check(&plan, "a", 0, 1);
        let rejected = limiter.check(&plan, "a", 400, 1);
        let mut headers = HeaderMap::new();
        headers.insert(RATELIMIT, HeaderValue::from_static("stale"));
        insert_headers(&mut headers, RateLimitHeaders::new("free", &rejected));
        assert_eq!(headers.len(), 3);
        assert_eq!(headers[RATELIMIT_POLICY], r#""free-1s";q=1;w=1"#);
        assert_eq!(headers[RATELIMIT], r#""free-1s";r=0;t=1"#);
        assert_eq!(headers[http::header::RETRY_AFTER], "1");
    }

    #[test]
    fn shadow_only_plans_write_nothing() {
        let decision = PlanLimiter::new().check(&plan(true), "a", 0, 1);
        let mut headers = HeaderMap::new();
        insert_headers(&mut headers, RateLimitHeaders::new("free", &decision));
        assert!(headers.is_empty());
    }
}
