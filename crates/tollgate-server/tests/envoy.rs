//! Envoy's rate limit service inside `tollgate serve`: a tonic client calls
//! the gRPC port of an in-process server (prepared as `tollgate serve`
//! prepares it, on port 0), whose gRPC health check says SERVING; a config
//! reload changes a rule, `/metrics` counts gRPC decisions, and a Redis that is down gives the failure
//! policy's answer or gRPC `UNAVAILABLE`, as `[envoy] on_store_error` says.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::ManualClock;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_envoy::pb::google::protobuf::UInt64Value;
use tollgate_redis::testing::RedisServer;
use tollgate_server::{Config, Error, Options, Overrides, Server, StoreHandle};
use tollgate_testkit::metric;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Plans `free` (3 a day) and `paid` (10 a day); the Envoy rule for domain
/// `edge` and one budget per `remote_address` uses `rule_plan`.
fn config_text(rule_plan: &str) -> String {
    format!(
        r#"
default_plan = "free"

[envoy]
grpc_listen = "127.0.0.1:0"

[[envoy.rules]]
domain = "edge"
descriptor = [{{ key = "remote_address" }}]
plan = "{rule_plan}"

[[plans.free]]
name = "1d"
policy = "sliding-window"
limit = 3
window = "1d"

[[plans.paid]]
name = "1d"
policy = "sliding-window"
limit = 10
window = "1d"
"#
    )
}

fn request(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(r).await.unwrap().into_inner()
}

fn limit_name(response: &RateLimitResponse) -> Option<String> {
    response.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.name.clone())
}

#[tokio::test]
async fn serve_answers_envoy_over_grpc_and_a_reload_changes_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config_text("free")).unwrap();
    let prepared = tollgate_server::prepare(Options {
        config: Some(path.clone()),
        flags: Overrides {
            listen: vec!["127.0.0.1:0".into()],
            // The flag wins over the file (which also says port 0 here).
            grpc_listen: Some("127.0.0.1:0".into()),
            ..Overrides::default()
        },
    })
    .await
    .unwrap();
    let grpc: SocketAddr = prepared.grpc_addr().unwrap();
    assert_ne!(grpc.port(), 0);
    assert!(
        prepared.banner().contains(&format!(
            "gRPC (Envoy rate limit service) listening on {grpc}"
        )),
        "{}",
        prepared.banner()
    );
    let server = prepared.server().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(prepared.run(async {
        let _ = stopped.await;
    }));
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();

    // gRPC health checking on the same port: the server and the service
    // are SERVING.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let check = HealthCheckRequest {
            service: service.into(),
        };
        let status = health.check(check).await.unwrap().into_inner().status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    drop(health);

    // Plan `free`: 3 a day per address, then OVER_LIMIT.
    let mut codes = Vec::new();
    for _ in 0..4 {
        let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
        assert_eq!(limit_name(&response).as_deref(), Some("free-1d"));
        codes.push(Code::try_from(response.overall_code).unwrap());
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
    // A descriptor no rule matches is not limited.
    let other = ask(
        &mut client,
        request("elsewhere", "remote_address", "10.0.0.1"),
    )
    .await;
    assert_eq!(other.overall_code, Code::Ok as i32);
    assert_eq!(limit_name(&other), None);

    // Reload: the rule now uses `paid`, with room again for the address.
    std::fs::write(&path, config_text("paid")).unwrap();
    server.reload().unwrap();
    let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
    assert_eq!(response.overall_code, Code::Ok as i32);
    assert_eq!(limit_name(&response).as_deref(), Some("paid-1d"));
    assert_eq!(response.statuses[0].limit_remaining, 9);

    // Envoy's hits_addend often counts bytes (a bandwidth quota): the HTTP
    // API's max_cost does not bound it. One client's descriptors add up to
    // at most u32::MAX; past it the request is OVER_LIMIT (an error status
    // would be let through by Envoy's failure mode), not capped.
    std::fs::write(&path, format!("max_cost = 5\n{}", config_text("paid"))).unwrap();
    server.reload().unwrap();
    let mut costly = request("edge", "remote_address", "10.0.0.1");
    costly.hits_addend = 6;
    let response = ask(&mut client, costly).await;
    assert_eq!(response.overall_code, Code::Ok as i32);
    assert_eq!(response.statuses[0].limit_remaining, 3);
    let mut twice = request("edge", "remote_address", "10.0.0.1");
    twice.descriptors.push(twice.descriptors[0].clone());
    twice.descriptors[0].hits_addend = Some(UInt64Value {
        value: u64::from(u32::MAX),
    });
    let response = ask(&mut client, twice).await;
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
    assert_eq!(response.statuses[0].limit_remaining, 2, "nothing consumed");

    // A rule naming an unknown plan is refused; the running rules stay.
    std::fs::write(&path, config_text("gold")).unwrap();
    assert!(server.reload().is_err());
    let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
    assert_eq!(limit_name(&response).as_deref(), Some("paid-1d"));

    let _ = stop.send(());
    drop(client);
    task.await.unwrap().unwrap();
}

