//! The forwarding service: sends a request on to the upstream as it came,
//! and streams the upstream's answer back.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{
    HeaderName, CONNECTION, CONTENT_TYPE, HOST, PROXY_AUTHORIZATION, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use tower::Service;

use crate::body::ForwardBody;
use crate::pool::{Conn, Pool, ReturningBody};
use crate::Error;

/// Where allowed requests go: an `http://host:port[/base]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `host:port` (port 80 when the URL has none), to connect to.
    address: String,
    /// The `Host` of a request that came without one and without an
    /// authority in its URI: the upstream's, as an HTTP client sends it.
    host: HeaderValue,
    /// Prefixed to every request path; empty or starting with `/`, never ending with one.
    base_path: String,
    url: String,
}

impl Upstream {
    /// Parses an upstream URL such as `http://127.0.0.1:3000` or
    /// `http://api.internal:8080/v2` (requests for `/x` then go to `/v2/x`).
    ///
    /// # Errors
    /// [`Error::InvalidUpstream`] when the URL does not parse, is not
    /// `http://` (TLS to the upstream is not supported), has no host, has
    /// user info (`user:password@`: the proxy sends no credentials to the
    /// upstream, so they would be dropped silently), or has a query. The
    /// error shows the URL with its user info as `***`, so that a password
    /// never reaches a log.
    pub fn parse(url: &str) -> Result<Self, Error> {
        let (shown, has_user_info) = redact_user_info(url);
        let invalid = |reason: &str| Error::InvalidUpstream {
            url: shown.clone(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| invalid(&e.to_string()))?;
        match uri.scheme() {
            Some(s) if *s == Scheme::HTTP => {}
            Some(_) => return Err(invalid("only http:// upstreams are supported")),
            None => return Err(invalid("expected a URL such as http://127.0.0.1:3000")),
        }
        if has_user_info {
            return Err(invalid(
                "user info (user:password@) is not supported: \
                 the proxy sends no credentials to the upstream; give http://HOST:PORT",
            ));
        }
        let authority = uri
            .authority()
            .ok_or_else(|| invalid("the URL has no host"))?;
        if uri.query().is_some() {
            return Err(invalid("the URL must not have a query"));
        }
        Ok(Self {
            address: format!(
                "{}:{}",
                authority.host(),
                authority.port_u16().unwrap_or(80)
            ),
            host: host_header(authority).map_err(|e| invalid(&e.to_string()))?,
            base_path: uri.path().trim_end_matches('/').to_owned(),
            url: url.to_owned(),
        })
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The path and query to ask the upstream for (origin form) for a
    /// request to `path_and_query`: the same, behind the base path if any.
    fn path_for(&self, path_and_query: Option<&PathAndQuery>) -> Result<PathAndQuery, http::Error> {
        match path_and_query {
            Some(tail) if self.base_path.is_empty() => Ok(tail.clone()),
            tail => {
                let tail = tail.map_or("/", PathAndQuery::as_str);
                Ok(PathAndQuery::try_from(format!("{}{tail}", self.base_path))?)
            }
        }
    }
}

/// `url` with the user info of its authority (what comes before an `@`
/// ahead of the path) replaced by `***`, and whether it had any: read from
/// the text, so that even a URL that does not parse is shown without it.
fn redact_user_info(url: &str) -> (String, bool) {
    let start = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[start..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    match authority.rfind('@') {
        Some(at) => (format!("{}***{}", &url[..start], &url[start + at..]), true),
        None => (url.to_owned(), false),
    }
}

/// The `Host` header for `authority`: its host, and its port unless 80
/// (what an HTTP client sends).
fn host_header(authority: &Authority) -> Result<HeaderValue, http::header::InvalidHeaderValue> {
    match authority.port_u16() {
        Some(80) => HeaderValue::from_str(authority.host()),
        _ => HeaderValue::from_str(authority.as_str()),
    }
}

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1):
/// never forwarded in either direction. Names, not strings: a string would
/// be parsed into a name again on every request.
static HOP_BY_HOP: [HeaderName; 8] = [
    CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
    PROXY_AUTHORIZATION,
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages have none: one look at their few names is cheaper than
    // eight removals, each a hash and a probe.
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
    // Headers named in Connection are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Sends requests to the upstream over HTTP/1.1 connections of its own:
/// each `Forward::new` has its pool, which its clones share (the proxy
/// builds one per worker thread, so a request is forwarded on the thread
/// that read it).
#[derive(Clone)]
pub struct Forward {
    pool: Pool,
    upstream: Arc<Upstream>,
    response_timeout: Duration,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("upstream", &self.upstream)
            .finish_non_exhaustive()
    }
}

/// Why a request could not be forwarded.
type SendError = Box<dyn StdError + Send + Sync>;

impl Forward {
    /// A forwarder to `upstream`, with a 5-second connect timeout and
    /// `response_timeout` to wait for the upstream's response head (the
    /// body then streams for as long as it takes).
    pub fn new(upstream: Upstream, response_timeout: Duration) -> Self {
        Self {
            pool: Pool::new(upstream.address.clone()),
            upstream: Arc::new(upstream),
            response_timeout,
        }
    }

    /// Rewrites `request` in place for the upstream: its path behind the
    /// base path, a `Host`, no hop-by-hop headers, HTTP/1.1; fails on a path
    /// the upstream's URL cannot be built from. Done before the request's
    /// future exists, so that the future stays small (it is moved, hence
    /// copied, several times on its way).
    fn prepare(&self, request: &mut Request<Incoming>) -> Result<(), http::Error> {
        let path = self.upstream.path_for(request.uri().path_and_query())?;
        // HTTP/2 clients send the host as :authority, not Host: keep it for
        // the upstream; with neither, the upstream's own.
        if !request.headers().contains_key(HOST) {
            let host = request
                .uri()
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
                .unwrap_or_else(|| self.upstream.host.clone());
            request.headers_mut().insert(HOST, host);
        }
        strip_hop_by_hop(request.headers_mut());
        *request.uri_mut() = Uri::from(path);
        // The upstream connection is HTTP/1.1 whatever the client spoke.
        *request.version_mut() = Version::HTTP_11;
        Ok(())
    }

    /// The upstream's answer to a [`Forward::prepare`]d `request`, or the
    /// proxy's `502` (unreachable) or `504` (no answer in time).
    async fn answer(self, request: Request<Incoming>) -> Response<ForwardBody> {
        let deadline = tokio::time::Instant::now() + self.response_timeout;
        match self.send(request, deadline).await {
            Ok(response) => response,
            Err(Failure::Unreachable(e)) => gateway_error(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "upstream {} unreachable: {}",
                    self.upstream.url(),
                    error_chain(&*e)
                ),
            ),
            Err(Failure::Late) => gateway_error(
                StatusCode::GATEWAY_TIMEOUT,
                &format!(
                    "upstream {} did not answer within {} ms",
                    self.upstream.url(),
                    self.response_timeout.as_millis()
                ),
            ),
        }
    }

    /// Sends `request` on a pooled connection, or a new one, and gives the
    /// response with its body streaming from the upstream, if its head
    /// comes before `deadline`.
    async fn send(
        &self,
        request: Request<Incoming>,
        deadline: tokio::time::Instant,
    ) -> Result<Response<ForwardBody>, Failure> {
        let Some(mut conn) = self.pool.checkout() else {
            // Boxed, as the connection: a large future on the rare path.
            return Box::pin(self.send_new(request, deadline)).await;
        };
        match conn.send_until(request, deadline).await {
            Some(Ok(response)) => Ok(self.relay(response, conn)),
            Some(Err(mut error)) => match error.take_message() {
                // The upstream closed the idle connection before the request
                // went out: once more on a new one (as hyper-util's client does).
                Some(request) => Box::pin(self.send_new(request, deadline)).await,
                None => Err(Failure::Unreachable(error.into_error().into())),
            },
            None => Err(Failure::Late),
        }
    }

    /// Sends `request` on a new connection, opened for it, if the response
    /// head comes before `deadline`.
    async fn send_new(
        &self,
        request: Request<Incoming>,
        deadline: tokio::time::Instant,
    ) -> Result<Response<ForwardBody>, Failure> {
        let sent = async {
            let mut conn = self.pool.connect().await?;
            let response = conn.send(request).await?;
            Ok::<_, SendError>((response, conn))
        };
        match tokio::time::timeout_at(deadline, sent).await {
            Ok(Ok((response, conn))) => Ok(self.relay(response, conn)),
            Ok(Err(e)) => Err(Failure::Unreachable(e)),
            Err(_) => Err(Failure::Late),
        }
    }

    /// The upstream's `response` on `conn`, without its hop-by-hop headers;
    /// the connection goes back to the pool once the body is read.
    fn relay(&self, response: Response<Incoming>, conn: Conn) -> Response<ForwardBody> {
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let body = ReturningBody::new(body, conn, self.pool.clone());
        Response::from_parts(parts, ForwardBody::upstream(body))
    }
}

/// Why a request got no answer from the upstream.
enum Failure {
    /// No connection, or it broke: `502`.
    Unreachable(SendError),
    /// No response head before the deadline: `504`.
    Late,
}

/// An error and its causes, `: `-separated (hyper's own message alone says
/// only "client error (Connect)"). Each error's message says only its own
/// part, never its source's (as [`crate::pool::ConnectError`]'s), so every
/// cause appears once.
fn error_chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn gateway_error(status: StatusCode, message: &str) -> Response<ForwardBody> {
    let body = Bytes::from(format!("tollgate proxy: {message}\n"));
    let mut response = Response::new(ForwardBody::proxy(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A client's request, as hyper read it, forwarded as it streams in.
impl Service<Request<Incoming>> for Forward {
    type Response = Response<ForwardBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ForwardBody>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The pool takes requests at any time (a new connection if need be).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Incoming>) -> Self::Future {
        if let Err(e) = self.prepare(&mut request) {
            let response = gateway_error(
                StatusCode::BAD_GATEWAY,
                &format!("cannot build the upstream URL: {e}"),
            );
            return Box::pin(std::future::ready(Ok(response)));
        }
        let this = self.clone();
        Box::pin(async move { Ok(this.answer(request).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_urls_are_checked() {
        let up = Upstream::parse("http://127.0.0.1:3000/").unwrap();
        let pq: PathAndQuery = "/a?b=c".parse().unwrap();
        assert_eq!(up.path_for(Some(&pq)).unwrap(), "/a?b=c");
        assert_eq!(up.path_for(None).unwrap(), "/");
        assert_eq!(up.address, "127.0.0.1:3000");
        assert_eq!(up.host, "127.0.0.1:3000");
        let based = Upstream::parse("http://h/v2/").unwrap();
        assert_eq!(based.path_for(Some(&pq)).unwrap(), "/v2/a?b=c");
        assert_eq!(based.path_for(None).unwrap(), "/v2/");
        assert_eq!(based.address, "h:80");
        assert_eq!(based.host, "h");
        for (bad, why) in [
            ("https://h", "only http://"),
            ("127.0.0.1:3000", "expected a URL"),
            ("http://h/?q=1", "query"),
            ("http://", "invalid upstream"),
        ] {
            let err = Upstream::parse(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn user_info_is_refused_without_showing_the_password() {
        // The proxy sends no credentials to the upstream: a user or password
        // in the URL would be silently dropped, so it is refused.
        for url in [
            "http://u:s3cret@127.0.0.1:1",
            "http://u:s3cret@h/v2",
            "http://token-s3cret@h",
            "http://u:s3cret@h/?q=1",
            "http://u:s3cret@",
        ] {
            let err = Upstream::parse(url).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid upstream \"http://"),
                "{url}: {err}"
            );
            assert!(!err.contains("s3cret"), "{url}: {err}");
            assert!(err.contains("***@"), "{url}: {err}");
        }
        let err = Upstream::parse("http://u:s3cret@127.0.0.1:1")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid upstream \"http://***@127.0.0.1:1\": user info (user:password@) is not supported: \
             the proxy sends no credentials to the upstream; give http://HOST:PORT"
        );
    }

    #[test]
    fn hop_by_hop_headers_go_and_the_rest_stay() {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        headers.insert("x-private", HeaderValue::from_static("1"));
        headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        headers.insert("x-kept", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut headers);
        let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-kept"]);
    }
}
