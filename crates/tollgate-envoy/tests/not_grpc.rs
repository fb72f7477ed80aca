//! Calls to `ShouldRateLimit` that are not one well-formed unary gRPC call,
//! sent by a raw HTTP/2 client to the server on 127.0.0.1 port 0: another
//! content type, a GET, two request messages in one unary call. None of them
//! may be decided, so none may take anything from a budget; a well-formed
//! call sent by the same client is decided as usual.

mod common;

use common::{per_ip_config, Running};
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{HeaderMap, Method, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::TcpStream;
use tollgate::MemoryBackend;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

struct Server {
    running: Running,
}

impl Server {
    async fn start() -> Self {
        // Two calls per address per second (`per_ip_plan`).
        let config = per_ip_config(Arc::new(MemoryBackend::new()));
        Server {
            running: Running::start(config).await,
        }
    }

    /// What is left of `address`'s budget after one well-formed call.
    async fn remaining_after_one_call(&mut self, address: &str) -> u32 {
        let response = self
            .running
            .client
            .should_rate_limit(request(address))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.overall_code, Code::Ok as i32, "{address}");
        response.statuses[0].limit_remaining
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

fn request(address: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: address.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// gRPC's body: each message prefixed by a flag byte (0: not compressed)
/// and its length (4 bytes, big endian).
fn framed(messages: &[RateLimitRequest]) -> Bytes {
    let mut body = Vec::new();
    for message in messages {
        frame(&mut body, &message.encode_to_vec());
    }
    body.into()
}

/// Appends `message`'s bytes to `body` as one gRPC frame: not compressed,
/// its length (big endian), then the bytes.
fn frame(body: &mut Vec<u8>, message: &[u8]) {
    body.push(0);
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(message);
}

/// POSTs the one already encoded `message` to the server as a gRPC call.
async fn send_encoded(server: &Server, message: &[u8]) -> Answer {
    let mut body = Vec::new();
    frame(&mut body, message);
    raw(
        server.running.addr,
        Method::POST,
        "application/grpc",
        body.into(),
    )
    .await
}

/// What the server answered one raw request.
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    /// `grpc-status`: from the trailers, or from the headers of a
    /// trailers-only answer.
    grpc_status: Option<String>,
    body: Bytes,
}

impl Answer {
    /// The one `RateLimitResponse` of a successful call.
    fn response(&self) -> RateLimitResponse {
        let (prefix, message) = self.body.split_at(5);
        assert_eq!(
            prefix[1..],
            u32::try_from(message.len()).unwrap().to_be_bytes()
        );
        RateLimitResponse::decode(message).unwrap()
    }
}

/// One request on a fresh HTTP/2 connection, as a gRPC client never sends
/// it when `method`, `content_type` or `body` say so.
async fn raw(addr: SocketAddr, method: Method, content_type: &str, body: Bytes) -> Answer {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    let request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{PATH}"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(Full::new(body))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let grpc_status = trailers
        .get("grpc-status")
        .or_else(|| parts.headers.get("grpc-status"))
        .map(|v| v.to_str().unwrap().to_owned());
    drop(sender);
    connection.await.unwrap().unwrap();
    Answer {
        status: parts.status,
        headers: parts.headers,
        grpc_status,
        body: collected.to_bytes(),
    }
}

/// The control: the raw client's well-formed calls (`application/grpc`,
/// and with the `+proto` subtype) are decided and charged, so that the
/// refusals below are the server's and not the client's.
#[tokio::test]
async fn a_well_formed_raw_call_is_decided_and_charged() {
    let mut server = Server::start().await;
    for (content_type, address) in [
        ("application/grpc", "10.0.0.1"),
        ("application/grpc+proto", "10.0.0.2"),
    ] {
        let answer = raw(
            server.running.addr,
            Method::POST,
            content_type,
            framed(&[request(address)]),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        assert_eq!(answer.grpc_status.as_deref(), Some("0"), "{answer:?}");
        let response = answer.response();
        assert_eq!(response.overall_code, Code::Ok as i32);
        assert_eq!(response.statuses[0].limit_remaining, 1);
        assert_eq!(server.remaining_after_one_call(address).await, 0);
    }
    server.stop().await;
}

/// grpc-go answers a request whose content type is not gRPC's (or, here,
/// not protobuf's: the messages are read as protobuf) with HTTP 415;
/// nothing is decided.
#[tokio::test]
async fn a_wrong_content_type_is_refused_with_415_and_charges_nothing() {
    let mut server = Server::start().await;
    for (content_type, address) in [
        ("application/json", "10.0.1.1"),
        ("application/grpc+json", "10.0.1.2"),
        ("application/grpcx", "10.0.1.3"),
        ("text/plain", "10.0.1.4"),
    ] {
        let answer = raw(
            server.running.addr,
            Method::POST,
            content_type,
            framed(&[request(address)]),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type}: {answer:?}"
        );
        // As grpc-go: INVALID_ARGUMENT in the headers, for gRPC clients.
        assert_eq!(answer.grpc_status.as_deref(), Some("3"));
        assert_eq!(
            server.remaining_after_one_call(address).await,
            1,
            "{content_type} was charged"
        );
    }
    server.stop().await;
}

/// gRPC calls are POSTs; a GET carrying a well-formed call's body is
/// answered 405 (`allow: POST`) and decides nothing.
#[tokio::test]
async fn a_get_is_refused_with_405_and_charges_nothing() {
    let mut server = Server::start().await;
    for (method, address) in [(Method::GET, "10.0.2.1"), (Method::PUT, "10.0.2.2")] {
        let answer = raw(
            server.running.addr,
            method.clone(),
            "application/grpc",
            framed(&[request(address)]),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method}: {answer:?}"
        );
        assert_eq!(
            answer.headers.get("allow").map(|v| v.as_bytes()),
            Some(&b"POST"[..])
        );
        // As grpc-go: INTERNAL in the headers, for gRPC clients.
        assert_eq!(answer.grpc_status.as_deref(), Some("13"));
        assert_eq!(
            server.remaining_after_one_call(address).await,
            1,
            "{method} was charged"
        );
    }
    server.stop().await;
}

/// A unary call carries exactly one request message; the gRPC spec answers
/// a second with `UNIMPLEMENTED` (request cardinality violation). Neither
/// message is decided: not the first, not the second.
#[tokio::test]
async fn two_messages_in_one_unary_call_are_unimplemented_and_charge_nothing() {
    let mut server = Server::start().await;
    let answer = raw(
        server.running.addr,
        Method::POST,
        "application/grpc",
        framed(&[request("10.0.3.1"), request("10.0.3.2")]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    // 12: UNIMPLEMENTED.
    assert_eq!(answer.grpc_status.as_deref(), Some("12"), "{answer:?}");
    for address in ["10.0.3.1", "10.0.3.2"] {
        assert_eq!(
            server.remaining_after_one_call(address).await,
            1,
            "{address} was charged"
        );
    }
    // The same with the second message cut short (part of its prefix).
    let mut body = framed(&[request("10.0.3.3")]).to_vec();
    body.extend_from_slice(&[0, 0, 0]);
    let answer = raw(
        server.running.addr,
        Method::POST,
        "application/grpc",
        body.into(),
    )
    .await;
    assert_eq!(answer.grpc_status.as_deref(), Some("12"), "{answer:?}");
    assert_eq!(server.remaining_after_one_call("10.0.3.3").await, 1);
    server.stop().await;
}

/// Envoy puts a request header's bytes into a descriptor value as they
/// came, UTF-8 or not (`x-api-key: k\xff`), and protobuf's `string` must be
/// UTF-8, so the message cannot be decoded. An error status would hand the
/// request to Envoy's failure mode, by default letting it through: one
/// byte would skip every limit of the route. It is `OVER_LIMIT`, and
/// nothing is charged.
#[tokio::test]
async fn a_descriptor_value_that_is_not_utf8_is_over_limit_not_an_error() {
    let mut server = Server::start().await;
    let mut message = request("10.0.9.VALUE").encode_to_vec();
    let at = message
        .windows(5)
        .position(|w| w == b"VALUE")
        .expect("the value's bytes");
    message[at + 3] = 0xff;
    let answer = send_encoded(&server, &message).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.grpc_status.as_deref(), Some("0"), "{answer:?}");
    assert_eq!(answer.response().overall_code, Code::OverLimit as i32);
    // Nothing decided: a well-formed call still finds the whole budget.
    assert_eq!(server.remaining_after_one_call("10.0.9.VALUE").await, 1);
    server.stop().await;
}

/// A message over tonic's 4 MiB decoding limit (descriptor values from a
/// client's headers, up to Envoy's own header limit) is refused by tonic
/// before the service sees it, with `OUT_OF_RANGE`: an error status, which
/// Envoy's failure mode lets through by default. It is `OVER_LIMIT`, and
/// nothing is charged (an audit: a 5 MB message was `OUT_OF_RANGE`).
#[tokio::test]
async fn a_message_over_the_decoding_limit_is_over_limit_not_an_error() {
    let mut server = Server::start().await;
    let mut message = request("10.0.9.9").encode_to_vec();
    // An unknown field (number 99, length-delimited) of 5 MB: prost would
    // skip it, were the message not over the limit.
    let size = 5_000_000u32;
    message.extend_from_slice(&[0x9a, 0x06]);
    prost::encoding::encode_varint(u64::from(size), &mut message);
    message.resize(message.len() + size as usize, b'x');
    let answer = send_encoded(&server, &message).await;
    assert_eq!(answer.grpc_status.as_deref(), Some("0"), "{answer:?}");
    assert_eq!(answer.response().overall_code, Code::OverLimit as i32);
    assert_eq!(server.remaining_after_one_call("10.0.9.9").await, 1);
    server.stop().await;
}
