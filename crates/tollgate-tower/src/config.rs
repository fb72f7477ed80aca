//! What the layer decides against and how it answers: the plan, the store,
//! the clock, and the policies for the cases that are not a plain decision
//! (no client key, store failure), plus the body of the layer's own answers.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use tollgate::{Clock, Plan, PlanDecision, RateLimitHeaders, Store, StoreError};
use tollgate_http::insert_headers;
pub use tollgate_http::{RATELIMIT, RATELIMIT_POLICY};

use crate::plans::{Plans, PlansHandle};

/// What to do with a request whose client key cannot be found (no such
/// header, no peer address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKey {
    /// Answer `400 Bad Request`: the default, since letting unkeyed requests
    /// through would let any client skip the limit by leaving the key out.
    #[default]
    Reject,
    /// Pass the request to the inner service without a decision or headers
    /// (for keys that are optional, e.g. only API-key holders are limited).
    Allow,
}

/// The cost of one request, read from the request's extensions; requests
/// without it cost 1. An earlier layer (or handler-side middleware) inserts
/// it for expensive routes. A cost of 0 counts as 1 so that no request
/// escapes the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost(pub u32);

/// Why the layer answers a request itself.
#[derive(Debug)]
pub enum Refusal<'a> {
    /// The plan rejected the request (429).
    RateLimited {
        /// The plan the request was checked against.
        plan: &'a Plan,
        /// The plan's decision.
        decision: &'a PlanDecision,
    },
    /// No client key could be extracted and [`MissingKey::Reject`] is set,
    /// or the request's key cannot be used (400).
    MissingKey {
        /// What is wrong, when the extractor can say
        /// ([`crate::KeyExtractor::why_missing`]).
        why: Option<&'a str>,
    },
    /// The store failed and its failure policy (if it is a guarded store)
    /// handed the error back: 503. Put the store behind
    /// `tollgate_guard::GuardedStore` to answer outages by a failure policy.
    StoreFailed {
        /// The store's error.
        error: &'a StoreError,
    },
}

/// The body of an answer the layer gives itself, with its content type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusalBody {
    /// The `Content-Type` of `body`.
    pub content_type: HeaderValue,
    /// The bytes sent.
    pub body: Bytes,
}

impl RefusalBody {
    /// A `text/plain; charset=utf-8` body.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content_type: HeaderValue::from_static("text/plain; charset=utf-8"),
            body: Bytes::from(text.into()),
        }
    }

    /// An `application/json` body (the caller provides valid JSON).
    pub fn json(json: impl Into<String>) -> Self {
        Self {
            content_type: HeaderValue::from_static("application/json"),
            body: Bytes::from(json.into()),
        }
    }
}

type BodyFn = dyn Fn(&Refusal<'_>) -> RefusalBody + Send + Sync;

/// Everything the layer needs besides the key extractor; shared by every
/// clone of the layer and its services through an `Arc`.
#[derive(Clone)]
pub struct RateLimitConfig {
    pub(crate) plans: PlansHandle,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) headers_on_allowed: bool,
    pub(crate) missing_key: MissingKey,
    pub(crate) body: Arc<BodyFn>,
}

impl fmt::Debug for RateLimitConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitConfig")
            .field("plans", &self.plans)
            .field("headers_on_allowed", &self.headers_on_allowed)
            .field("missing_key", &self.missing_key)
            .finish_non_exhaustive()
    }
}

impl RateLimitConfig {
    /// Checks every request against `plan` in `store`, at the time `clock`
    /// reads. Defaults: headers on allowed responses too, 400 for a missing
    /// key, 503 for a store error, plain-text refusal bodies.
    pub fn new(plan: Plan, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self {
            plans: PlansHandle::new(Plans::new(plan)),
            store,
            clock,
            headers_on_allowed: true,
            missing_key: MissingKey::default(),
            body: Arc::new(default_body),
        }
    }

    /// Whether allowed responses carry the `RateLimit-Policy` and `RateLimit`
    /// headers (rejections always do).
    #[must_use]
    pub fn headers_on_allowed(mut self, yes: bool) -> Self {
        self.headers_on_allowed = yes;
        self
    }

    /// What to do when the key extractor finds no key.
    #[must_use]
    pub fn on_missing_key(mut self, policy: MissingKey) -> Self {
        self.missing_key = policy;
        self
    }

    /// The body of the layer's own answers (429, 400, 503). Status and
    /// rate-limit headers are set by the layer; only the body is yours.
    #[must_use]
    pub fn refusal_body(
        mut self,
        body: impl Fn(&Refusal<'_>) -> RefusalBody + Send + Sync + 'static,
    ) -> Self {
        self.body = Arc::new(body);
        self
    }

    /// Gives the keys in `plans` a plan of their own (e.g. paying clients on
    /// a larger plan); every other key stays on the default plan.
    #[must_use]
    pub fn plans_by_key(self, plans: HashMap<String, Plan>) -> Self {
        let default = self.plans.current().default_plan().clone();
        self.plans(Plans::new(default).with_keys(plans))
    }

    /// Checks requests against `plans` (a default plan and keys with a plan
    /// of their own).
    #[must_use]
    pub fn plans(mut self, plans: Plans) -> Self {
        self.plans = PlansHandle::new(plans);
        self
    }

    /// The plans in force now.
    pub fn current_plans(&self) -> Arc<Plans> {
        self.plans.current()
    }

    /// The store the layer decides in: a server lets it settle
    /// ([`Store::settle`]) when it shuts down, before its runtime ends.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// A handle to replace the plans while the layer serves (e.g. on a
    /// config reload); every clone of the layer and its services sees the
    /// replacement.
    pub fn plans_handle(&self) -> PlansHandle {
        self.plans.clone()
    }

    /// The answer for a refused request: status, body and (for a rate-limit
    /// rejection) the rate-limit headers and `Retry-After`.
    pub fn refusal_response(&self, refusal: &Refusal<'_>) -> Response<Full<Bytes>> {
        let status = match refusal {
            Refusal::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Refusal::MissingKey { .. } => StatusCode::BAD_REQUEST,
            Refusal::StoreFailed { .. } => StatusCode::SERVICE_UNAVAILABLE,
        };
        let body = (self.body)(refusal);
        let mut response = Response::new(Full::new(body.body));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, body.content_type);
        if let Refusal::RateLimited { plan, decision } = refusal {
            let values = RateLimitHeaders::new(plan.name(), decision);
            insert_headers(response.headers_mut(), values);
        }
        response
    }
}

/// The plain-text bodies used unless [`RateLimitConfig::refusal_body`] says otherwise.
pub fn default_body(refusal: &Refusal<'_>) -> RefusalBody {
    match refusal {
        Refusal::RateLimited { decision, .. } => match decision.retry_after_ms {
            Some(ms) => RefusalBody::text(format!(
                "rate limit exceeded: retry in {} s\n",
                tollgate::headers::seconds_up(ms)
            )),
            None => RefusalBody::text(
                "rate limit exceeded: this request costs more than the limit allows\n",
            ),
        },
        Refusal::MissingKey { why: Some(why) } => RefusalBody::text(format!("{why}\n")),
        Refusal::MissingKey { why: None } => {
            RefusalBody::text("missing client key: the request does not say who is calling\n")
        }
        Refusal::StoreFailed { .. } => RefusalBody::text("rate limiter unavailable\n"),
    }
}
