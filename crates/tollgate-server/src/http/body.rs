//! Reading a request body whole, up to [`MAX_BODY_BYTES`].
//!
//! A check's body is a few dozen bytes and arrives in one frame. Collecting
//! it (`http-body-util`'s `collect`) put that one `Bytes` into a queue of
//! its own and took it out again: an allocation and about 800 CPU
//! instructions per check (BENCHMARKS.md, "Header values and allocations on
//! the check path"). So the first frame is read alone, and only a body that
//! goes on after it is collected.

use std::pin::pin;

use axum::body::{Bytes, HttpBody};
use axum::http::StatusCode;
use axum::BoxError;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::{Rejection, MAX_BODY_BYTES};

/// A request body, whole, refused past [`MAX_BODY_BYTES`] (413) or when
/// the connection fails while it is read (400).
pub(crate) async fn read_body<B>(body: B) -> Result<Bytes, Rejection>
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
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

/// What a failed read tells the caller.
fn refusal(error: BoxError) -> Rejection {
    if error.is::<LengthLimitError>() {
        Rejection::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over the limit of {MAX_BODY_BYTES} bytes"),
        )
    } else {
        Rejection::bad_request(format!("cannot read the request body: {error}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http_body_util::channel::Channel;

    /// `read_body` of a body that sends `chunks` one frame each, with no
    /// size hint.
    async fn read_frames(chunks: &[&'static [u8]]) -> Result<Bytes, Rejection> {
        let (mut sender, body) = Channel::<Bytes>::new(chunks.len().max(1));
        for chunk in chunks {
            sender.send_data(Bytes::from_static(chunk)).await.unwrap();
        }
        drop(sender);
        read_body(body).await
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
        let one = read_body(Body::from("{\"client\":\"a\"}")).await.unwrap();
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
}
