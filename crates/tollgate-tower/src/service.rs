//! The [`tower::Service`] that decides each request before the inner service
//! sees it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Full};
use tower::Service;

use tollgate::RateLimitHeaders;
use tollgate_http::insert_headers;

use crate::config::{Cost, MissingKey, RateLimitConfig, Refusal};
use crate::key::KeyExtractor;
use crate::key::NoKey;

/// The body of a [`RateLimit`] response: the inner service's body, or the
/// layer's own answer.
pub type ResponseBody<B> = Either<B, Full<Bytes>>;

/// The future of a [`RateLimit`] call.
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

/// Rate-limits the requests of an inner service per client key.
///
/// Built by [`crate::RateLimitLayer`]. Clones share the config and the
/// store, hence one budget.
#[derive(Debug, Clone)]
pub struct RateLimit<S, K> {
    inner: S,
    config: Arc<RateLimitConfig>,
    key: K,
}

impl<S, K> RateLimit<S, K> {
    /// Wraps `inner`, deciding by `config` and keying with `key`.
    pub fn new(inner: S, config: RateLimitConfig, key: K) -> Self {
        Self::from_parts(inner, Arc::new(config), key)
    }

    pub(crate) fn from_parts(inner: S, config: Arc<RateLimitConfig>, key: K) -> Self {
        Self { inner, config, key }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The same service (the same config, store and inner service) keying
    /// requests with `f(key)` instead: e.g. a key extractor that knows its
    /// connection's peer, made once per connection.
    pub fn map_key<K2>(self, f: impl FnOnce(K) -> K2) -> RateLimit<S, K2> {
        RateLimit {
            inner: self.inner,
            config: self.config,
            key: f(self.key),
        }
    }
}

impl<S, K, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, K>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    K: KeyExtractor<ReqBody>,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The instance that was polled ready goes into the future; a fresh
        // clone stays behind for the next call (tower's usual swap).
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let config = self.config.clone();
        let key = self.key.extract(&request);
        let no_key = key.is_none().then(|| self.key.why_missing(&request));
        let cost = request.extensions().get::<Cost>().map_or(1, |c| c.0.max(1));
        Box::pin(async move {
            let Some(key) = key else {
                let (usable, why) = match &no_key {
                    Some(NoKey::Unusable(why)) => (false, Some(why.as_str())),
                    Some(NoKey::Absent(what)) => (true, what.as_deref()),
                    None => (true, None),
                };
                return match config.missing_key {
                    MissingKey::Allow if usable => Ok(inner.call(request).await?.map(Either::Left)),
                    _ => Ok(refuse(&config, &Refusal::MissingKey { why })),
                };
            };
            let plans = config.plans.current();
            let plan = plans.plan_for(&key);
            let now = config.clock.now_ms();
            let decision = match config.store.check(plan, &key, now, cost).await {
                Ok(decision) => decision,
                // A guarded store answered every failure its policy could;
                // what is left is "unavailable".
                Err(error) => return Ok(refuse(&config, &Refusal::StoreFailed { error: &error })),
            };
            if !decision.allowed {
                let refusal = Refusal::RateLimited {
                    plan,
                    decision: &decision,
                };
                return Ok(refuse(&config, &refusal));
            }
            let mut response = inner.call(request).await?;
            if config.headers_on_allowed {
                // An allowed decision has no `Retry-After`: only the limits go in.
                let values = RateLimitHeaders::new(plan.name(), &decision);
                insert_headers(response.headers_mut(), values);
            }
            Ok(response.map(Either::Left))
        })
    }
}

fn refuse<B>(config: &RateLimitConfig, refusal: &Refusal<'_>) -> Response<ResponseBody<B>> {
    config.refusal_response(refusal).map(Either::Right)
}
