//! The inspection endpoints `/v1/clients/{client}` and `/v1/config`, on a
//! hand-moved clock (`/v1/top` and `/v1/stats`: `top_and_stats.rs`).

mod common;

use common::{TestServer, CONFIG, START_MS};
use reqwest::StatusCode;
use serde_json::json;
use tollgate_redis::testing::RedisServer;
use tollgate_server::{Config, StoreHandle};

#[tokio::test]
async fn a_client_shows_its_plan_limits_and_sliding_log() {
    let t = TestServer::start(CONFIG).await;
    t.check("dave", 1).await;
    t.clock.advance(300);
    t.check("dave", 1).await;
    t.check("dave", 1).await; // rejected: 2 per second
    t.clock.advance(100);
    let a = t.get("/v1/clients/dave").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let body = a.json();
    assert_eq!(body["plan"], "free");
    assert_eq!(body["now_ms"], START_MS + 400);
    assert_eq!(body["allowed"], false);
    // The request at START leaves the 1 s window at START + 1000.
    assert_eq!(body["retry_after_ms"], 600);
    let second = &body["limits"][0];
    assert_eq!(second["name"], "1s");
    assert_eq!(second["policy"], "sliding-window");
    assert_eq!(second["remaining"], 0);
    assert_eq!(second["retry_after_ms"], 600);
    assert_eq!(second["reset_ms"], 900);
    let entries: Vec<(u64, u64)> = second["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["at_ms"].as_u64().unwrap(), e["units"].as_u64().unwrap()))
        .collect();
    assert_eq!(entries, [(START_MS, 1), (START_MS + 300, 1)]);
    let day = &body["limits"][1];
    assert_eq!(day["policy"], "token-bucket");
    assert_eq!(day["remaining"], 3);
    assert_eq!(day["retry_after_ms"], 0);
    assert!(day["entries"].is_null());
    // The named plan and a client listed in [clients].
    let body = t.get("/v1/clients/dave?plan=paid").await.json();
    assert_eq!(body["plan"], "paid");
    assert_eq!(body["limits"][0]["remaining"], 10);
    assert_eq!(t.get("/v1/clients/acme").await.json()["plan"], "paid");
    t.stop().await;
}

#[tokio::test]
async fn looking_at_a_client_consumes_nothing_and_counts_nothing() {
    let t = TestServer::start(CONFIG).await;
    t.check("erin", 1).await;
    let before = t.server.memory_state("erin").expect("erin is known");
    let metrics_before = t.get("/metrics").await.body;
    for _ in 0..20 {
        let a = t.get("/v1/clients/erin").await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.json()["limits"][0]["remaining"], 1);
        // An unknown client is not even stored (no token-bucket anchor).
        assert_eq!(t.get("/v1/clients/nobody").await.status, StatusCode::OK);
    }
    assert_eq!(t.server.memory_state("erin"), Some(before));
    assert_eq!(t.server.memory_state("nobody"), None);
    let metrics_after = t.get("/metrics").await.body;
    let counted = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| {
                l.starts_with("tollgate_requests_total") || l.starts_with("tollgate_decisions")
            })
            .map(str::to_owned)
            .collect()
    };
    assert!(!counted(&metrics_before).is_empty());
    assert_eq!(counted(&metrics_before), counted(&metrics_after));
    let stats = t.get("/v1/stats").await.json();
    assert_eq!(
        stats["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n.as_u64())
            .sum::<u64>(),
        1
    );
    // Still one request left this second.
    assert_eq!(t.check("erin", 1).await.json()["allowed"], true);
    assert_eq!(t.check("erin", 1).await.json()["allowed"], false);
    t.stop().await;
}