/// `--grpc-listen off` and `[envoy] grpc_listen = "off"`: serve binds no
/// gRPC port (the address the file names stays free), says so, and serves
/// HTTP as usual.
#[tokio::test]
async fn the_grpc_port_can_be_turned_off_by_flag_or_in_the_config() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let text = config_text("free").replace("127.0.0.1:0", &taken_addr.to_string());
    std::fs::write(&path, &text).unwrap();
    let options = |grpc_listen: Option<&str>| Options {
        config: Some(path.clone()),
        flags: Overrides {
            listen: vec!["127.0.0.1:0".into()],
            grpc_listen: grpc_listen.map(str::to_owned),
            ..Overrides::default()
        },
    };
    // On, the file's address is bound (and taken here, so it fails).
    let error = tollgate_server::prepare(options(None)).await.err().unwrap();
    assert!(
        matches!(error, Error::Bind { addr, .. } if addr == taken_addr),
        "{error}"
    );
    let error = tollgate_server::prepare(options(Some("nowhere")))
        .await
        .err()
        .unwrap();
    assert!(error.to_string().contains("or off"), "{error}");

    let off_by_flag = tollgate_server::prepare(options(Some("off")))
        .await
        .unwrap();
    std::fs::write(&path, text.replace(&taken_addr.to_string(), "off")).unwrap();
    let off_in_file = tollgate_server::prepare(options(None)).await.unwrap();
    for prepared in [off_by_flag, off_in_file] {
        assert_eq!(prepared.grpc_addr(), None);
        assert_eq!(prepared.server().config().envoy.grpc_listen, None);
        assert!(
            prepared
                .banner()
                .contains("gRPC (Envoy rate limit service) off"),
            "{}",
            prepared.banner()
        );
        let http = prepared.addrs()[0];
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(prepared.run(async {
            let _ = stopped.await;
        }));
        let status = tokio::task::spawn_blocking(move || {
            tollgate_testkit::get_status(http, "/healthz", &[])
        })
        .await
        .unwrap();
        assert_eq!(status, 200);
        let _ = stop.send(());
        task.await.unwrap().unwrap();
    }
    drop(taken);
}

#[test]
fn envoy_rules_are_checked_with_the_line_of_the_mistake() {
    let text = config_text("gold");
    let error = Config::parse(&text).err().unwrap();
    let tollgate_server::config::Error::InvalidConfig { line, message, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(*line, 7, "{error}");
    assert!(message.contains("unknown plan \"gold\""), "{error}");
    let bad_addr = text.replace("grpc_listen = \"127.0.0.1:0\"", "grpc_listen = \"nowhere\"");
    let error = Config::parse(&bad_addr).err().unwrap().to_string();
    assert!(
        error.contains("line 5,") && error.contains("invalid grpc_listen"),
        "{error}"
    );
}

#[test]
fn the_embedded_default_answers_envoy_per_client_address() {
    let config = Config::embedded_default();
    assert_eq!(config.envoy.rules.len(), 1);
    assert_eq!(
        config.envoy.grpc_listen,
        Some(tollgate_server::config::DEFAULT_GRPC_LISTEN)
    );
}

/// `tollgate serve` on `text` (written to a file), HTTP and gRPC on port 0.
struct Running {
    http: SocketAddr,
    grpc: RateLimitServiceClient<Channel>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), Error>>,
    _dir: tempfile::TempDir,
}

