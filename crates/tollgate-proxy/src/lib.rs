//! # tollgate-proxy
//!
//! tollgate as a reverse proxy in front of an API that has no rate limiting
//! of its own: allowed requests go to the upstream unchanged (method, path,
//! query, headers, streaming bodies; only hop-by-hop headers such as
//! `Connection` are dropped, as HTTP requires), rejected ones are answered
//! by the proxy with `429` and the IETF RateLimit headers. An upstream that
//! cannot be reached gives `502` with a body saying so, one that does not
//! start answering in time `504`, an upload that stops moving `504` or
//! `408` ([`upload`]).
//!
//! The proxy is the [`tollgate_tower::RateLimitLayer`] in front of a
//! forwarding service ([`forward::Forward`]) and nothing else ([`service`]:
//! no router, every path and method goes the same way), served on one
//! listener ([`run`]), or thread-per-core on several ([`workers`], each
//! worker anywhere or on a CPU of its own: [`Placement`]), through
//! `tollgate_connections` (header-read and idle timeouts, a cap on open
//! connections):
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate_proxy::Error> {
//! use std::sync::Arc;
//! use tollgate::{AnyPolicy, Limit, MemoryBackend, Plan, SystemClock};
//! use tollgate_proxy::{KeySource, ProxyConfig};
//! use tollgate_tower::RateLimitConfig;
//!
//! let plan = Plan::new("proxy", vec![Limit::new("1s", AnyPolicy::from_name("gcra", 100, 1_000)?, false)])?;
//! let limits = RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), Arc::new(SystemClock));
//! let config = ProxyConfig::new("http://127.0.0.1:3000", KeySource::Peer { trusted_proxies: 0 }, limits)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8082").await?;
//! tollgate_proxy::run(listener, config, std::future::pending()).await
//! # }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderName, Request};
use tokio::net::TcpListener;
use tollgate_connections::{Limits, Slots};
use tollgate_tower::{
    ApiKey, HeaderKey, KeyExtractor, NoKey, PeerIp, RateLimit, RateLimitConfig, RateLimitLayer,
};
use tower::Layer;

mod body;
mod counted;
mod error;
pub mod forward;
mod hop_by_hop;
pub mod options;
mod placement;
mod pool;
mod unforwardable;
mod unrelayable;
pub mod upload;
mod upstream;
pub mod workers;

pub use body::ForwardBody;
pub use error::Error;
pub use forward::Forward;
pub use placement::Placement;
pub use upstream::Upstream;
pub use workers::{bind_workers, run_workers};

/// Where the proxy reads the client key from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// The client's IP address: the TCP peer, or with `trusted_proxies > 0`
    /// the address that many proxies back in `X-Forwarded-For` (see
    /// [`PeerIp::behind_proxies`]).
    Peer {
        /// How many reverse proxies in front of this one append to `X-Forwarded-For`.
        trusted_proxies: usize,
    },
    /// The value of a header (e.g. `X-Client-Id`).
    Header(HeaderName),
    /// The API key: `Authorization: Bearer TOKEN` or `X-API-Key`.
    ApiKey,
}

impl KeySource {
    /// The key of `request`, received from `peer` (when known); none for a
    /// request the proxy will not forward, which [`KeySource::no_key`] then
    /// refuses (see [`unforwardable`]).
    fn key<B>(&self, request: &Request<B>, peer: Option<SocketAddr>) -> Option<String> {
        if unforwardable::why_unforwardable(request).is_some() {
            return None;
        }
        match self {
            KeySource::Peer { trusted_proxies } => {
                PeerIp::behind_proxies(*trusted_proxies).key_for_peer(request, peer)
            }
            KeySource::Header(name) => HeaderKey::new(name.clone()).extract(request),
            KeySource::ApiKey => ApiKey.extract(request),
        }
    }

    /// Why `request` has no key, for the 400 (the header looked for, or
    /// why its value cannot be used).
    fn no_key<B>(&self, request: &Request<B>) -> NoKey {
        if let Some(why) = unforwardable::why_unforwardable(request) {
            return NoKey::Unusable(why);
        }
        match self {
            KeySource::Peer { .. } => NoKey::Absent(None),
            KeySource::Header(name) => HeaderKey::new(name.clone()).why_missing(request),
            KeySource::ApiKey => ApiKey.why_missing(request),
        }
    }
}

/// The peer's address is read from the request's extensions (axum's
/// `ConnectInfo<SocketAddr>`), for a [`Proxy`] served by another loop than
/// [`run`]'s.
impl<B> KeyExtractor<B> for KeySource {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        self.key(request, tollgate_tower::key::peer_addr(request))
    }

    fn why_missing(&self, request: &Request<B>) -> NoKey {
        self.no_key(request)
    }
}

