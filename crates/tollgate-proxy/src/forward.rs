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
use http::header::{CONNECTION, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body as _, Incoming};
use tower::Service;

use crate::body::ForwardBody;
use crate::hop_by_hop::strip_hop_by_hop;
use crate::pool::{Conn, Pool, RequestTimes, ReturningBody};
use crate::unrelayable::relayable;
use crate::upload::{Late, Progress, UploadBody};
use crate::Upstream;

/// Sends requests to the upstream over HTTP/1.1 connections of its own:
/// each `Forward::new` has its pool, which its clones share (the proxy
/// builds one per worker thread, so a request is forwarded on the thread
/// that read it).
#[derive(Clone)]
pub struct Forward {
    pool: Pool,
    upstream: Arc<Upstream>,
    response_timeout: Duration,
    /// See [`Forward::resend_after_idle`].
    resend_after_idle: Duration,
}

/// How long a kept upstream connection may have been idle, at the most, for
/// a request sent on it to be copied, so that it can be sent again
/// ([`Forward::resend_after_idle`]).
pub const RESEND_AFTER_IDLE: Duration = Duration::from_millis(100);

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
            pool: Pool::new(upstream.address.clone(), response_timeout),
            upstream: Arc::new(upstream),
            response_timeout,
            resend_after_idle: RESEND_AFTER_IDLE,
        }
    }

    /// How long a kept upstream connection may have been idle for a
    /// request sent on it to be copied first, so that it can go once more
    /// on a new connection should the upstream close this one as it
    /// arrives (its keep-alive timeout running out just then: Node's is
    /// 5 s, gunicorn's 2 s). The upstream's idle time is taken at its
    /// longest: since the connection's previous request began (the
    /// upstream wrote that answer after, however long its body then took
    /// to be read). Only a request safe to send twice is copied: an
    /// idempotent method and no body. By default [`RESEND_AFTER_IDLE`]
    /// (100 ms): a connection whose last request began less than that ago
    /// was answering a moment ago, and the copy costs about 3% of what
    /// forwarding a request does (its headers, BENCHMARKS.md). Zero copies
    /// every such request.
    #[must_use]
    pub fn resend_after_idle(mut self, idle: Duration) -> Self {
        self.resend_after_idle = idle;
        self
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

    /// The upstream's answer to a [`Forward::prepare`]d `request`, whose
    /// upload makes `progress` if it has a body, or the proxy's `502`
    /// (unreachable), `504` or `408` (no answer in time: [`crate::upload`]).
    async fn answer(
        self,
        request: Request<UploadBody>,
        progress: Option<Arc<Progress>>,
    ) -> Response<ForwardBody> {
        let began = tokio::time::Instant::now();
        let times = RequestTimes {
            began,
            deadline: began + self.response_timeout,
        };
        let failure = match self.send(request, times, progress.as_ref()).await {
            Ok(response) => return response,
            Err(failure) => failure,
        };
        // A wait given up on mid-upload leaves the body's rest unread: the
        // client's connection ends with this answer, and says so (RFC 9112
        // §9.6). (A body never asked for, hyper may still read whole and
        // keep the connection.)
        let closes = matches!(failure, Failure::Late(_))
            && progress.is_some_and(|progress| progress.left_unread());
        let mut answer = self.failed(failure);
        if closes {
            answer
                .headers_mut()
                .insert(CONNECTION, HeaderValue::from_static("close"));
        }
        answer
    }

    /// The proxy's own answer to a request the upstream did not answer.
    fn failed(&self, failure: Failure) -> Response<ForwardBody> {
        match failure {
            Failure::Unreachable(e) if from_the_client(&*e) => proxy_error(
                StatusCode::BAD_REQUEST,
                &format!("the request could not be passed on: {}", error_chain(&*e)),
            ),
            Failure::Unreachable(e) if unreadable_answer(&*e) => proxy_error(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "upstream {} answered what the proxy cannot read: {}",
                    self.upstream.url(),
                    error_chain(&*e)
                ),
            ),
            Failure::Unreachable(e) => proxy_error(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "upstream {} unreachable: {}",
                    self.upstream.url(),
                    error_chain(&*e)
                ),
            ),
            Failure::Late(Late::Upstream) => proxy_error(
                StatusCode::GATEWAY_TIMEOUT,
                &format!(
                    "upstream {} did not answer within {} ms",
                    self.upstream.url(),
                    self.response_timeout.as_millis()
                ),
            ),
            Failure::Late(Late::Client) => proxy_error(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the request's body stopped arriving for {} ms",
                    self.response_timeout.as_millis()
                ),
            ),
        }
    }

    /// Sends `request` on a pooled connection, or a new one, and gives the
    /// response with its body streaming from the upstream, if its head
    /// comes in time ([`Conn::send_until`]).
    ///
    /// A kept connection may be closed by its upstream as the request goes
    /// out on it. The request goes once more on a new connection when it
    /// did not go out at all (as hyper-util's client does), or when it was
    /// copied ([`Forward::resend_after_idle`], [`copy_to_resend`]) and the
    /// connection failed before a byte of an answer came (as Go's client
    /// does): an upstream that began answering, even with a broken head,
    /// acted on it. Not on a timeout either: an upstream that did not
    /// answer in time is not asked again.
    async fn send(
        &self,
        request: Request<UploadBody>,
        times: RequestTimes,
        progress: Option<&Arc<Progress>>,
    ) -> Result<Response<ForwardBody>, Failure> {
        let Some(mut conn) = self.pool.checkout() else {
            // Boxed, as the connection: a large future on the rare path.
            return Box::pin(self.send_new(request, times, progress)).await;
        };
        // Boxed: held across the send, it would make every request's
        // future larger (BENCHMARKS.md), though few requests copy.
        let copy = (conn.idle_at_most(times.began) >= self.resend_after_idle)
            .then(|| copy_to_resend(&request).map(Box::new))
            .flatten();
        let read = conn.bytes_read();
        match (conn.send_until(request, times, progress, self.response_timeout)).await {
            Ok(Ok(response)) => Ok(self.relay(response, conn, progress)),
            Ok(Err(mut error)) => {
                let unanswered = conn.bytes_read() == read;
                let copy = copy.filter(|_| unanswered).map(|copy| *copy);
                match error.take_message().or(copy) {
                    Some(request) => Box::pin(self.send_new(request, times, progress)).await,
                    None => Err(Failure::Unreachable(error.into_error().into())),
                }
            }
            Err(late) => Err(Failure::Late(late)),
        }
    }

    /// Sends `request` on a new connection, opened for it before its
    /// deadline, if the response head comes in time
    /// ([`Conn::send_until`]).
    async fn send_new(
        &self,
        request: Request<UploadBody>,
        times: RequestTimes,
        progress: Option<&Arc<Progress>>,
    ) -> Result<Response<ForwardBody>, Failure> {
        let connecting = self.pool.connect();
        let mut conn = match tokio::time::timeout_at(times.deadline, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(Failure::Unreachable(e.into())),
            Err(_) => return Err(Failure::Late(Late::Upstream)),
        };
        match (conn.send_until(request, times, progress, self.response_timeout)).await {
            Ok(Ok(response)) => Ok(self.relay(response, conn, progress)),
            Ok(Err(error)) => Err(Failure::Unreachable(error.into_error().into())),
            Err(late) => Err(Failure::Late(late)),
        }
    }

    /// The upstream's `response` on `conn`, without its hop-by-hop headers,
    /// in the proxy's own HTTP/1.1 (hyper answers a 1.0 client in 1.0): the
    /// version is hop-by-hop too, and an HTTP/1.0 upstream's would end a
    /// 1.1 client's keep-alive. The connection goes back to the pool once
    /// the body is read.
    ///
    /// An answer that comes before the request's body was all sent (an
    /// early `413`, a `202` whose upstream goes on reading): the connection
    /// keeps the upload's `progress`, so that it finishes sending for as
    /// long as the body moves ([`Pool::checkin`]); and when the upstream
    /// will close it, so will the client's connection, whose body's rest
    /// no one reads: the answer says `Connection: close`.
    fn relay(
        &self,
        response: Response<Incoming>,
        mut conn: Conn,
        progress: Option<&Arc<Progress>>,
    ) -> Response<ForwardBody> {
        let (mut parts, body) = response.into_parts();
        if let Err(why) = relayable(parts.status, &mut parts.headers) {
            // Dropped with its connection, which is not reused; a body
            // still on its way up is not read further, so the client's
            // connection ends with this answer (as after a timeout).
            let upstream = self.upstream.url();
            let mut refused = proxy_error(
                StatusCode::BAD_GATEWAY,
                &format!("upstream {upstream} {why}"),
            );
            if progress.is_some_and(|progress| !progress.ended()) {
                let close = HeaderValue::from_static("close");
                refused.headers_mut().insert(CONNECTION, close);
            }
            return refused;
        }
        parts.version = http::Version::HTTP_11;
        let uploading = progress.filter(|progress| !progress.ended());
        let closes = uploading.is_some() && says_close(&parts.headers);
        strip_hop_by_hop(&mut parts.headers);
        if closes {
            (parts.headers).insert(CONNECTION, HeaderValue::from_static("close"));
        }
        conn.uploading(uploading.cloned());
        let body = ReturningBody::new(body, conn, self.pool.clone());
        Response::from_parts(parts, ForwardBody::upstream(body))
    }
}

