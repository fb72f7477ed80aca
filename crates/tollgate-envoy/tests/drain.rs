//! A shutdown's drain is bounded: a gRPC call whose request was never sent
//! whole (a client holding its stream open) kept the server from ever
//! stopping (an audit: 75 s after SIGTERM and counting). With
//! `ServiceConfig::drain_within`, the server stops that long after the
//! signal, closing the connection; the call was never decided.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::StreamBody;
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tollgate::{MemoryBackend, Store};

mod common;
use common::{descriptor, per_ip_config, per_ip_plan, request};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// One gRPC message: not compressed, its length (big endian), its bytes.
fn framed(address: &str) -> Bytes {
    let message = request(vec![descriptor("remote_address", address)]).encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(&message);
    body.into()
}

type Chunk = Result<Frame<Bytes>, Infallible>;
type Chunks = mpsc::Sender<Chunk>;
type Call<S> = hyper::Request<StreamBody<S>>;

/// A call whose body is what is sent on the returned sender, until it is
/// dropped.
fn call(addr: std::net::SocketAddr) -> (Chunks, Call<impl futures_util::Stream<Item = Chunk>>) {
    let (chunks, mut received) = mpsc::channel(4);
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| {
        received.poll_recv(cx)
    }));
    let request = hyper::Request::post(format!("http://{addr}{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(body)
        .unwrap();
    (chunks, request)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_never_sent_whole_holds_the_shutdown_for_the_drain_at_most() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let store = Arc::new(MemoryBackend::new());
    let server = tokio::spawn(tollgate_envoy::run_workers(
        listener,
        per_ip_config(store.clone()).drain_within(Duration::from_millis(300)),
        NonZeroUsize::MIN,
        async {
            let _ = stopped.await;
        },
    ));
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    // The held call: half of its message sent, the rest never.
    let (held_chunks, held) = call(addr);
    let whole = framed("10.0.0.1");
    let half = whole.slice(..whole.len() / 2);
    held_chunks.send(Ok(Frame::data(half))).await.unwrap();
    let held = tokio::spawn(sender.clone().send_request(held));
    // A whole call after it on the same connection, answered: the server
    // has read the held call's head before this one's.
    let (chunks, request) = call(addr);
    chunks
        .send(Ok(Frame::data(framed("10.0.0.2"))))
        .await
        .unwrap();
    drop(chunks);
    let answered = sender.clone().send_request(request).await.unwrap();
    assert_eq!(answered.status(), 200);
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("a call held open kept the server from stopping")
        .unwrap()
        .unwrap();
    // Its connection was closed: the held call ends without an answer.
    let ended = tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("the held call's connection stayed open")
        .unwrap();
    assert!(ended.is_err(), "{ended:?}");
    drop(held_chunks);
    // Never decided: its client has its whole limit (the other used one).
    assert_eq!(remaining(&store, "10.0.0.1").await, 2);
    assert_eq!(remaining(&store, "10.0.0.2").await, 1);
}

/// What is left of the address's limit, at time 0.
async fn remaining(store: &MemoryBackend, address: &str) -> u32 {
    let key = format!("edge|remote_address={address}");
    let peek = store.check(&per_ip_plan(), &key, 0, 0).await.unwrap();
    peek.limits[0].decision.remaining
}
