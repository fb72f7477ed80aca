//! A connection's task polled again at once when it wakes itself.
//!
//! hyper's HTTP/1 connection hands a request body to the service through a
//! channel whose sender keeps the connection task's waker, and taking the
//! body's bytes out wakes it, even when the whole body is already read and
//! the sender gone. The service reads the body inside the connection
//! task's own poll, so every request with a body woke its own task. Tokio
//! treats a task woken while it runs as one that yields: it goes to the
//! back of its worker's queue, behind every other ready connection, and
//! another worker is woken (a futex or eventfd write) to share the queue.
//! On `POST /v1/check` that cost about 1.5 µs of CPU per request and
//! nearly tripled its p99 at 64 connections (BENCHMARKS.md, "A request
//! body's wake").
//!
//! [`PollAgain`] answers a wake that arrives while the task is being polled
//! by polling it once more at once, in the same turn, and only passes a
//! wake to the scheduler when the task is idle, or when it woke itself
//! again in that second poll too: a task that means to yield (hyper after
//! 16 requests in a row, Tokio's cooperative budget) still does.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use atomic_waker::AtomicWaker;

/// Not being polled: a wake goes to the scheduler.
const IDLE: u8 = 0;
/// Being polled: a wake is noted, and the poll repeated.
const POLLING: u8 = 1;
/// Being polled, and woken since the poll began.
const WOKEN: u8 = 2;

/// Polls beyond the first in one turn, when the future woke itself.
const REPOLLS: usize = 1;

/// `future`, polled again in the same turn when it wakes itself (see the
/// module's documentation).
pub(crate) struct PollAgain<F> {
    future: Pin<Box<F>>,
    wakes: Arc<Wakes>,
    /// The waker the future sees, made once: it routes to `wakes`.
    waker: Waker,
}

impl<F: Future> PollAgain<F> {
    pub(crate) fn new(future: F) -> Self {
        let wakes = Arc::new(Wakes {
            state: AtomicU8::new(IDLE),
            task: AtomicWaker::new(),
        });
        Self {
            future: Box::pin(future),
            waker: Waker::from(wakes.clone()),
            wakes,
        }
    }
}

impl<F: Future> Future for PollAgain<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        this.wakes.task.register(cx.waker());
        let mut inner = Context::from_waker(&this.waker);
        for _ in 0..=REPOLLS {
            this.wakes.state.store(POLLING, Ordering::SeqCst);
            if let Poll::Ready(output) = this.future.as_mut().poll(&mut inner) {
                this.wakes.state.store(IDLE, Ordering::SeqCst);
                return Poll::Ready(output);
            }
            let ended = this.wakes.state.compare_exchange(
                POLLING,
                IDLE,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
            if ended.is_ok() {
                return Poll::Pending;
            }
        }
        // It woke itself in every poll: let the scheduler run the others.
        this.wakes.state.store(IDLE, Ordering::SeqCst);
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Where the future's wakes go: noted while it is polled, else passed to
/// the task's own waker.
struct Wakes {
    state: AtomicU8,
    task: AtomicWaker,
}

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let noted = self
            .state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |state| {
                (state == POLLING).then_some(WOKEN)
            });
        match noted {
            // Noted (or already noted): the poll in progress repeats.
            Ok(_) | Err(WOKEN) => {}
            Err(_) => self.task.wake(),
        }
    }
}

#[cfg(test)]
mod tests;