impl Running {
    async fn start(text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, text).unwrap();
        let prepared = tollgate_server::prepare(Options {
            config: Some(path),
            flags: Overrides {
                listen: vec!["127.0.0.1:0".into()],
                grpc_listen: Some("127.0.0.1:0".into()),
                ..Overrides::default()
            },
        })
        .await
        .unwrap();
        let http = prepared.addrs()[0];
        let grpc = prepared.grpc_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(prepared.run(async {
            let _ = stopped.await;
        }));
        let grpc = RateLimitServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        Self {
            http,
            grpc,
            stop,
            task,
            _dir: dir,
        }
    }

    async fn ask(&mut self, r: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.grpc.should_rate_limit(r).await.map(|r| r.into_inner())
    }

    async fn get(&self, path: &str) -> String {
        reqwest::get(format!("http://{}{path}", self.http))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        drop(self.grpc);
        self.task.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn grpc_decisions_are_counted_in_metrics_per_plan_and_limit() {
    // Addresses on `free` (3 a day), API keys on `paid` (10 a day).
    let text = config_text("free").replace(
        "[[plans.free]]",
        "[[envoy.rules]]\ndomain = \"edge\"\ndescriptor = [{ key = \"api_key\" }]\nplan = \"paid\"\n\n[[plans.free]]",
    );
    let mut t = Running::start(&text).await;
    for _ in 0..4 {
        t.ask(request("edge", "remote_address", "10.0.0.9"))
            .await
            .unwrap();
    }
    // Two clients in one request: each decided once, on its own plan (the
    // looks taken first are not decisions).
    let mut both = request("edge", "api_key", "k1");
    both.descriptors
        .push(request("edge", "remote_address", "10.0.0.8").descriptors[0].clone());
    let response = t.ask(both).await.unwrap();
    assert_eq!(response.overall_code, Code::Ok as i32);
    // Not limited: not a decision.
    t.ask(request("elsewhere", "remote_address", "10.0.0.9"))
        .await
        .unwrap();

    let m = t.get("/metrics").await;
    let series = [
        (
            "tollgate_requests_total{plan=\"free\",outcome=\"allowed\"}",
            4,
        ),
        (
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}",
            1,
        ),
        (
            "tollgate_requests_total{plan=\"paid\",outcome=\"allowed\"}",
            1,
        ),
        (
            "tollgate_limit_decisions_total{plan=\"free\",limit=\"1d\",outcome=\"allowed\"}",
            4,
        ),
        (
            "tollgate_limit_decisions_total{plan=\"free\",limit=\"1d\",outcome=\"rejected\"}",
            1,
        ),
        (
            "tollgate_limit_decisions_total{plan=\"paid\",limit=\"1d\",outcome=\"allowed\"}",
            1,
        ),
        ("tollgate_frontend_decisions_total{frontend=\"grpc\"}", 6),
        ("tollgate_frontend_decisions_total{frontend=\"http\"}", 0),
        ("tollgate_decisions_by_total{decided_by=\"store\"}", 6),
        ("tollgate_store_errors_total{kind=\"transient\"}", 0),
        // One per gRPC request that asked the store.
        ("tollgate_decision_duration_seconds_count", 5),
    ];
    for (name, expected) in series {
        assert_eq!(metric(&m, name), expected, "{name}");
    }

    // The dashboard's top limited clients rank Envoy's clients too, by the
    // store's key of their descriptors, with the plan and what refused.
    let top: serde_json::Value = serde_json::from_str(&t.get("/v1/top").await).unwrap();
    let first = &top["clients"][0];
    assert_eq!(first["client"], "edge|remote_address=10.0.0.9", "{top}");
    assert_eq!(first["plan"], "free");
    assert_eq!(first["limited_by"], "1d");
    assert_eq!(first["count"], 1);
    // Inspected under that plan, the key is the client the store decided.
    let path = "/v1/clients/edge%7Cremote_address%3D10.0.0.9?plan=free";
    let state: serde_json::Value = serde_json::from_str(&t.get(path).await).unwrap();
    assert_eq!(state["limits"][0]["remaining"], 0, "{state}");
    t.stop().await;
}

/// Plan `free` (3 a day) on the Redis at `url`, its failure policy
/// `policy`, and the Envoy rule of [`config_text`]; `envoy_line` goes in
/// `[envoy]`.
fn redis_config(url: &str, policy: &str, envoy_line: &str) -> String {
    config_text("free").replace(
        "[envoy]\n",
        &format!(
            "[store]\nurl = \"{url}\"\nfailure_policy = \"{policy}\"\nprefix = \"envoy-test\"\ntimeout = \"200ms\"\n\n[envoy]\n{envoy_line}\n"
        ),
    )
}

