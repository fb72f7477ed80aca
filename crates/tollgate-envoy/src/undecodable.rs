//! A `ShouldRateLimit` call whose message cannot be decoded is answered
//! `OVER_LIMIT`, not with tonic's `INTERNAL`.
//!
//! Envoy builds descriptor values from request headers byte for byte, and
//! a header value need not be UTF-8 (`x-api-key: k\xff`), where protobuf's
//! `string` must be: prost refuses the whole message before the service
//! sees it. An error status hands the request to Envoy's failure mode,
//! which by default (`failure_mode_deny: false`) lets it through: any
//! client could skip every limit of a route, its other descriptors' too,
//! with one byte. The request is refused instead, consuming nothing, as
//! the HTTP front ends refuse a key that is not UTF-8 and as a cost no
//! limit may grant is refused (`OVER_LIMIT`, never an error status).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Response};
use http_body::{Frame, SizeHint};
use prost::Message;
use tonic::body::Body;

/// The path of Envoy's rate limit call: only its answers are replaced.
pub(crate) const SHOULD_RATE_LIMIT: &str =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Whether `response` is tonic's answer to a request message it could not
/// decode, in a trailers-only answer: `INTERNAL`, "failed to decode", or
/// `OUT_OF_RANGE`, "decoded message length too large" (over its 4 MiB
/// limit: descriptor values come from a client's headers). Its message is
/// percent-encoded, or not, by tonic's version.
pub(crate) fn is_undecodable(response: &Response<Body>) -> bool {
    let header = |name| response.headers().get(name).map(HeaderValue::as_bytes);
    let words: [&[u8]; 2] = match header("grpc-status") {
        Some(b"13") => [b"failed to decode", b"failed%20to%20decode"],
        Some(b"11") => [
            b"decoded message length too large",
            b"decoded%20message%20length%20too%20large",
        ],
        _ => return false,
    };
    let says = |message: &[u8], words: &[u8]| message.windows(words.len()).any(|w| w == words);
    header("grpc-message").is_some_and(|message| words.iter().any(|w| says(message, w)))
}

/// A successful call answering `OVER_LIMIT` for the whole request, with no
/// descriptor status (none could be read): Envoy refuses the request.
pub(crate) fn over_limit() -> Response<Body> {
    let message = RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        ..RateLimitResponse::default()
    }
    .encode_to_vec();
    // gRPC's framing: not compressed, the length (big endian), the message.
    let length = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(&message);
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = OneFrame {
        data: Some(Bytes::from(framed)),
        trailers: Some(trailers),
    };
    let mut response = Response::new(Body::new(body));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// A body of one data frame, then trailers.
struct OneFrame {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for OneFrame {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let frame = match (this.data.take(), this.trailers.take()) {
            (Some(data), trailers) => {
                this.trailers = trailers;
                Some(Frame::data(data))
            }
            (None, trailers) => trailers.map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let length = self.data.as_ref().map_or(0, Bytes::len);
        SizeHint::with_exact(u64::try_from(length).unwrap_or(u64::MAX))
    }
}