/// A browser (and any WHATWG URL parser) removes the dot segments of a
/// path, `%2e` included: `/v1/clients/..` is asked as `/v1/`, so clients
/// named `.` or `..` could not be inspected from the dashboard. The id may
/// be given as `?client=` instead, with `?plan=` beside it.
#[tokio::test]
async fn a_client_id_may_be_given_in_the_query_dot_segments_included() {
    let t = TestServer::start(CONFIG).await;
    for id in [".", "..", "a b/c?d", "dave"] {
        t.check(id, 1).await;
        let encoded: String = url_encoded(id);
        let a = t.get(&format!("/v1/clients?client={encoded}")).await;
        assert_eq!(a.status, StatusCode::OK, "{id:?}: {}", a.body);
        let body = a.json();
        assert_eq!(body["client"], id);
        assert_eq!(body["plan"], "free");
        assert_eq!(body["limits"][0]["remaining"], 1, "{id:?}: its own state");
        let a = t
            .get(&format!("/v1/clients?plan=paid&client={encoded}"))
            .await;
        assert_eq!(a.json()["plan"], "paid", "{}", a.body);
    }
    // As the path form answers.
    assert_eq!(
        t.get("/v1/clients?client=dave").await.body,
        t.get("/v1/clients/dave").await.body
    );
    for (query, error) in [
        ("", "the client id is missing"),
        ("?plan=paid", "the client id is missing"),
        ("?client=", "client id is empty"),
        ("?client=dave&colour=red", "unknown field `colour`"),
        ("?client=dave&plan=gold", "unknown plan \"gold\""),
    ] {
        let a = t.get(&format!("/v1/clients{query}")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{query}: {}", a.body);
        assert!(a.error().contains(error), "{query}: {}", a.body);
    }
    t.stop().await;
}

/// Every byte but the unreserved ones as `%XX`.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn bad_inspection_requests_get_clear_errors() {
    let t = TestServer::start(CONFIG).await;
    let a = t.get("/v1/clients/dave?plan=gold").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("unknown plan \"gold\""), "{}", a.body);
    let long = "x".repeat(300);
    let a = t.get(&format!("/v1/clients/{long}")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let a = t.get("/v1/top?by=cost").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("by=rejected|requests"), "{}", a.body);
    let a = t.get("/v1/top?limit=0").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("limit must be from 1"), "{}", a.body);
    let a = t.get("/v1/top?limit=5&extra=1").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(t.server.memory_state("dave"), None);
    t.stop().await;
}

/// The same traffic on `t`: several clients, plans and times.
async fn traffic(t: &TestServer) {
    for _ in 0..3 {
        t.check("dave", 1).await; // the third rejected: 2 per second
    }
    t.check("acme", 4).await; // paid
    t.clock.advance(300);
    t.check("dave", 1).await;
    let dark = r#"{"client":"erin","plan":"dark","cost":1}"#;
    for _ in 0..2 {
        t.post_check(dark).await;
    }
    t.clock.advance(450);
}

/// `/v1/clients` answers for clients seen and unseen, on several plans.
async fn inspections(t: &TestServer) -> Vec<serde_json::Value> {
    let mut answers = Vec::new();
    for path in [
        "/v1/clients/dave",
        "/v1/clients/acme",
        "/v1/clients/erin?plan=dark",
        "/v1/clients/nobody",
        "/v1/clients/dave?plan=paid",
    ] {
        let a = t.get(path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.body);
        answers.push(a.json());
    }
    answers
}

#[tokio::test]
async fn a_client_on_redis_is_answered_as_on_memory_and_a_stopped_redis_is_a_503() {
    let Some(mut redis) = RedisServer::spawn("a_client_on_redis_is_answered_as_on_memory") else {
        return;
    };
    let memory = TestServer::start(CONFIG).await;
    let text = format!(
        "{CONFIG}\n[store]\nurl = \"{}\"\nfailure_policy = \"fail-open\"\nprefix = \"inspect-eq\"\n",
        redis.url()
    );
    let config = Config::parse(&text).unwrap();
    let store = StoreHandle::for_config(&config).unwrap();
    let shared = TestServer::start_with(&text, config, store).await;
    traffic(&memory).await;
    traffic(&shared).await;
    let on_memory = inspections(&memory).await;
    assert_eq!(on_memory[0]["limits"][0]["entries"][0]["at_ms"], START_MS);
    assert_eq!(on_memory[0]["allowed"], false, "{}", on_memory[0]);
    // Asked twice: the answers stay the same, so nothing was used.
    for _ in 0..2 {
        assert_eq!(inspections(&shared).await, on_memory);
    }
    // Nothing written for the unknown client (no token-bucket anchor, no
    // last-seen time), and the next decisions are the same on both.
    assert_eq!(redis.cli(&["KEYS", "inspect-eq:{c:nobody}*"]).trim(), "");
    // (A repeat rejection on Redis may come from the rejection cache, with
    // the same numbers: only who decided differs.)
    for client in ["dave", "nobody", "acme"] {
        let mut want = memory.check(client, 1).await.json();
        let mut got = shared.check(client, 1).await.json();
        let decided_by = got["decided_by"].take();
        assert!(decided_by == "store" || decided_by == "cache", "{got}");
        want["decided_by"].take();
        assert_eq!(got, want, "{client}");
    }
    // A failed store: a clear 503, not the failure policy's invented state.
    redis.kill();
    let a = shared.get("/v1/clients/dave").await;
    assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE, "{}", a.body);
    // Without the store's own words (a Redis error may name a script's
    // SHA and Lua line): those go to the log.
    assert_eq!(
        a.error(),
        "the store cannot be read to inspect this client: it is unavailable (its error is in the log)",
    );
    // Decisions meanwhile are the failure policy's (for a client the
    // rejection cache does not hold: dave's rejection still stands there).
    assert_eq!(
        shared.check("frank", 1).await.json()["decided_by"],
        "fail-open"
    );
    memory.stop().await;
    shared.stop().await;
}

