//! A client's request body on its way to the upstream, and how long the
//! proxy waits for what (`--upstream-timeout`, the same span for each):
//!
//! - while the body moves, nothing is timed: a slow upload that keeps
//!   moving is neither side's silence;
//! - once the body has been sent in full, the upstream has the timeout to
//!   start answering (as Envoy times a route from the end of the
//!   downstream request): `504`;
//! - a body that stops moving for the timeout ends the request too: `504`
//!   when the upstream stopped taking it (the proxy had the next part to
//!   send), `408` when the client stopped sending it (the proxy asked for
//!   the next part and waited).
//!
//! The body marks its progress in a `Progress` the waiting request reads
//! only when its timer fires, so a moving body costs one clock reading and
//! two stores per part, and no wake-up.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

/// The client's body as the upstream connection reads it, and where its
/// upload stands; `None` for a body that was empty from the start (a
/// `GET`): nothing to send, nothing to time.
pub(crate) struct UploadBody(Option<(Incoming, Arc<Progress>)>);

/// Where a request's upload stands, as its body last saw it.
pub(crate) struct Progress {
    /// When the request began; the times below are µs after it.
    began: Instant,
    /// When the last part went through (or the request began).
    last_us: AtomicU64,
    /// When the body ended, or `u64::MAX` while it goes on.
    ended_us: AtomicU64,
    /// Whether the proxy is waiting for the client's next part (it asked
    /// and got none yet), rather than for the upstream to take more.
    waiting_for_client: AtomicBool,
    /// Whether the body was asked for at all: one never asked for may be
    /// read whole by the server afterwards, keeping its connection.
    asked: AtomicBool,
}

/// Why a request waiting for its upstream's answer is given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Late {
    /// The upstream did not start answering, or stopped taking the body.
    Upstream,
    /// The client stopped sending the body.
    Client,
}

impl UploadBody {
    /// `body`, and its progress, shared with the request waiting for the
    /// answer: `None` when there is nothing to send, so that such a
    /// request allocates nothing for it.
    pub(crate) fn new(body: Incoming) -> (Self, Option<Arc<Progress>>) {
        if body.is_end_stream() {
            return (Self::empty(), None);
        }
        let progress = Arc::new(Progress {
            began: Instant::now(),
            last_us: AtomicU64::new(0),
            ended_us: AtomicU64::new(u64::MAX),
            waiting_for_client: AtomicBool::new(false),
            asked: AtomicBool::new(false),
        });
        (Self(Some((body, progress.clone()))), Some(progress))
    }

    /// A body with nothing in it.
    pub(crate) fn empty() -> Self {
        Self(None)
    }
}

impl Progress {
    fn now_us(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_micros()).unwrap_or(u64::MAX - 1)
    }

    fn at(&self, us: u64) -> Instant {
        self.began + Duration::from_micros(us)
    }

    /// Whether the body has been read to its end.
    pub(crate) fn ended(&self) -> bool {
        self.ended_us.load(Ordering::Acquire) != u64::MAX
    }

    /// Whether the body was asked for, and not read to its end: its rest
    /// will not be read, and the client's connection ends with the answer.
    pub(crate) fn left_unread(&self) -> bool {
        self.asked.load(Ordering::Acquire) && !self.ended()
    }

    /// When a request whose timer fired at `now` is to be given up on:
    /// `Ok` with a later time to look again, or `Err` with who was late.
    pub(crate) fn next_deadline(&self, now: Instant, timeout: Duration) -> Result<Instant, Late> {
        let ended = self.ended_us.load(Ordering::Acquire);
        let (since, late) = if ended != u64::MAX {
            (ended, Late::Upstream)
        } else if self.waiting_for_client.load(Ordering::Acquire) {
            (self.last_us.load(Ordering::Acquire), Late::Client)
        } else {
            (self.last_us.load(Ordering::Acquire), Late::Upstream)
        };
        let deadline = self.at(since) + timeout;
        if deadline > now {
            Ok(deadline)
        } else {
            Err(late)
        }
    }
}

/// Awaits `answer` until `deadline`, or, for a request with a body
/// (`progress`), for as long as its upload keeps moving and `timeout` after
/// its end or its last move; `Err` with who was late once that has passed.
/// `timer` is reset to each deadline, later each time (a connection's own
/// timer, reused: see `pool::Conn`). `answer` is pinned where it was
/// made, not moved in: a request's future is large.
pub(crate) async fn while_moving<F: Future>(
    mut answer: Pin<&mut F>,
    mut timer: Pin<&mut Sleep>,
    deadline: Instant,
    progress: Option<&Progress>,
    timeout: Duration,
) -> Result<F::Output, Late> {
    timer.as_mut().reset(deadline);
    loop {
        tokio::select! {
            biased;
            answered = answer.as_mut() => return Ok(answered),
            () = timer.as_mut() => {}
        }
        let Some(progress) = progress else {
            return Err(Late::Upstream);
        };
        let later = progress.next_deadline(Instant::now(), timeout)?;
        timer.as_mut().reset(later);
    }
}

impl Body for UploadBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let Some((body, progress)) = &mut self.get_mut().0 else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(&mut *body).poll_frame(cx);
        progress.asked.store(true, Ordering::Release);
        match &polled {
            Poll::Pending => progress.waiting_for_client.store(true, Ordering::Release),
            Poll::Ready(frame) => {
                let now = progress.now_us();
                progress.last_us.store(now, Ordering::Release);
                progress.waiting_for_client.store(false, Ordering::Release);
                // A broken body ends the upload too: hyper then fails the
                // request, and no answer is awaited.
                // Trailers end a body: hyper's client asks for nothing
                // after them.
                let ended = match frame {
                    Some(Ok(frame)) => frame.is_trailers() || body.is_end_stream(),
                    None | Some(Err(_)) => true,
                };
                if ended {
                    progress.ended_us.store(now, Ordering::Release);
                }
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.0.as_ref().is_none_or(|(body, _)| body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Some((body, _)) => body.size_hint(),
            None => SizeHint::with_exact(0),
        }
    }
}
