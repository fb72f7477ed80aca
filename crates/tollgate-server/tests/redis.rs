//! `tollgate serve` on Redis: instances share one limit through one Redis,
//! and a server whose Redis is down answers by its failure policy, says so,
//! and goes back to Redis once it is up.

mod common;

use common::TestServer;
use reqwest::StatusCode;
use tollgate_redis::testing::{free_port, load_scripts, wait_until, RedisServer, Relay};
use tollgate_server::{Config, StoreHandle};
use tollgate_testkit::metric;

/// Plan `shared`: 5 requests per day, for every client.
fn config_text(url: &str, policy: &str) -> String {
    format!(
        r#"
default_plan = "shared"

[store]
url = "{url}"
failure_policy = "{policy}"
prefix = "serve-test"
timeout = "200ms"

[[plans.shared]]
name = "1d"
policy = "sliding-window"
limit = 5
window = "1d"
"#
    )
}

/// A server on `text` with its own Redis connection (as a separate
/// instance would have).
async fn start(text: &str) -> TestServer {
    let config = Config::parse(text).expect("test config is valid");
    let store = StoreHandle::for_config(&config).expect("redis store");
    TestServer::start_with(text, config, store).await
}

#[tokio::test]
async fn two_instances_on_one_redis_share_one_limit() {
    let Some(redis) = RedisServer::spawn("two_instances_on_one_redis_share_one_limit") else {
        return;
    };
    let text = config_text(&redis.url(), "fail-closed");
    let a = start(&text).await;
    let b = start(&text).await;
    let mut allowed = 0;
    let mut rejected_by_store = [false; 2];
    for i in 0..12 {
        // Alternate instances, each at its own (equal) clock.
        let server = if i % 2 == 0 { &a } else { &b };
        let answer = server.check("tenant-1", 1).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let body = answer.json();
        // Each instance's first rejection comes from Redis; later ones
        // from its rejection cache (the wait is a day).
        let expected = if body["allowed"] == true || !rejected_by_store[i % 2] {
            "store"
        } else {
            "cache"
        };
        assert_eq!(body["decided_by"], expected, "{body}");
        if body["allowed"] == true {
            allowed += 1;
        } else {
            rejected_by_store[i % 2] = true;
        }
    }
    assert_eq!(allowed, 5, "5 per day across both instances");
    // Each instance sees what the other used; another client is untouched.
    assert_eq!(a.remaining("tenant-1", 0).await, 0);
    assert_eq!(b.remaining("tenant-1", 0).await, 0);
    assert_eq!(b.remaining("tenant-2", 0).await, 5);
    let keys = redis.cli(&["--scan", "--pattern", "serve-test:*"]);
    assert!(keys.lines().count() >= 2, "keys under the prefix: {keys}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_server_whose_redis_is_down_answers_by_its_failure_policy() {
    // Nothing listens there: the server still starts (lazy connection).
    let url = format!("redis://127.0.0.1:{}", free_port());
    for (policy, allowed, status) in [
        ("fail-open", true, StatusCode::NO_CONTENT),
        ("fail-closed", false, StatusCode::TOO_MANY_REQUESTS),
    ] {
        let t = start(&config_text(&url, policy)).await;
        for _ in 0..2 {
            let answer = t.check("tenant-1", 1).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
            let body = answer.json();
            assert_eq!(body["allowed"], allowed, "{policy}: {body}");
            assert_eq!(body["decided_by"], policy, "{body}");
        }
        let auth = t.get_with("/v1/auth", &[("X-Client-Id", "tenant-1")]).await;
        assert_eq!(auth.status, status, "{policy}");
        let m = t.get("/metrics").await.body;
        assert_eq!(
            metric(
                &m,
                &format!("tollgate_decisions_by_total{{decided_by=\"{policy}\"}}")
            ),
            3
        );
        assert_eq!(
            metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
            3
        );
        assert_eq!(
            metric(&m, "tollgate_decisions_by_total{decided_by=\"store\"}"),
            0
        );
        t.stop().await;
    }
}

#[tokio::test]
async fn local_fallback_stands_in_while_redis_is_killed_and_redis_takes_over_again() {
    let Some(mut redis) = RedisServer::spawn(
        "local_fallback_stands_in_while_redis_is_killed_and_redis_takes_over_again",
    ) else {
        return;
    };
    let t = start(&config_text(&redis.url(), "local-fallback")).await;
    assert_eq!(t.check("tenant-1", 1).await.json()["decided_by"], "store");
    redis.kill();
    let verdicts: Vec<bool> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            let body = t.check("tenant-1", 1).await.json();
            assert_eq!(body["decided_by"], "local-fallback", "{body}");
            v.push(body["allowed"] == true);
        }
        v
    };
    // The local limiter starts empty: 5 of 6 pass, then it limits.
    assert_eq!(verdicts, [true, true, true, true, true, false]);
    redis.restart();
    // The connection comes back by itself, at the circuit breaker's next
    // probe (every 500 ms by default): poll, bounded (each try waits at
    // most the 200ms timeout, then 50 ms).
    let back = {
        let mut back = false;
        for _ in 0..50 {
            if t.check("tenant-2", 1).await.json()["decided_by"] == "store" {
                back = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        back
    };
    assert!(back, "the server went back to Redis after it restarted");
    t.stop().await;
}

/// `/metrics` counts the decisions the server sent to Redis and the script
/// calls that carried them: as many decisions as the store decided, in at
/// most as many calls (fewer when concurrent decisions were batched).
#[tokio::test]
async fn metrics_count_the_decisions_sent_to_redis_and_the_calls_that_carried_them() {
    let Some(redis) = RedisServer::spawn(
        "metrics_count_the_decisions_sent_to_redis_and_the_calls_that_carried_them",
    ) else {
        return;
    };
    let t = start(&config_text(&redis.url(), "fail-closed")).await;
    let before = t.get("/metrics").await.body;
    let sent_before = metric(&before, "tollgate_store_decisions_sent_total");
    let calls_before = metric(&before, "tollgate_store_calls_total");
    for i in 0..40 {
        let answer = t.check(&format!("metrics-{i}"), 1).await;
        assert_eq!(answer.json()["decided_by"], "store", "{}", answer.body);
    }
    let after = t.get("/metrics").await.body;
    let sent = metric(&after, "tollgate_store_decisions_sent_total") - sent_before;
    let calls = metric(&after, "tollgate_store_calls_total") - calls_before;
    assert_eq!(sent, 40, "{after}");
    assert!((1..=40).contains(&calls), "{calls} calls for 40 decisions");
}

/// A decision Redis ran in time but whose reply was held on its way back
/// (a relay in front of Redis) is answered by the failure policy after the
/// timeout; once the reply comes, the server takes back what it consumed,
/// and `/metrics` says so: the client's whole budget is left.
#[tokio::test]
async fn a_decision_answered_by_the_failure_policy_is_refunded_when_its_late_reply_comes() {
    let Some(redis) = RedisServer::spawn(
        "a_decision_answered_by_the_failure_policy_is_refunded_when_its_late_reply_comes",
    ) else {
        return;
    };
    let relay = Relay::start(redis.port());
    let t = start(&config_text(&relay.url(), "fail-closed")).await;
    let warm = t.check("warm-up", 1).await;
    assert_eq!(warm.json()["decided_by"], "store", "{}", warm.body);

    relay.hold_replies();
    let held = t.check("held", 3).await;
    assert_eq!(held.json()["decided_by"], "fail-closed", "{}", held.body);
    relay.release_replies();

    assert_one_use_taken_back(&t).await;
    assert_whole_budget_left(&t, "held").await;
    t.stop().await;
}

/// `/metrics` counts one use taken back, within 2 s.
async fn assert_one_use_taken_back(t: &TestServer) {
    let series = "tollgate_store_refunds_total{outcome=\"restored\"}";
    let mut restored = 0;
    for _ in 0..100 {
        restored = metric(&t.get("/metrics").await.body, series);
        if restored == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(restored, 1, "{series}");
}

/// The store allows `client` the whole budget of `shared` (5) at once.
async fn assert_whole_budget_left(t: &TestServer, client: &str) {
    let answer = t.check(client, 5).await;
    assert_eq!(answer.json()["decided_by"], "store", "{}", answer.body);
    assert_eq!(
        answer.json()["allowed"],
        true,
        "the whole budget: {}",
        answer.body
    );
}

/// With `[store] replicas_to_ack = 1`, a decision no replica acknowledged
/// (the Redis has none yet) is answered by the failure policy, taken back,
/// and counted by `/metrics`; once a replica is in sync, the store decides,
/// with the client's whole budget left.
#[tokio::test]
async fn a_decision_no_replica_acknowledged_is_answered_by_the_failure_policy_and_counted() {
    let Some(redis) = RedisServer::spawn("a_decision_no_replica_acknowledged") else {
        return;
    };
    // Loaded before: a script Redis lacks would be sent again after a WAIT
    // (NOSCRIPT), past its deadline.
    load_scripts(&redis.url()).await;
    // A timeout long enough for a replica's acknowledgement on a loaded
    // machine (at 200 ms, with two busy loops beside the test binary, the
    // decision after the replica's sync timed out in 3 to 4 runs of 6): it
    // is also how long the first decision waits for an acknowledgement
    // that cannot come.
    let text = config_text(&redis.url(), "fail-closed").replace(
        "timeout = \"200ms\"\n",
        "timeout = \"1s\"\nreplicas_to_ack = 1\n",
    );
    let t = start(&text).await;
    let held = t.check("c", 3).await;
    assert_eq!(held.json()["decided_by"], "fail-closed", "{}", held.body);

    assert_one_use_taken_back(&t).await;
    let metrics = t.get("/metrics").await.body;
    assert_eq!(metric(&metrics, "tollgate_store_not_replicated_total"), 1);

    let _replica =
        RedisServer::spawn_replica_of("a_decision_no_replica_acknowledged", redis.port())
            .expect("replica");
    assert_whole_budget_left(&t, "c").await;
    t.stop().await;
}

/// A server that exits right after a Redis stall still takes back what its
/// abandoned calls consumed: on shutdown it waits (at most
/// `tollgate_config::store::SETTLE_WITHIN`) for the replies of the calls in
/// flight and the refunds they need. The server runs in a runtime of its
/// own, dropped when `run` returns, as a process exit drops it; a reply
/// still held then would never be read.
#[tokio::test]
async fn a_server_shutting_down_waits_for_late_replies_and_takes_them_back() {
    let Some(redis) = RedisServer::spawn("a_server_shutting_down_waits_for_late_replies") else {
        return;
    };
    let relay = Relay::start(redis.port());
    let text = config_text(&relay.url(), "fail-closed");
    let (addr_sender, addr) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let process = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        runtime.block_on(async move {
            let config = Config::parse(&text).expect("test config is valid");
            let store = StoreHandle::for_config(&config).expect("redis store");
            let clock = std::sync::Arc::new(tollgate::ManualClock::new(common::START_MS));
            let server = tollgate_server::Server::new(config, store, clock);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_sender.send(listener.local_addr().unwrap()).unwrap();
            let shutdown = async {
                let _ = stopped.await;
            };
            tollgate_server::run(listener, server, shutdown)
                .await
                .unwrap();
        });
    });
    let base = format!("http://{}", addr.recv().expect("the server's address"));
    let http = reqwest::Client::new();
    let check = |client: &'static str, cost: u32| {
        let body = format!(r#"{{"client": "{client}", "cost": {cost}}}"#);
        let request = http.post(format!("{base}/v1/check")).body(body);
        async move {
            let response = request.send().await.expect("an answer");
            let body = response.text().await.expect("a body");
            serde_json::from_str::<serde_json::Value>(&body).expect("json")
        }
    };
    assert_eq!(check("warm-up", 1).await["decided_by"], "store");
    relay.hold_replies();
    assert_eq!(check("held", 3).await["decided_by"], "fail-closed");

    let _ = stop.send(());
    // An exit that does not wait is over long before this.
    wait_until(50, || process.is_finished()).await;
    relay.release_replies();
    process.join().expect("the server's thread");

    let other = start(&config_text(&redis.url(), "fail-closed")).await;
    let answer = other.check("held", 5).await;
    assert_eq!(answer.json()["decided_by"], "store", "{}", answer.body);
    assert_eq!(
        answer.json()["allowed"],
        true,
        "the whole budget is left: {}",
        answer.body
    );
    other.stop().await;
}

