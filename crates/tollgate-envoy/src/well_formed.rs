//! [`WellFormedLayer`]: refuses what is not one well-formed gRPC call with a
//! single request message, before the service decides (and charges) it.
//!
//! tonic (0.14) routes a request by its path alone and reads its body as
//! gRPC, whatever its method and content type; of a unary call it decodes
//! the first message and reads past any others without a word. So a GET, a
//! JSON content type, or two messages in one `ShouldRateLimit` call would
//! each be decided, and charged, as a call. They are refused here instead,
//! as grpc-go refuses them:
//!
//! - a method other than `POST`: HTTP 405 with `allow: POST` (and gRPC
//!   `INTERNAL` in the headers, for gRPC clients);
//! - a content type other than `application/grpc` or
//!   `application/grpc+proto` (parameters after `;` allowed, case
//!   insensitive): HTTP 415 (gRPC `INVALID_ARGUMENT`); the messages are read
//!   as protobuf, so `+json` and the like are refused too;
//! - any byte past the first message: gRPC `UNIMPLEMENTED`, the code the
//!   gRPC spec gives a request cardinality violation. The body ends in that
//!   error as the byte arrives; tonic reads a unary call's body to its end
//!   before it calls the service, so the service never sees the call.
//!
//! Every method of the routes this crate serves (`ShouldRateLimit`, and
//! health's `Check` and `Watch`) takes exactly one request message.

use std::convert::Infallible;
use std::future::{Future, Ready};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Frame, SizeHint};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::Status;
use tower::{Layer, Service};

use crate::undecodable;

/// Wraps a gRPC service in [`WellFormed`] (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WellFormedLayer;

impl<S> Layer<S> for WellFormedLayer {
    type Service = WellFormed<S>;

    fn layer(&self, inner: S) -> WellFormed<S> {
        WellFormed { inner }
    }
}

/// A gRPC service that only sees well-formed calls of one request message;
/// it keeps the inner service's name, so that tonic routes to it alike.
#[derive(Debug, Clone)]
pub(crate) struct WellFormed<S> {
    inner: S,
}

impl<S: NamedService> NamedService for WellFormed<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request<Body>> for WellFormed<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>,
    // tonic's generated servers answer with a boxed future.
    S::Future: Unpin,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // A refusal leaves the inner service uncalled after `poll_ready`:
        // tonic's services hold nothing for a call they are ready for.
        match refusal(&request) {
            Some(refusal) => Answer::Refused(std::future::ready(Ok(refusal))),
            None => {
                let rate_limit = request.uri().path() == undecodable::SHOULD_RATE_LIMIT;
                let future =
                    (self.inner).call(request.map(|body| Body::new(OneMessage::new(body))));
                Answer::Called { future, rate_limit }
            }
        }
    }
}

/// The HTTP answer to a request that is not a gRPC call at all, if it is not.
fn refusal(request: &Request<Body>) -> Option<Response<Body>> {
    if request.method() != Method::POST {
        let status = Status::internal(format!(
            "invalid gRPC request method {:?}, which should be POST",
            request.method().as_str()
        ));
        let mut response = answer(status, StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return Some(response);
    }
    let content_type = request.headers().get(CONTENT_TYPE);
    if !is_grpc_proto(content_type) {
        let shown = content_type.map_or_else(Default::default, |v| {
            String::from_utf8_lossy(v.as_bytes()).into_owned()
        });
        let status =
            Status::invalid_argument(format!("invalid gRPC request content-type {shown:?}"));
        return Some(answer(status, StatusCode::UNSUPPORTED_MEDIA_TYPE));
    }
    None
}

/// `status` as gRPC headers, on an HTTP error `code`.
fn answer(status: Status, code: StatusCode) -> Response<Body> {
    let mut response = status.into_http::<Body>();
    *response.status_mut() = code;
    response
}

/// Whether a content type is gRPC's with protobuf messages.
fn is_grpc_proto(content_type: Option<&HeaderValue>) -> bool {
    let Some(value) = content_type.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media_type = value
        .split_once(';')
        .map_or(value, |(media, _)| media)
        .trim();
    media_type.eq_ignore_ascii_case("application/grpc")
        || media_type.eq_ignore_ascii_case("application/grpc+proto")
}

/// The future of [`WellFormed`]: a refusal at once, or the inner service's
/// answer.
#[derive(Debug)]
pub(crate) enum Answer<F> {
    /// Not a gRPC call: answered without the inner service.
    Refused(Ready<Result<Response<Body>, Infallible>>),
    /// Handed to the inner service; `rate_limit`: a `ShouldRateLimit`
    /// call, whose undecodable message is `OVER_LIMIT` (`undecodable.rs`).
    Called { future: F, rate_limit: bool },
}

impl<F> Future for Answer<F>
where
    F: Future<Output = Result<Response<Body>, Infallible>> + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Answer::Refused(ready) => Pin::new(ready).poll(cx),
            Answer::Called { future, rate_limit } => {
                let answer = ready!(Pin::new(future).poll(cx));
                Poll::Ready(answer.map(|response| match *rate_limit {
                    true if undecodable::is_undecodable(&response) => undecodable::over_limit(),
                    _ => response,
                }))
            }
        }
    }
}

