//! A proxy shutting down right after a Redis stall still takes back what
//! its abandoned calls consumed: each worker lets the store settle (the
//! replies of its calls in flight, and their refunds) before its runtime
//! ends, which would otherwise drop the task waiting for a held reply. A
//! real upstream, a real `redis-server` spawned here, and a relay in front
//! of it that holds Redis's replies.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use tokio::sync::oneshot;
use tollgate::{AnyPolicy, FailurePolicy, Limit, ManualClock, Plan};
use tollgate_guard::GuardedStore;
use tollgate_proxy::{bind_workers, run_workers, KeySource, Placement, ProxyConfig};
use tollgate_redis::testing::{load_scripts, wait_until, RedisServer, Relay};
use tollgate_redis::{RedisStore, RedisStoreConfig};
use tollgate_testkit::{counting_upstream, get_status};
use tollgate_tower::RateLimitConfig;

const TIMEOUT: Duration = Duration::from_millis(200);

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("token-bucket", 5, 86_400_000).expect("policy");
    Plan::new("p", vec![Limit::new("1d", policy, false)]).expect("plan")
}

/// One request of `alice` through the proxy at `addr`: its status.
async fn alice(addr: std::net::SocketAddr) -> u16 {
    tokio::task::spawn_blocking(move || get_status(addr, "/", &[("x-client-id", "alice")]))
        .await
        .expect("the request's thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_shutting_down_takes_back_what_its_abandoned_calls_used() {
    let Some(server) = RedisServer::spawn("proxy_settle_on_shutdown") else {
        return;
    };
    load_scripts(&server.url()).await;
    let relay = Relay::start(server.port());
    let config = RedisStoreConfig {
        prefix: "proxy-settle".into(),
        timeout: TIMEOUT,
        ..RedisStoreConfig::default()
    };
    let redis = RedisStore::connect(&relay.url(), config.clone())
        .await
        .expect("connect");
    let guarded = GuardedStore::new(redis.clone(), TIMEOUT, FailurePolicy::FailClosed);
    let limits = RateLimitConfig::new(plan(), Arc::new(guarded), Arc::new(ManualClock::new(0)));
    let (upstream, _) = counting_upstream().await;
    let key = KeySource::Header(HeaderName::from_static("x-client-id"));
    let proxy = ProxyConfig::new(&format!("http://{upstream}"), key, limits).expect("config");
    let one = NonZeroUsize::new(1).expect("one");
    let (addr, listeners) = bind_workers("127.0.0.1:0".parse().expect("addr"), one).expect("bind");
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(run_workers(
        listeners,
        proxy,
        Placement::anywhere(),
        async {
            let _ = stopped.await;
        },
    ));

    assert_eq!(alice(addr).await, 200);
    relay.hold_replies();
    assert_eq!(
        alice(addr).await,
        429,
        "fail-closed while the reply is held"
    );
    let _ = stop.send(());
    // A shutdown that does not wait is over long before this.
    wait_until(50, || serving.is_finished()).await;
    relay.release_replies();
    serving.await.expect("the proxy's task").expect("served");
    assert_eq!(redis.call_counts().refunded, 1, "the held call taken back");

    // Only the first request used alice's budget.
    let direct = RedisStore::connect(&server.url(), config)
        .await
        .expect("connect");
    let look = direct.decide(&plan(), "alice", 0, 0).await.expect("look");
    assert_eq!(look.limits[0].decision.remaining, 4);
}
