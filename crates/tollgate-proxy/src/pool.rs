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
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// How long an idle upstream connection is kept (as hyper-util's pooled
/// client does by default).
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle upstream connections kept at most per forwarder; past it the
/// oldest is closed.
const MAX_IDLE: usize = 1024;
/// How long opening an upstream connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A sender on one upstream connection.
pub(crate) type Sender = SendRequest<Incoming>;

/// Why no upstream connection could be had.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The TCP connection failed.
    #[error("cannot connect: {0}")]
    Tcp(#[from] std::io::Error),
    /// The TCP connection took longer than [`CONNECT_TIMEOUT`].
    #[error("cannot connect: no answer within {} s", CONNECT_TIMEOUT.as_secs())]
    Timeout,
    /// The HTTP/1.1 handshake failed.
    #[error("HTTP handshake: {0}")]
    Handshake(#[from] hyper::Error),
}

/// One forwarder's connections to its upstream. Clones share the pool.
#[derive(Clone)]
pub(crate) struct Pool {
    idle: Arc<Mutex<VecDeque<(Sender, Instant)>>>,
    /// `host:port`, as given to the TCP connect (a name is looked up).
    address: Arc<str>,
}

impl Pool {
    /// An empty pool of connections to `address` (`host:port`).
    pub(crate) fn new(address: String) -> Self {
        Self {
            idle: Arc::new(Mutex::new(VecDeque::new())),
            address: address.into(),
        }
    }

    /// An idle connection (and `true`), or else a new one (and `false`).
    pub(crate) async fn checkout(&self) -> Result<(Sender, bool), ConnectError> {
        while let Some(sender) = self.pop() {
            if !sender.is_closed() {
                return Ok((sender, true));
            }
        }
        self.connect().await.map(|sender| (sender, false))
    }

    /// Keeps `sender` for a later request once its connection is ready for
    /// one, unless it closes first. A connection whose response was read
    /// may still be sending the request's body (an upstream may answer
    /// before reading it all): it waits outside the pool rather than hold
    /// up the next request.
    pub(crate) fn checkin(&self, mut sender: Sender) {
        if sender.is_ready() {
            self.keep(sender);
            return;
        }
        let pool = self.clone();
        tokio::spawn(async move {
            if sender.ready().await.is_ok() {
                pool.keep(sender);
            }
        });
    }

    /// Puts a ready `sender` in the pool, dropping the connections idle for
    /// too long (and the oldest, past the cap).
    fn keep(&self, sender: Sender) {
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
        idle.push_back((sender, now));
    }

    fn pop(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        let (sender, since) = idle.pop_back()?;
        if since.elapsed() > IDLE_TIMEOUT {
            // The newest is stale: so are all the others.
            idle.clear();
            return None;
        }
        Some(sender)
    }

    /// A new connection, its task spawned on the current runtime. Boxed:
    /// opening a connection (the name lookup, the connect timeout, the
    /// handshake) is a large future, and inline it would make every
    /// request's future as large, though most take a pooled connection.
    pub(crate) fn connect(
        &self,
    ) -> Pin<Box<dyn Future<Output = Result<Sender, ConnectError>> + Send + '_>> {
        Box::pin(self.open())
    }

    async fn open(&self) -> Result<Sender, ConnectError> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&*self.address))
            .await
            .map_err(|_| ConnectError::Timeout)??;
        // Requests are small writes on a kept-alive connection: send them
        // at once rather than waiting for more to coalesce.
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // A connection that ends with an error is not reused; the request
        // on it, if any, got the error.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}

/// The upstream's response body, which hands its connection back to the
/// pool once read to the end (a body dropped before its end takes the
/// connection with it, closing it).
pub(crate) struct ReturningBody {
    body: Incoming,
    home: Option<(Sender, Pool)>,
}

impl ReturningBody {
    /// `body`, read on `sender`'s connection from `pool`.
    pub(crate) fn new(body: Incoming, sender: Sender, pool: Pool) -> Self {
        let mut this = Self {
            body,
            home: Some((sender, pool)),
        };
        if this.body.is_end_stream() {
            // Nothing to read (e.g. a 204): the connection is free now.
            this.give_back();
        }
        this
    }

    fn give_back(&mut self) {
        if let Some((sender, pool)) = self.home.take() {
            pool.checkin(sender);
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