/// A copy of `request` to send again should its connection fail, if it is
/// safe to send twice: an idempotent method (RFC 9110 §9.2.2: `GET`,
/// `HEAD`, `OPTIONS`, `TRACE`, `PUT`, `DELETE`) and no body (one streamed
/// to the upstream is not kept). Its extensions are not copied: the
/// upstream connection reads none.
fn copy_to_resend(request: &Request<UploadBody>) -> Option<Request<UploadBody>> {
    if !request.method().is_idempotent() || !request.body().is_end_stream() {
        return None;
    }
    let mut copy = Request::new(UploadBody::empty());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    Some(copy)
}

/// Whether `headers` say the connection closes after this message.
fn says_close(headers: &HeaderMap) -> bool {
    (headers.get_all(CONNECTION).iter())
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("close"))
}

/// Why a request got no answer from the upstream.
enum Failure {
    /// No connection, or it broke: `502`.
    Unreachable(SendError),
    /// No response head in time (`504`), or a body that stopped
    /// arriving (`408`): see [`crate::upload`].
    Late(Late),
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

/// Whether sending failed on the client's side of the exchange: its body
/// broke off or was malformed (a bad chunk), which hyper reports as the
/// caller's ("user") error. A 400 then, not the upstream's 502.
fn from_the_client(error: &(dyn StdError + 'static)) -> bool {
    error
        .downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_user)
}

/// Whether sending failed on an answer hyper could not parse (a head that
/// is not HTTP/1.1, too large, a bad length): the upstream was reached.
fn unreadable_answer(error: &(dyn StdError + 'static)) -> bool {
    error
        .downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_parse)
}

/// The proxy's own answer: `status`, and `message` as plain text.
fn proxy_error(status: StatusCode, message: &str) -> Response<ForwardBody> {
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
            let response = proxy_error(
                StatusCode::BAD_GATEWAY,
                &format!("cannot build the upstream URL: {e}"),
            );
            return Box::pin(std::future::ready(Ok(response)));
        }
        // Its body's type made here too, before the future exists.
        let (parts, body) = request.into_parts();
        let (body, progress) = UploadBody::new(body);
        let request = Request::from_parts(parts, body);
        let this = self.clone();
        Box::pin(async move { Ok(this.answer(request, progress).await) })
    }
}
