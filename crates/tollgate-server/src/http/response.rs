//! Turning decisions and refusals into HTTP responses.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tollgate::RateLimitHeaders;

use super::decision_json::DecisionJson;

use crate::server::Decided;
use crate::Error;

/// A request refused without a decision: a 4xx (or, for a store no
/// failure policy answers, a 500) with `{"error": "..."}` saying what is
/// wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// 400, 404, 405, 413 or 500.
    pub status: StatusCode,
    /// What is wrong, for the caller.
    pub message: String,
}

impl Rejection {
    /// A 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// Any other status.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// A decision that could not be taken, in HTTP terms: the caller's
/// mistakes (an unknown plan, a cost over the maximum) are a 400; a store
/// error handed back by the failure policy `unavailable` is a 503 that
/// does not show the error (a Redis error names the script's SHA and Lua
/// line: the guarded store logs it instead).
impl From<Error> for Rejection {
    fn from(error: Error) -> Self {
        match &error {
            Error::UnknownPlan { .. } | Error::CostOverMaximum { .. } => {
                Self::bad_request(error.to_string())
            }
            Error::Store(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the rate limit store is unavailable",
            ),
            Error::Inspect(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
            _ => Self::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
        }
    }
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: &'a str,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        json(
            self.status,
            &ErrorBody {
                error: &self.message,
            },
            HeaderMap::new(),
        )
    }
}

/// A JSON response. Serializing these plain structs cannot fail; if it ever
/// did, the caller gets a 500 rather than a panic.
pub fn json(status: StatusCode, body: &impl Serialize, headers: HeaderMap) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut response = json_bytes(status, bytes);
            response.headers_mut().extend(headers);
            response
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// A response of `status` with `body`, already JSON, built in place: the
/// `Content-Type` first, then whatever the caller adds.
pub(crate) fn json_bytes(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The IETF RateLimit fields for a decision, plus `Retry-After` on a
/// rejection that waiting can cure (formatted by [`RateLimitHeaders`],
/// written by [`tollgate_http::insert_headers`]).
pub fn rate_limit_headers(decided: &Decided) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(3);
    insert_rate_limit_headers(&mut headers, decided);
    headers
}

/// [`rate_limit_headers`], added to `headers` (a response's own).
pub(crate) fn insert_rate_limit_headers(headers: &mut HeaderMap, decided: &Decided) {
    let values = RateLimitHeaders::new(decided.plan().name(), &decided.decision);
    tollgate_http::insert_headers(headers, values);
}

/// The full response for a decision: `status`, rate-limit headers and the
/// decision as JSON. For a look (`cost` 0), `allowed` says whether a request
/// of cost 1 would be allowed now.
pub fn decision_response(
    status: StatusCode,
    client: &str,
    cost: u32,
    decided: &Decided,
) -> Response {
    let decision = &decided.decision;
    let allowed = if cost == 0 {
        decision
            .limits
            .iter()
            .all(|l| l.shadow || l.decision.remaining >= 1)
    } else {
        decision.allowed
    };
    let body = DecisionJson {
        allowed,
        client,
        plan: decided.plan().name(),
        cost,
        retry_after_ms: decision.retry_after_ms,
        decided_by: decision.decided_by.as_str(),
        limits: &decision.limits,
    };
    let mut response = json_bytes(status, body.to_vec());
    insert_rate_limit_headers(response.headers_mut(), decided);
    response
}