#[tokio::test]
async fn the_config_in_force_is_public_without_secrets() {
    let t = TestServer::start(CONFIG).await;
    let body = t.get("/v1/config").await.json();
    let plans = body["plans"].as_array().unwrap();
    let names: Vec<&str> = plans.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["dark", "free", "paid"]);
    let free = &plans[1];
    assert_eq!(free["default"], true);
    assert_eq!(free["limits"][1]["policy"], "token-bucket");
    assert_eq!(free["limits"][1]["window_ms"], 86_400_000);
    assert_eq!(plans[2]["clients"], 1);
    assert_eq!(body["store"]["kind"], "memory");
    assert_eq!(body["dashboard"], true);
    t.stop().await;

    // The password of the user info, and of a unix socket's `pass=`, as
    // the log shows them: masked, the user shown.
    for (url, shown) in [
        (
            "unix:///tmp/r.sock?user=alice&pass=hunter2&db=3",
            "unix:///tmp/r.sock?user=alice&pass=***&db=3",
        ),
        (
            "redis://user:hunter2@127.0.0.1:1/0",
            "redis://user:***@127.0.0.1:1/0",
        ),
    ] {
        let text = format!("[store]\nurl = \"{url}\"\n[[plans.p]]\nname = \"a\"\npolicy = \"gcra\"\nlimit = 1\nwindow = \"1s\"\n");
        let config = Config::parse(&text).unwrap();
        let store = StoreHandle::for_config(&config).unwrap();
        let t = TestServer::start_with(&text, config, store).await;
        let a = t.get("/v1/config").await;
        assert!(!a.body.contains("hunter2"), "{}", a.body);
        assert_eq!(a.json()["store"]["url"], shown);
        t.stop().await;
    }
}

/// The store's caps and clock as in force, not as written: `max_clients`
/// under the memory store's floor of 128 showed the 1 written where 128
/// are kept; the rejection cache's cap is rounded up to its shards.
#[tokio::test]
async fn the_store_shows_its_caps_and_clock_as_in_force() {
    let text = format!("{CONFIG}\n[store]\nmax_clients = 1\n");
    let t = TestServer::start(&text).await;
    let store = t.get("/v1/config").await.json()["store"].clone();
    assert_eq!(
        (
            &store["max_clients"],
            &store["clock"],
            &store["rejection_cache_max_clients"]
        ),
        (&json!(128), &json!("caller"), &json!(null))
    );
    t.stop().await;

    let limit = "[[plans.p]]\nname = \"a\"\npolicy = \"gcra\"\nlimit = 1\nwindow = \"1s\"\n";
    let store = "[store]\nurl = \"redis://127.0.0.1:1/0\"\nclock = \"redis\"\n";
    let text = format!("{store}rejection_cache_max_clients = 5\n{limit}");
    let config = Config::parse(&text).unwrap();
    let handle = StoreHandle::for_config(&config).unwrap();
    let t = TestServer::start_with(&text, config, handle).await;
    let store = t.get("/v1/config").await.json()["store"].clone();
    assert_eq!(
        (&store["clock"], &store["rejection_cache_max_clients"]),
        (&json!("redis"), &json!(16))
    );
    t.stop().await;
}

#[tokio::test]
async fn with_the_dashboard_off_its_counters_are_off() {
    let text = format!("{CONFIG}\n[dashboard]\nenabled = false\n");
    let t = TestServer::start(&text).await;
    t.check("dave", 1).await;
    assert!(t.server.observed().is_none());
    for path in ["/v1/stats", "/v1/top"] {
        let a = t.get(path).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}");
        assert!(a.error().contains("[dashboard] enabled"), "{}", a.body);
    }
    // An endpoint that is off is no bad request: nothing counted, under
    // 400 (where its 404s were counted) or elsewhere.
    let m = t.get("/metrics").await.body;
    assert!(
        !m.lines()
            .any(|l| l.starts_with("tollgate_bad_requests_total{") && !l.ends_with(" 0")),
        "{m}"
    );
    // Looking at a client and the config still work.
    assert_eq!(t.get("/v1/clients/dave").await.status, StatusCode::OK);
    assert_eq!(t.get("/v1/config").await.json()["dashboard"], false);
    t.stop().await;
}
