//! The upstream connections of one forwarder: HTTP/1.1 connections opened
//! with hyper's connection API (`http1::handshake`), kept idle between
//! requests and reused most recently used first.
//!
//! Each of the proxy's worker threads builds its own forwarder, hence its
//! own pool: a connection is opened, driven (its task is spawned on the
//! worker's single-threaded runtime) and reused on one thread, so a
//! forwarded request never wakes another thread. A connection goes back to
//! the pool when the client has read the upstream's whole response
//! ([`ReturningBody`]); one whose response is not read to the end is
//! dropped, which closes it (HTTP/1.1 cannot skip the rest of a body).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::{http1, TrySendError};
use hyper::Request;
use hyper::Response;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Sleep;

use crate::counted::Counted;
use crate::upload::{while_moving, Late, Progress, UploadBody};

/// How long an idle upstream connection is kept (as hyper-util's pooled
/// client does by default).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle upstream connections kept at most per forwarder; past it the
/// oldest is closed.
const MAX_IDLE: usize = 1024;
/// How long opening an upstream connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A sender on one upstream connection.
type Sender = http1::SendRequest<UploadBody>;

/// One upstream connection: where its requests go, and the timer of the
/// response awaited on it.
pub(crate) struct Conn {
    sender: Sender,
    /// The deadline of the response awaited on the connection: one timer for
    /// the connection's life, moved to each request's deadline. Deadlines
    /// only move later on a connection (one request at a time, each timed
    /// from its start or its upload's progress, and back in the pool only
    /// once answered), which tokio does with one atomic update of the timer
    /// already registered; a timer per request is inserted into tokio's
    /// timer wheel and removed from it each time (BENCHMARKS.md).
    timer: Pin<Box<Sleep>>,
    /// The task driving the connection, ended when the connection is
    /// dropped rather than kept: one blocked writing a body its upstream
    /// stopped reading would otherwise hold its socket (and the body's
    /// buffers) until the upstream closed it, long after its request ended.
    _driver: AbortOnDrop,
    /// The upload of the request whose answer came before its body was
    /// all sent, while it goes on ([`Pool::checkin`]).
    upload: Option<Arc<Progress>>,
    /// The bytes read from the upstream so far ([`Counted`]).
    read: Arc<AtomicU64>,
    /// When the request last sent on it began: the upstream has kept the
    /// connection idle for no longer than since then (it wrote the answer
    /// after it, however long the answer's body then took to be read).
    began: tokio::time::Instant,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Conn {
    fn new(sender: Sender, driver: tokio::task::AbortHandle, read: Arc<AtomicU64>) -> Self {
        let now = tokio::time::Instant::now();
        // Registered with the runtime when first awaited, not now.
        let timer = Box::pin(tokio::time::sleep_until(now));
        Self {
            sender,
            timer,
            _driver: AbortOnDrop(driver),
            upload: None,
            read,
            began: now,
        }
    }

    /// The bytes read from the upstream so far: the same before and after a
    /// request that failed means no byte of an answer came.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// How long the upstream may have kept the connection idle at `now`, at
    /// the most: since the last request sent on it began.
    pub(crate) fn idle_at_most(&self, now: tokio::time::Instant) -> Duration {
        now.saturating_duration_since(self.began)
    }

    /// Marks the connection as still sending `upload`'s body, if any.
    pub(crate) fn uploading(&mut self, upload: Option<Arc<Progress>>) {
        self.upload = upload;
    }

    /// Sends `request`, which began at `times.began`, and waits for its
    /// response head until `times.deadline`, or, for a request with a body
    /// (`progress`), for as long as the upload keeps moving and then
    /// `timeout` after it ended ([`crate::upload`]); `Err` with who was late
    /// once that has passed.
    pub(crate) async fn send_until(
        &mut self,
        request: Request<UploadBody>,
        times: RequestTimes,
        progress: Option<&Arc<Progress>>,
        timeout: Duration,
    ) -> Result<Sent, Late> {
        let RequestTimes { began, deadline } = times;
        self.began = began;
        let sending = self.sender.try_send_request(request);
        tokio::pin!(sending);
        let progress = progress.map(|progress| &**progress);
        while_moving(sending, self.timer.as_mut(), deadline, progress, timeout).await
    }
}

/// When a request began, and until when its answer's head is awaited.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestTimes {
    pub(crate) began: tokio::time::Instant,
    pub(crate) deadline: tokio::time::Instant,
}

/// What sending a request on a connection gave: the response head, or the
/// error (with the request back when it was never sent).
pub(crate) type Sent = Result<Response<Incoming>, TrySendError<Request<UploadBody>>>;