#[tokio::test]
async fn a_redis_failure_is_the_failure_policys_answer_or_unavailable_as_configured() {
    let Some(mut redis) = RedisServer::spawn(
        "a_redis_failure_is_the_failure_policys_answer_or_unavailable_as_configured",
    ) else {
        return;
    };
    let url = redis.url();
    let mut by_policy = Running::start(&redis_config(&url, "fail-closed", "")).await;
    let mut unavailable = Running::start(&redis_config(
        &url,
        "fail-closed",
        "on_store_error = \"unavailable\"",
    ))
    .await;
    // Redis decides while it is up, one budget for both servers.
    let mut remaining = Vec::new();
    for t in [&mut by_policy, &mut unavailable] {
        let response = t
            .ask(request("edge", "remote_address", "10.0.0.1"))
            .await
            .unwrap();
        assert_eq!(response.overall_code, Code::Ok as i32);
        remaining.push(response.statuses[0].limit_remaining);
    }
    assert_eq!(remaining, [2, 1]);

    redis.kill();
    for _ in 0..2 {
        // Default: `[store] failure_policy` answers (fail-closed: OVER_LIMIT).
        let response = by_policy
            .ask(request("edge", "remote_address", "10.0.0.2"))
            .await
            .unwrap();
        assert_eq!(response.overall_code, Code::OverLimit as i32);
        // "unavailable": Envoy's failure_mode_deny decides.
        let status = unavailable
            .ask(request("edge", "remote_address", "10.0.0.2"))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    }
    // The HTTP API of the same server keeps the failure policy.
    let http = reqwest::Client::new()
        .post(format!("http://{}/v1/check", unavailable.http))
        .body(r#"{"client":"c"}"#)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(http.contains("\"decided_by\":\"fail-closed\""), "{http}");

    let m = by_policy.get("/metrics").await;
    assert_eq!(
        metric(
            &m,
            "tollgate_decisions_by_total{decided_by=\"fail-closed\"}"
        ),
        2
    );
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        2
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}"
        ),
        2
    );
    let m = unavailable.get("/metrics").await;
    // Two gRPC failures and one HTTP decision by the failure policy.
    assert_eq!(
        metric(&m, "tollgate_store_errors_total{kind=\"transient\"}"),
        3
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_decisions_by_total{decided_by=\"fail-closed\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &m,
            "tollgate_requests_total{plan=\"free\",outcome=\"rejected\"}"
        ),
        1
    );
    // `/v1/stats` counts the gRPC calls too (their own guard's): one
    // decided by Redis while it was up, the three failures, the one
    // fail-closed answer.
    let stats: serde_json::Value =
        serde_json::from_str(&unavailable.get("/v1/stats").await).unwrap();
    let calls = &stats["store"]["calls"];
    assert_eq!(calls["store"], 1, "{calls}");
    assert_eq!(calls["transient_errors"], 3, "{calls}");
    assert_eq!(calls["fail_closed"], 1, "{calls}");
    by_policy.stop().await;
    unavailable.stop().await;
}

#[test]
fn on_store_error_is_checked_with_the_line_and_changing_it_needs_a_restart() {
    let text = config_text("free").replace(
        "grpc_listen = \"127.0.0.1:0\"",
        "grpc_listen = \"127.0.0.1:0\"\non_store_error = \"fail-open\"",
    );
    let error = Config::parse(&text).err().unwrap().to_string();
    assert!(
        error.contains("line 6,")
            && error.contains("unknown on_store_error \"fail-open\"")
            && error.contains("failure-policy, unavailable"),
        "{error}"
    );

    let default = Config::parse(&config_text("free")).unwrap();
    assert_eq!(default.envoy.on_store_error, None);
    let unavailable = Config::parse(&text.replace("\"fail-open\"", "\"unavailable\"")).unwrap();
    assert_eq!(
        unavailable.envoy.on_store_error,
        Some(tollgate_server::config::FailurePolicy::Unavailable)
    );
    let store = StoreHandle::for_config(&default).unwrap();
    let server = Server::new(default, store, Arc::new(ManualClock::new(0)));
    let report = server.apply(unavailable);
    assert_eq!(report.needs_restart, ["envoy.on_store_error"]);
}

#[tokio::test]
async fn envoys_repeat_offender_is_answered_by_the_rejection_cache() {
    let Some(mut redis) =
        RedisServer::spawn("envoys_repeat_offender_is_answered_by_the_rejection_cache")
    else {
        return;
    };
    // The gRPC service on its own guard (policy `unavailable`), with the
    // server's one rejection cache in front of it.
    let text = redis_config(
        &redis.url(),
        "fail-closed",
        "on_store_error = \"unavailable\"",
    );
    let mut t = Running::start(&text).await;
    let offender = || request("edge", "remote_address", "10.0.0.7");
    let mut codes = Vec::new();
    for _ in 0..5 {
        codes.push(t.ask(offender()).await.unwrap().overall_code);
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [ok, ok, ok, over, over]);
    let m = t.get("/metrics").await;
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"store\"}"),
        4
    );
    assert_eq!(
        metric(&m, "tollgate_decisions_by_total{decided_by=\"cache\"}"),
        1
    );
    assert_eq!(metric(&m, "tollgate_rejection_cache_clients"), 1);
    // Without Redis the cache still knows the offender (its wait is a
    // day); anyone else meets the failure: gRPC UNAVAILABLE.
    redis.kill();
    assert_eq!(t.ask(offender()).await.unwrap().overall_code, over);
    let status = t
        .ask(request("edge", "remote_address", "10.0.0.8"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    t.stop().await;
}