/// The key source of one client connection, which knows its peer: [`run`]
/// makes one per connection, so that no request carries the peer's address
/// in its extensions (three allocations per request).
#[derive(Debug, Clone)]
struct ConnectionKey {
    source: KeySource,
    peer: SocketAddr,
}

impl<B> KeyExtractor<B> for ConnectionKey {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        self.source.key(request, Some(self.peer))
    }

    fn why_missing(&self, request: &Request<B>) -> NoKey {
        self.source.no_key(request)
    }
}

/// Everything the proxy needs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    upstream: Upstream,
    key: KeySource,
    limits: RateLimitConfig,
    response_timeout: Duration,
    resend_after_idle: Duration,
    connections: Limits,
}

impl ProxyConfig {
    /// Forwards to `upstream` the requests that `limits` allows, per client
    /// key read from `key`. Missing keys, store failures and the refusal
    /// bodies follow `limits` (by default: 400, 503, plain text). The
    /// upstream gets 30 s to start answering ([`ProxyConfig::response_timeout`]).
    ///
    /// # Errors
    /// [`Error::InvalidUpstream`] (see [`Upstream::parse`]).
    pub fn new(upstream: &str, key: KeySource, limits: RateLimitConfig) -> Result<Self, Error> {
        Ok(Self {
            upstream: Upstream::parse(upstream)?,
            key,
            limits,
            response_timeout: Duration::from_secs(30),
            resend_after_idle: forward::RESEND_AFTER_IDLE,
            connections: Limits::default(),
        })
    }

    /// How long to wait for the upstream's response head before answering
    /// `504 Gateway Timeout`, counted from the end of the request's upload
    /// (from its start when it has no body), and how long an upload may
    /// stop moving (`504` when the upstream stopped taking it, `408` when
    /// the client stopped sending it): a slow upload that keeps moving, or
    /// a slow response body, is not cut off.
    #[must_use]
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a kept upstream connection may have been idle (since its
    /// previous request began) for a request sent on it to be copied first,
    /// so that it can be sent again should the upstream close the
    /// connection as it arrives (by default 100 ms:
    /// [`Forward::resend_after_idle`]).
    #[must_use]
    pub fn resend_after_idle(mut self, idle: Duration) -> Self {
        self.resend_after_idle = idle;
        self
    }

    /// The limits on client connections (header-read and idle timeouts, the
    /// cap on open connections per listen address); by default
    /// `tollgate_connections`'s defaults.
    #[must_use]
    pub fn connection_limits(mut self, limits: Limits) -> Self {
        self.connections = limits;
        self
    }

    /// The limits on client connections.
    pub fn connections(&self) -> Limits {
        self.connections
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The rate-limit settings.
    pub fn limits(&self) -> &RateLimitConfig {
        &self.limits
    }
}

/// The proxy as one service: the rate limit decides each request (and
/// writes the refusals and the RateLimit headers), [`Forward`] forwards the
/// allowed ones. Every path and method is handled alike, so there is no
/// router in between: a request's body and future are not boxed again on
/// the way. It serves hyper's requests (`Request<hyper::body::Incoming>`);
/// for [`KeySource::Peer`], [`run`] gives each connection's copy its peer's
/// address, and another server loop puts it into each request as axum's
/// `ConnectInfo<SocketAddr>`.
pub type Proxy = RateLimit<Forward, KeySource>;

/// The [`Proxy`] service that `config` describes. Each call builds a new
/// forwarder, with its own upstream connections: one per worker thread.
pub fn service(config: ProxyConfig) -> Proxy {
    RateLimitLayer::new(config.limits, config.key).layer(
        Forward::new(config.upstream, config.response_timeout)
            .resend_after_idle(config.resend_after_idle),
    )
}

/// Serves the proxy on `listener` until `shutdown` completes, then lets the
/// requests in flight finish. Client connections are held to the config's
/// [`ProxyConfig::connection_limits`].
///
/// # Errors
/// None today (accept errors are retried, as `axum::serve` does); the
/// `Result` leaves room for a listener that fails for good.
pub async fn run(
    listener: TcpListener,
    config: ProxyConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let slots = Slots::new(config.connections.max_connections);
    serve_with_slots(listener, config, slots, shutdown).await;
    Ok(())
}

/// [`run`] with the connection slots of its listen address, which the
/// thread-per-core workers share.
pub(crate) async fn serve_with_slots(
    listener: TcpListener,
    config: ProxyConfig,
    slots: Slots,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let limits = config.connections;
    let store = config.limits().store().clone();
    let proxy = service(config);
    let service_for = move |peer| {
        proxy
            .clone()
            .map_key(|source| ConnectionKey { source, peer })
    };
    tollgate_connections::serve(listener, service_for, limits, slots, shutdown).await;
    // Before the runtime ends, with what the store still runs on it (a
    // Redis store's late replies and refunds); what is left unsettled
    // stays counted, and a guarded store logs it.
    let _ = store.settle(tollgate::SETTLE_WITHIN).await;
}
