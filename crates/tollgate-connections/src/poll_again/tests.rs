use super::*;
use std::sync::atomic::AtomicUsize;

/// A task's waker that counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `future` once as a task whose waker is counted; returns whether
/// it finished and how often its task was woken.
fn poll_once<F: Future>(future: Pin<&mut F>) -> (bool, usize) {
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    let ready = future.poll(&mut Context::from_waker(&waker)).is_ready();
    (ready, count.0.load(Ordering::SeqCst))
}

/// Wakes itself in each of its first `wakes` polls (from a thread of its
/// own if `on_another_thread`), then finishes; counts its polls.
struct WakesItself {
    wakes: usize,
    polls: usize,
    on_another_thread: bool,
}

impl Future for WakesItself {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls += 1;
        if self.polls > self.wakes {
            return Poll::Ready(());
        }
        if self.on_another_thread {
            let waker = cx.waker().clone();
            std::thread::spawn(move || waker.wake()).join().unwrap();
        } else {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

fn wakes_itself(wakes: usize, on_another_thread: bool) -> WakesItself {
    WakesItself {
        wakes,
        polls: 0,
        on_another_thread,
    }
}

#[test]
fn a_wake_during_its_own_poll_is_answered_by_polling_again_not_by_the_scheduler() {
    for on_another_thread in [false, true] {
        let mut task = std::pin::pin!(PollAgain::new(wakes_itself(1, on_another_thread)));
        assert_eq!(poll_once(task.as_mut()), (true, 0), "{on_another_thread}");
        assert_eq!(task.future.polls, 2);
    }
}

#[test]
fn a_future_that_wakes_itself_in_every_poll_still_yields_to_the_scheduler() {
    let mut task = std::pin::pin!(PollAgain::new(wakes_itself(usize::MAX, false)));
    assert_eq!(poll_once(task.as_mut()), (false, 1));
    assert_eq!(task.future.polls, 1 + REPOLLS);
}

/// Keeps the waker of its first poll, and finishes on its second.
#[derive(Default)]
struct WaitsForAWake {
    waker: Option<Waker>,
}

impl Future for WaitsForAWake {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.waker.is_some() {
            return Poll::Ready(());
        }
        self.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[test]
fn a_wake_while_it_waits_reaches_its_task() {
    let mut task = std::pin::pin!(PollAgain::new(WaitsForAWake::default()));
    let count = Arc::new(Count::default());
    let waker = Waker::from(count.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(task.as_mut().poll(&mut cx).is_pending());
    assert_eq!(count.0.load(Ordering::SeqCst), 0);
    let kept = task.future.waker.clone().unwrap();
    kept.wake_by_ref();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    // Woken twice before it runs, the task is scheduled once.
    kept.wake();
    assert_eq!(count.0.load(Ordering::SeqCst), 1);
    assert!(task.as_mut().poll(&mut cx).is_ready());
}

/// hyper's HTTP/1 connection reading one `POST` whose body came with its
/// head, and echoing the body.
fn echo_connection(
    server: tokio::io::DuplexStream,
) -> impl Future<Output = Result<(), hyper::Error>> {
    let service =
        hyper::service::service_fn(|request: hyper::Request<hyper::body::Incoming>| async {
            let body = axum::body::to_bytes(axum::body::Body::new(request.into_body()), 1024)
                .await
                .unwrap();
            Ok::<_, std::convert::Infallible>(hyper::Response::new(axum::body::Body::from(body)))
        });
    hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(server), service)
}

#[test]
fn a_request_body_read_in_the_connections_poll_does_not_wake_the_connection_again() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (mut client, server) = tokio::io::duplex(4096);
    runtime
        .block_on(client.write_all(
            b"POST /v1/check HTTP/1.1\r\nhost: a\r\ncontent-length: 14\r\n\r\n{\"client\":\"a\"}",
        ))
        .unwrap();

    let mut connection = std::pin::pin!(PollAgain::new(echo_connection(server)));
    assert_eq!(poll_once(connection.as_mut()), (false, 0));

    // That one poll answered the request.
    let mut answer = vec![0; 4096];
    let read = runtime.block_on(client.read(&mut answer)).unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n{\"client\":\"a\"}"), "{answer}");
}
