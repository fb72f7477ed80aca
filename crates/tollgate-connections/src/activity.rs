//! What a connection has done, and when: the IO wrapper that records it
//! and the idle watchdog that closes a connection on which nothing moves.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// One connection's record: when it opened, when a byte last moved, how
/// many reads brought bytes and how many request heads were complete.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    /// Milliseconds after `opened` of the last byte read or written.
    last_io_ms: AtomicU64,
    reads: AtomicU64,
    requests: AtomicU64,
}

impl Activity {
    /// A connection opened now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: Instant::now(),
            last_io_ms: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            requests: AtomicU64::new(0),
        })
    }

    /// When the connection opened.
    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// When a byte last moved either way (the opening counts).
    pub fn last_io(&self) -> Instant {
        self.opened + Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed))
    }

    /// How many reads have brought bytes so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// How many request heads have arrived in full so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Records a request head that arrived in full.
    pub fn request_started(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn moved(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_io_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// Completes when the connection has been idle for `idle_timeout`
    /// (no byte either way), or when its first request head has not arrived
    /// within `first_head_timeout` of its opening: that covers a client that
    /// connects and sends nothing, before any HTTP parser runs; or once the
    /// time in `drain_ends` (set when a shutdown begins) has come.
    ///
    /// `drain_ends` must be set no earlier than `idle_timeout` from when it
    /// is set: the sleep under way then ends no later than it (it waits for
    /// an idle deadline set before), and the next one waits for it. So the
    /// drain costs a connection nothing until its timer fires.
    pub async fn expired(
        &self,
        idle_timeout: Duration,
        first_head_timeout: Duration,
        drain_ends: &OnceLock<Instant>,
    ) {
        loop {
            let now = Instant::now();
            let idle_at = self.last_io() + idle_timeout;
            let drain_at = drain_ends.get().copied().unwrap_or(idle_at);
            let first_head_at = self.opened + first_head_timeout;
            let waiting_first_head = self.requests() == 0;
            if now >= idle_at.min(drain_at) || (waiting_first_head && now >= first_head_at) {
                return;
            }
            let next = if waiting_first_head {
                idle_at.min(first_head_at)
            } else {
                idle_at
            };
            tokio::time::sleep_until(next.min(drain_at)).await;
        }
    }
}

/// An IO stream that records its reads and writes in an [`Activity`].
#[derive(Debug)]
pub struct ActivityIo<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> ActivityIo<T> {
    /// Wraps `inner`, recording into `activity`.
    pub fn new(inner: T, activity: Arc<Activity>) -> Self {
        Self { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ActivityIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.reads.fetch_add(1, Ordering::Relaxed);
            self.activity.moved();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ActivityIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