/// With `[store] clock = "redis"`, Redis's clock times every decision, so
/// a server whose own clock jumps two days ahead is still refused within
/// the day, where a server on its own clock (the default) is let in again:
/// servers whose clocks disagree share one limit exactly.
#[tokio::test]
async fn with_the_redis_clock_a_servers_own_clock_changes_no_answer() {
    let Some(redis) = RedisServer::spawn("with_the_redis_clock_a_servers_own_clock") else {
        return;
    };
    let own_clock = config_text(&redis.url(), "fail-closed");
    let redis_clock = own_clock.replace(
        "prefix = \"serve-test\"\n",
        "prefix = \"serve-test\"\nclock = \"redis\"\n",
    );
    assert_ne!(own_clock, redis_clock);
    for (text, client, let_in_again) in [
        (own_clock, "on-own", true),
        (redis_clock, "on-redis", false),
    ] {
        let server = start(&text).await;
        for _ in 0..5 {
            assert_eq!(server.check(client, 1).await.json()["allowed"], true);
        }
        assert_eq!(server.check(client, 1).await.json()["allowed"], false);
        server.clock.advance(2 * 86_400_000);
        let later = server.check(client, 1).await.json();
        assert_eq!(later["allowed"], let_in_again, "{client}: {later}");
    }
}
