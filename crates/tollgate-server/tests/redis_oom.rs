//! An out-of-memory Redis (`maxmemory` reached, `noeviction`: EVALSHA fails
//! with `OOM`) is answered by the failure policy through `tollgate serve`'s
//! HTTP API, like any other store failure, and the answer shows none of
//! Redis's internals (the error names the script's SHA and its Lua line).

mod common;

use common::TestServer;
use reqwest::StatusCode;
use tollgate_redis::testing::RedisServer;
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
prefix = "oom-test"
timeout = "2s"
# OOM is transient: five in a row would open the circuit breaker, and this
# test checks each refused call, then that Redis decides again at once.
breaker_failures = 0

[[plans.shared]]
name = "1d"
policy = "sliding-window"
limit = 5
window = "1d"
"#
    )
}

async fn start(text: &str) -> TestServer {
    let config = Config::parse(text).expect("test config is valid");
    let store = StoreHandle::for_config(&config).expect("redis store");
    TestServer::start_with(text, config, store).await
}

fn store_errors(metrics: &str) -> u64 {
    metric(metrics, "tollgate_store_errors_total{kind=\"transient\"}")
        + metric(metrics, "tollgate_store_errors_total{kind=\"permanent\"}")
}

#[tokio::test]
async fn an_out_of_memory_redis_is_answered_by_the_failure_policy() {
    let Some(redis) =
        RedisServer::spawn("an_out_of_memory_redis_is_answered_by_the_failure_policy")
    else {
        return;
    };
    let open = start(&config_text(&redis.url(), "fail-open")).await;
    let closed = start(&config_text(&redis.url(), "fail-closed")).await;
    for (t, client) in [(&open, "olga"), (&closed, "carl")] {
        let body = t.check(client, 1).await.json();
        assert_eq!(body["decided_by"], "store", "{body}");
    }

    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let refused = redis.cli(&["SET", "probe", "x"]);
    assert!(refused.contains("OOM"), "Redis is out of memory: {refused}");

    for (t, client, policy, allowed) in [
        (&open, "olga", "fail-open", true),
        (&closed, "carl", "fail-closed", false),
    ] {
        for _ in 0..3 {
            let answer = t.check(client, 1).await;
            assert_eq!(answer.status, StatusCode::OK, "{policy}: {}", answer.body);
            let body = answer.json();
            assert_eq!(body["decided_by"], policy, "{body}");
            assert_eq!(body["allowed"], allowed, "{body}");
        }
        let auth = t.get_with("/v1/auth", &[("X-Client-Id", client)]).await;
        let expected = match allowed {
            true => StatusCode::NO_CONTENT,
            false => StatusCode::TOO_MANY_REQUESTS,
        };
        assert_eq!(auth.status, expected, "{policy}: {}", auth.body);
        for body in [&auth.body, &t.check(client, 1).await.body] {
            for secret in ["OOM", "script", "maxmemory", "@user_script"] {
                assert!(!body.contains(secret), "{policy}: {body}");
            }
        }
        let m = t.get("/metrics").await.body;
        assert_eq!(store_errors(&m), 5, "{policy}");
        assert_eq!(
            metric(
                &m,
                &format!("tollgate_decisions_by_total{{decided_by=\"{policy}\"}}")
            ),
            5
        );
    }

    // Memory again: Redis decides, and the refused calls consumed nothing.
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    for (t, client) in [(&open, "olga"), (&closed, "carl")] {
        let body = t.check(client, 1).await.json();
        assert_eq!(body["decided_by"], "store", "{body}");
        assert_eq!(t.remaining(client, 0).await, 3, "{client}");
    }
    open.stop().await;
    closed.stop().await;
}