/// A request body that ends in `UNIMPLEMENTED` at the first byte past its
/// first gRPC message.
struct OneMessage {
    inner: Body,
    framing: Framing,
}

impl OneMessage {
    fn new(inner: Body) -> Self {
        Self {
            inner,
            framing: Framing::Prefix { read: 0, length: 0 },
        }
    }
}

/// Where the body is in gRPC's framing: each message is a flag byte
/// (compressed or not), its length (4 bytes, big endian), then its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// In the first message's prefix: `read` of its 5 bytes seen, and the
    /// length bytes among them so far.
    Prefix { read: u8, length: u32 },
    /// In the first message: `left` bytes of it to come.
    Message { left: usize },
    /// The first message is whole: one more byte starts a second one.
    Whole,
    /// A second message began: the body ended in error.
    Refused,
}

impl Framing {
    /// Moves past `chunk`; `false` when it runs past the first message.
    fn advance(&mut self, mut chunk: &[u8]) -> bool {
        while !chunk.is_empty() {
            *self = match *self {
                Framing::Prefix { read, length } => {
                    let Some((&byte, rest)) = chunk.split_first() else {
                        break;
                    };
                    chunk = rest;
                    // Byte 0 is the flag, bytes 1 to 4 the length.
                    let length = match read {
                        0 => 0,
                        _ => length << 8 | u32::from(byte),
                    };
                    match (read, length) {
                        (4, 0) => Framing::Whole,
                        (4, _) => Framing::Message {
                            left: usize::try_from(length).unwrap_or(usize::MAX),
                        },
                        _ => Framing::Prefix {
                            read: read + 1,
                            length,
                        },
                    }
                }
                Framing::Message { left } => {
                    let taken = chunk.len().min(left);
                    chunk = &chunk[taken..];
                    match left - taken {
                        0 => Framing::Whole,
                        left => Framing::Message { left },
                    }
                }
                Framing::Whole | Framing::Refused => return false,
            };
        }
        true
    }
}

impl http_body::Body for OneMessage {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.framing == Framing::Refused {
            return Poll::Ready(None);
        }
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let Some(data) = frame.as_ref().and_then(|f| f.as_ref().ok()?.data_ref()) {
            if !this.framing.advance(data) {
                this.framing = Framing::Refused;
                return Poll::Ready(Some(Err(Status::unimplemented(
                    "a unary call takes one request message, and this one has more",
                ))));
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.framing == Framing::Refused || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framing_after(chunks: &[&[u8]]) -> Option<Framing> {
        let mut framing = Framing::Prefix { read: 0, length: 0 };
        chunks
            .iter()
            .all(|chunk| framing.advance(chunk))
            .then_some(framing)
    }

    #[test]
    fn one_message_in_any_chunks_is_whole_and_a_byte_more_is_refused() {
        let message: &[u8] = &[0, 0, 0, 0, 3, 7, 8, 9];
        assert_eq!(framing_after(&[message]), Some(Framing::Whole));
        let split: Vec<&[u8]> = message.chunks(1).collect();
        assert_eq!(framing_after(&split), Some(Framing::Whole));
        assert_eq!(
            framing_after(&[&message[..6]]),
            Some(Framing::Message { left: 2 })
        );
        assert_eq!(framing_after(&[message, &[0]]), None);
        assert_eq!(framing_after(&[&[message, &[0]].concat()]), None);
        // An empty message is whole at its prefix's end.
        assert_eq!(framing_after(&[&[0, 0, 0, 0, 0]]), Some(Framing::Whole));
        assert_eq!(framing_after(&[&[0, 0, 0, 0, 0, 0]]), None);
        // The length is big endian: 256 bytes to come.
        assert_eq!(
            framing_after(&[&[1, 0, 0, 1, 0, 42]]),
            Some(Framing::Message { left: 255 })
        );
    }

    #[test]
    fn only_grpc_with_protobuf_is_a_grpc_content_type() {
        let is = |value: &'static str| is_grpc_proto(Some(&HeaderValue::from_static(value)));
        assert!(is("application/grpc"));
        assert!(is("application/grpc+proto"));
        assert!(is("Application/GRPC; charset=utf-8"));
        assert!(!is("application/grpc+json"));
        assert!(!is("application/grpcx"));
        assert!(!is("application/json"));
        assert!(!is(""));
        assert!(!is_grpc_proto(None));
    }
}