/// Why no upstream connection could be had. Each message says only its
/// own part: the cause is the error's `source()`, which the 502 body
/// appends after it (so it must not be in the message as well, or the body
/// says it twice).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The TCP connection failed.
    #[error("cannot connect")]
    Tcp(#[from] std::io::Error),
    /// The TCP connection took longer than [`CONNECT_TIMEOUT`].
    #[error("cannot connect: no answer within {} s", CONNECT_TIMEOUT.as_secs())]
    Timeout,
    /// The HTTP/1.1 handshake failed.
    #[error("HTTP handshake")]
    Handshake(#[from] hyper::Error),
}

/// One forwarder's connections to its upstream. Clones share the pool.
#[derive(Clone)]
pub(crate) struct Pool {
    idle: Arc<Mutex<VecDeque<(Conn, Instant)>>>,
    /// `host:port`, as given to the TCP connect (a name is looked up).
    address: Arc<str>,
    /// How long a connection whose response was read may take to finish
    /// sending its request's body before it is closed instead of kept.
    finish_within: Duration,
}

impl Pool {
    /// An empty pool of connections to `address` (`host:port`); a
    /// connection still sending a body once its response was read gets
    /// `finish_within` to finish it.
    pub(crate) fn new(address: String, finish_within: Duration) -> Self {
        Self {
            idle: Arc::new(Mutex::new(VecDeque::new())),
            address: address.into(),
            finish_within,
        }
    }

    /// An idle connection, the most recently used, unless none is left open.
    pub(crate) fn checkout(&self) -> Option<Conn> {
        while let Some(conn) = self.pop() {
            if !conn.sender.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `sender` for a later request once its connection is ready for
    /// one, unless it closes first. A connection whose response was read
    /// may still be sending the request's body (an upstream may answer
    /// before reading it all): it waits outside the pool rather than hold
    /// up the next request, for as long as the body keeps moving and
    /// `finish_within` after, as a request's upload is timed
    /// ([`crate::upload`]), and is closed if it does not finish (an
    /// upstream that answered early and stopped reading would hold it, and
    /// the body's buffers, for as long as it kept it open).
    pub(crate) fn checkin(&self, mut conn: Conn) {
        if conn.sender.is_ready() {
            conn.upload = None;
            self.keep(conn);
            return;
        }
        let pool = self.clone();
        tokio::spawn(async move {
            let within = pool.finish_within;
            let deadline = tokio::time::Instant::now() + within;
            let ready = {
                let ready = std::pin::pin!(conn.sender.ready());
                let upload = conn.upload.as_deref();
                while_moving(ready, conn.timer.as_mut(), deadline, upload, within).await
            };
            if matches!(ready, Ok(Ok(()))) {
                conn.upload = None;
                pool.keep(conn);
            }
        });
    }

    /// Puts a ready `sender` in the pool, dropping the connections idle for
    /// too long (and the oldest, past the cap).
    fn keep(&self, conn: Conn) {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        while idle
            .front()
            .is_some_and(|(_, since)| now.duration_since(*since) > IDLE_TIMEOUT)
        {
            idle.pop_front();
        }
        if idle.len() >= MAX_IDLE {
            idle.pop_front();
        }
        idle.push_back((conn, now));
    }

    fn pop(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let (conn, since) = idle.pop_back()?;
        if since.elapsed() > IDLE_TIMEOUT {
            // The newest is stale: so are all the others.
            idle.clear();
            return None;
        }
        Some(conn)
    }

    /// A new connection, its task spawned on the current runtime. Boxed:
    /// opening a connection (the name lookup, the connect timeout, the
    /// handshake) is a large future, and inline it would make every
    /// request's future as large, though most take a pooled connection.
    pub(crate) fn connect(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<Conn, ConnectError>> + Send + '_>> {
        Box::pin(self.open())
    }

    async fn open(&self) -> Result<Conn, ConnectError> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&*self.address))
            .await
            .map_err(|_| ConnectError::Timeout)??;
        // Requests are small writes on a kept-alive connection: send them
        // at once rather than waiting for more to coalesce.
        stream.set_nodelay(true)?;
        let (stream, read) = Counted::new(stream);
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // A connection that ends with an error is not reused; the request
        // on it, if any, got the error.
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn::new(sender, driver.abort_handle(), read))
    }
}

/// The upstream's response body, which hands its connection back to the
/// pool once read to the end (a body dropped before its end takes the
/// connection with it, closing it).
pub(crate) struct ReturningBody {
    body: Incoming,
    home: Option<(Conn, Pool)>,
}

impl ReturningBody {
    /// `body`, read on `conn`, from `pool`.
    pub(crate) fn new(body: Incoming, conn: Conn, pool: Pool) -> Self {
        let mut this = Self {
            body,
            home: Some((conn, pool)),
        };
        if this.body.is_end_stream() {
            // Nothing to read (e.g. a 204): the connection is free now.
            this.give_back();
        }
        this
    }

    fn give_back(&mut self) {
        if let Some((conn, pool)) = self.home.take() {
            pool.checkin(conn);
        }
    }
}

impl HttpBody for ReturningBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        match &frame {
            None => this.give_back(),
            Some(Ok(_)) if this.body.is_end_stream() => this.give_back(),
            Some(Ok(_)) => {}
            // A broken body: the connection is not reused.
            Some(Err(_)) => this.home = None,
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
