//! Reading a request body whole, up to [`MAX_BODY_BYTES`].
//!
//! A check's body is a few dozen bytes and arrives in one frame. Collecting
//! it (`http-body-util`'s `collect`) put that one `Bytes` into a queue of
//! its own and took it out again: an allocation and about 800 CPU
//! instructions per check (BENCHMARKS.md, "Header values and allocations on
//! the check path"). So the first frame is read alone, and only a body that
//! goes on after it is collected.
//!
//! A body must arrive whole within a bound from its head (`serve` passes
//! its `header_read_timeout`): the idle timeout alone, which any byte
//! resets, let a body sent a byte every few seconds hold its connection,
//! and the memory behind it, as long as its sender liked (an audit: 20 such
//! connections held a server at `max_connections = 20` for as long as they
//! trickled). A body whole in its first read starts no timer.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use axum::body::{Bytes, HttpBody};
use axum::http::{HeaderMap, StatusCode};
use axum::BoxError;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::{Rejection, MAX_BODY_BYTES};

/// A request body, whole, as [`read_whole`] reads it, refused (408) when
/// it is not whole `within` from now. The connection then closes: hyper
/// does not wait for the rest of a body its service did not read.
pub(crate) async fn read_body<B>(body: B, within: Duration) -> Result<Bytes, Rejection>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut read = pin!(read_whole(body));
    let first = poll_fn(|context| Poll::Ready(read.as_mut().poll(context))).await;
    if let Poll::Ready(whole) = first {
        return whole;
    }
    // Boxed: the timer's state would otherwise make every check's future
    // larger, and moving it costs each check (about 300 instructions,
    // counted with callgrind).
    match Box::pin(tokio::time::timeout(within, read)).await {
        Ok(whole) => whole,
        Err(_) => Err(Rejection::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive whole within {} ms of its head",
                within.as_millis()
            ),
        )),
    }
}

/// A request body, whole, refused past [`MAX_BODY_BYTES`] (413) or when
/// the connection fails while it is read (400). A body whose declared
/// length (`Content-Length`) is already over the limit is refused before
/// any of it is read: its sender may never send it, and would otherwise
/// hold the connection until the idle timeout.
async fn read_whole<B>(body: B) -> Result<Bytes, Rejection>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.size_hint().lower() > MAX_BODY_BYTES as u64 {
        return Err(too_large());
    }
    let mut body = pin!(Limited::new(body, MAX_BODY_BYTES));
    let first = match body.frame().await {
        None => return Ok(Bytes::new()),
        Some(frame) => frame.map_err(refusal)?.into_data().unwrap_or_default(),
    };
    if body.is_end_stream() {
        return Ok(first);
    }
    let rest = body.collect().await.map_err(refusal)?.to_bytes();
    if first.is_empty() {
        return Ok(rest);
    }
    let mut whole = Vec::with_capacity(first.len() + rest.len());
    whole.extend_from_slice(&first);
    whole.extend_from_slice(&rest);
    Ok(whole.into())
}

/// Refuses a body sent in a transfer coding other than one `chunked`
/// ([`tollgate_http::unsupported_transfer_coding`]), whose coded bytes
/// would be read as the body: 501, as RFC 9112 §6.1 asks of a server that
/// does not understand a coding.
pub(crate) fn only_chunked(headers: &HeaderMap) -> Result<(), Rejection> {
    match tollgate_http::unsupported_transfer_coding(headers) {
        None => Ok(()),
        Some(why) => Err(Rejection::new(StatusCode::NOT_IMPLEMENTED, why)),
    }
}

/// What a failed read tells the caller.
fn refusal(error: BoxError) -> Rejection {
    if error.is::<LengthLimitError>() {
        too_large()
    } else {
        // hyper's own message is general ("error reading a body from
        // connection"); its causes say what was wrong with the body.
        // A wrapper may say its cause's words as its own (axum's error
        // does): each is said once.
        let mut said = error.to_string();
        let mut message = format!("cannot read the request body: {said}");
        let mut cause = error.source();
        while let Some(error) = cause {
            let words = error.to_string();
            if !said.ends_with(&words) {
                message.push_str(": ");
                message.push_str(&words);
            }
            said = words;
            cause = error.source();
        }
        Rejection::bad_request(message)
    }
}

fn too_large() -> Rejection {
    Rejection::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is over the limit of {MAX_BODY_BYTES} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http_body_util::channel::Channel;
    use std::future::Future;

    /// `read_whole` of a body that sends `chunks` one frame each, with no
    /// size hint.
    async fn read_frames(chunks: &[&'static [u8]]) -> Result<Bytes, Rejection> {
        let (mut sender, body) = Channel::<Bytes>::new(chunks.len().max(1));
        for chunk in chunks {
            sender.send_data(Bytes::from_static(chunk)).await.unwrap();
        }
        drop(sender);
        read_whole(body).await
    }

    #[tokio::test]
    async fn a_body_in_several_frames_is_read_whole() {
        let cases: [&[&'static [u8]]; 4] = [
            &[],
            &[b"{\"client\":\"a\"}"],
            &[b"{\"client\"", b":\"a\"", b"}"],
            &[b"", b"{\"client\":\"a\"}"],
        ];
        for chunks in cases {
            let whole: Vec<u8> = chunks.concat();
            assert_eq!(read_frames(chunks).await.unwrap(), whole);
        }
        let one = read_body(Body::from("{\"client\":\"a\"}"), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(one, "{\"client\":\"a\"}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_in_any_frame() {
        static BIG: [u8; MAX_BODY_BYTES] = [b' '; MAX_BODY_BYTES];
        let cases: [&[&'static [u8]]; 2] = [&[&BIG, b"x"], &[b"x", &BIG]];
        for chunks in cases {
            let refused = read_frames(chunks).await.unwrap_err();
            assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE);
        }
        assert!(read_frames(&[&BIG]).await.is_ok());
    }

    /// A body that declares `length` bytes and never sends any.
    struct Silent {
        length: u64,
    }

    impl HttpBody for Silent {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            std::task::Poll::Pending
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(self.length)
        }
    }

    /// `read_whole` of a body declaring `length` bytes, polled once.
    fn read_silent_once(length: u64) -> std::task::Poll<Result<Bytes, Rejection>> {
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        std::pin::pin!(read_whole(Silent { length })).poll(&mut context)
    }

    #[test]
    fn a_body_declared_over_the_limit_is_refused_before_it_is_read() {
        match read_silent_once(MAX_BODY_BYTES as u64 + 1) {
            std::task::Poll::Ready(Err(refused)) => {
                assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE)
            }
            other => panic!("expected a 413 at once, got {other:?}"),
        }
        // At the limit, the body is waited for.
        assert!(read_silent_once(MAX_BODY_BYTES as u64).is_pending());
    }

    /// A body that has not come whole within its bound is refused then
    /// (408), on tokio's paused clock; one that comes in time is read, and
    /// one whole at once is read even with no time at all.
    #[tokio::test(start_paused = true)]
    async fn a_body_not_whole_within_its_bound_is_refused() {
        let started = tokio::time::Instant::now();
        let refused = read_body(Silent { length: 10 }, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::REQUEST_TIMEOUT);
        assert_eq!(started.elapsed(), Duration::from_secs(10));

        let (mut sender, body) = Channel::<Bytes>::new(2);
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(9)).await;
            sender.send_data(Bytes::from_static(b"{}")).await.unwrap();
        });
        let read = read_body(body, Duration::from_secs(10)).await;
        assert_eq!(read.unwrap(), "{}");
        late.await.unwrap();
    }
}
