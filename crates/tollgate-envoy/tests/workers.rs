//! The thread-per-core server on 127.0.0.1 port 0: connections handed to
//! the workers in turn, one budget and one service across them, and a
//! shutdown that answers the calls in flight before it returns.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tollgate::{MemoryBackend, Plan, PlanDecision, Store, StoreFuture};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::{Channel, Endpoint};

mod common;
use common::per_ip_config;

fn request(addr: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: addr.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// Serves `store` with `workers` workers; stopped by the sender.
async fn start(
    store: Arc<dyn Store>,
    workers: usize,
) -> (
    SocketAddr,
    oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), tollgate_envoy::Error>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let workers = NonZeroUsize::new(workers).unwrap();
    let task = tokio::spawn(tollgate_envoy::run_workers(
        listener,
        per_ip_config(store),
        workers,
        async {
            let _ = stopped.await;
        },
    ));
    (addr, stop, task)
}

/// A client on a connection of its own.
async fn connect(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    RateLimitServiceClient::new(channel)
}

/// The memory store, noting the name of the thread of every check.
struct Threads {
    store: MemoryBackend,
    seen: Mutex<BTreeSet<String>>,
}

impl Store for Threads {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        let name = std::thread::current().name().unwrap_or("").to_owned();
        self.seen.lock().unwrap().insert(name);
        self.store.check(plan, client, now_ms, cost)
    }
}

#[tokio::test]
async fn connections_are_spread_over_the_workers_and_share_one_budget() {
    let store = Arc::new(Threads {
        store: MemoryBackend::new(),
        seen: Mutex::new(BTreeSet::new()),
    });
    let (addr, stop, task) = start(store.clone(), 2).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(connect(addr).await);
    }
    // The same address from every connection: 2 a second in all, whichever
    // worker serves the connection.
    let mut codes = Vec::new();
    for client in &mut clients {
        let response = client.should_rate_limit(request("10.0.0.1")).await;
        codes.push(response.unwrap().into_inner().overall_code);
    }
    let ok = Code::Ok as i32;
    let over = Code::OverLimit as i32;
    assert_eq!(codes, [ok, ok, over, over]);
    let seen: Vec<String> = store.seen.lock().unwrap().iter().cloned().collect();
    assert_eq!(seen, ["tollgate-grpc-0", "tollgate-grpc-1"]);
    drop(clients);
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// The memory store, answering only once the test lets it (one permit per
/// check), after saying that a check has started.
struct Gate {
    store: MemoryBackend,
    started: mpsc::UnboundedSender<()>,
    permits: Semaphore,
}

impl Store for Gate {
    fn check<'a>(
        &'a self,
        plan: &'a Plan,
        client: &'a str,
        now_ms: u64,
        cost: u32,
    ) -> StoreFuture<'a, PlanDecision> {
        StoreFuture::new(async move {
            let _ = self.started.send(());
            self.permits.acquire().await.unwrap().forget();
            self.store.check(plan, client, now_ms, cost).await
        })
    }
}

#[tokio::test]
async fn shutdown_refuses_connections_at_once_and_answers_the_calls_in_flight() {
    let (started, mut checks) = mpsc::unbounded_channel();
    let store = Arc::new(Gate {
        store: MemoryBackend::new(),
        started,
        permits: Semaphore::new(0),
    });
    let (addr, stop, task) = start(store.clone(), 2).await;
    let mut client = connect(addr).await;
    let call = tokio::spawn(async move { client.should_rate_limit(request("10.0.0.2")).await });
    tokio::time::timeout(Duration::from_secs(5), checks.recv())
        .await
        .expect("the call reaches the store")
        .unwrap();
    let _ = stop.send(());
    // Shutting down: the listener closes at once (bounded wait for that)...
    let mut refused = false;
    for _ in 0..50 {
        // A connect that hangs (a full backlog nobody accepts from) is not
        // a refusal.
        let connect = tokio::net::TcpStream::connect(addr);
        if let Ok(Err(_)) = tokio::time::timeout(Duration::from_millis(200), connect).await {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "still accepting connections after shutdown");
    assert!(!task.is_finished(), "stopped before answering the call");
    // ...and the call in flight is still answered.
    store.permits.add_permits(1);
    let response = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .expect("the call in flight is answered")
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(response.overall_code, Code::Ok as i32);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the server stops once its calls are answered")
        .unwrap()
        .unwrap();
}
