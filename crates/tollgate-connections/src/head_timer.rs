//! The timer behind hyper's HTTP/1 header-read timeout, so that the
//! timeout runs from the first byte of a request head, not from the moment
//! the server starts waiting for one.
//!
//! hyper arms its header-read timer whenever it starts waiting for a
//! request head, also on a keep-alive connection between requests; with
//! hyper's own timer an idle keep-alive connection would be closed after
//! the header-read timeout. Here the sleep hyper asks for starts only once
//! a byte has been read after it was armed (or, for a connection's first
//! request, at the connection's opening), so a keep-alive connection that
//! waits quietly for its next request is governed by the idle timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

use crate::activity::Activity;

/// One connection's header-read timer for hyper's HTTP/1 server.
#[derive(Debug, Clone)]
pub struct HeadTimer {
    activity: Arc<Activity>,
    timeout: Duration,
}

impl HeadTimer {
    /// The timer of the connection recorded by `activity`, for a header-read
    /// timeout of `timeout`.
    pub fn new(activity: Arc<Activity>, timeout: Duration) -> Self {
        Self { activity, timeout }
    }

    fn head_sleep(&self) -> Pin<Box<dyn Sleep>> {
        Box::pin(HeadSleep {
            reads_when_armed: self.activity.reads(),
            activity: self.activity.clone(),
            timeout: self.timeout,
            running: None,
        })
    }
}

impl Timer for HeadTimer {
    // hyper asks for `now + header_read_timeout` when it starts waiting for
    // a head; the deadline is replaced by one counted from the head's start.
    fn sleep(&self, _duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.head_sleep()
    }

    fn sleep_until(&self, _deadline: Instant) -> Pin<Box<dyn Sleep>> {
        self.head_sleep()
    }
}

/// A header-read deadline that starts with the head's first byte.
struct HeadSleep {
    activity: Arc<Activity>,
    reads_when_armed: u64,
    timeout: Duration,
    running: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl HeadSleep {
    /// When the head started: the connection's opening for its first
    /// request, the first read since arming for a later one; `None` while
    /// no byte of it has come.
    fn head_started(&self) -> Option<tokio::time::Instant> {
        if self.activity.requests() == 0 {
            Some(self.activity.opened())
        } else if self.activity.reads() != self.reads_when_armed {
            Some(tokio::time::Instant::now())
        } else {
            None
        }
    }
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.running.is_none() {
            // No waker is kept while waiting for the first byte: hyper polls
            // this again whenever the connection is woken by a read.
            let Some(started) = self.head_started() else {
                return Poll::Pending;
            };
            let deadline = started + self.timeout;
            self.running = Some(Box::pin(tokio::time::sleep_until(deadline)));
        }
        match self.running.as_mut() {
            Some(running) => running.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}
impl Sleep for HeadSleep {}
