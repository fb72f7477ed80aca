//! `tollgate proxy --config FILE`: the plans of a `tollgate serve` config in
//! front of a real upstream; the upstream sees exactly the requests each
//! client's plan allows.

use std::sync::atomic::Ordering;

use clap::Parser;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate_cli::proxy::ProxyArgs;
use tollgate_testkit::counting_upstream;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    proxy: ProxyArgs,
}

const CONFIG: &str = r#"
default_plan = "free"

[clients]
acme = "paid"

[[plans.free]]
name = "1d"
policy = "sliding-window"
limit = 2
window = "1d"

[[plans.paid]]
name = "1d"
policy = "sliding-window"
limit = 5
window = "1d"
"#;

#[tokio::test]
async fn each_client_gets_its_plan_from_the_config() {
    proxy_allows_each_client_its_plan(CONFIG).await;
}

#[tokio::test]
async fn on_redis_a_repeat_offender_costs_redis_one_call_per_wait() {
    let Some(redis) = tollgate_redis::testing::RedisServer::spawn(
        "on_redis_a_repeat_offender_costs_redis_one_call_per_wait",
    ) else {
        return;
    };
    let config = format!(
        "{CONFIG}\n[store]\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    proxy_allows_each_client_its_plan(&config).await;
    // 16 requests, 7 allowed; one rejection per client reached Redis, the
    // other 7 were answered by the proxy's rejection cache.
    let stats = redis.cli(&["INFO", "commandstats"]);
    // Script calls Redis ran (less any NOSCRIPT): the 9 decisions, and the
    // start-up check's one read-only inspection (the user's permissions).
    let count = |line: &str, field: &str| -> u64 {
        let value = line.split(&format!("{field}=")).nth(1).unwrap_or("0");
        value.split(',').next().unwrap().parse().unwrap()
    };
    let decisions: u64 = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .map(|l| count(l, ":calls") - count(l, ",failed_calls"))
        .sum();
    assert_eq!(decisions, 9 + 1, "{stats}");
}

/// Runs the proxy on `config_text` in front of a counting upstream: `acme`
/// (plan `paid`) gets 5 of 8 requests through, `bob` (plan `free`) 2 of 8.
async fn proxy_allows_each_client_its_plan(config_text: &str) {
    let (upstream_addr, seen) = counting_upstream().await;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config_text).unwrap();
    let upstream_url = format!("http://{upstream_addr}");
    let cli = Cli::try_parse_from([
        "proxy",
        "--upstream",
        upstream_url.as_str(),
        "--key",
        "header:X-Client-Id",
        "--config",
        path.to_str().unwrap(),
    ])
    .unwrap();
    let config = cli.proxy.config().await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let (stop_proxy, proxy_stopped) = oneshot::channel::<()>();
    let proxy_task = tokio::spawn(tollgate_proxy::run(listener, config, async {
        let _ = proxy_stopped.await;
    }));

    let http = reqwest::Client::new();
    let allowed = |client: &'static str| {
        let http = http.clone();
        async move {
            let mut n = 0;
            for _ in 0..8 {
                let response = http
                    .get(format!("http://{proxy_addr}/items"))
                    .header("x-client-id", client)
                    .send()
                    .await
                    .unwrap();
                if response.status() == reqwest::StatusCode::OK {
                    n += 1;
                } else {
                    assert_eq!(response.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
                }
            }
            n
        }
    };
    assert_eq!(allowed("acme").await, 5, "acme is on paid");
    assert_eq!(allowed("bob").await, 2, "bob is on the default plan");
    assert_eq!(seen.load(Ordering::SeqCst), 7);

    let _ = stop_proxy.send(());
    proxy_task.await.unwrap().unwrap();
}

/// A `serve` config whose HTTP port is the default gRPC port (8081) is one
/// `serve` refuses (both would bind it), but the proxy opens neither of
/// `serve`'s ports: it uses the file's plans all the same.
#[tokio::test]
async fn the_proxy_uses_a_config_whose_listen_is_the_default_grpc_port() {
    let text = format!("listen = [\"127.0.0.1:8081\"]\n{CONFIG}");
    let refused = tollgate_config::Config::parse(&text).expect_err("serve refuses it");
    assert!(refused.to_string().contains("grpc_listen"), "{refused}");
    proxy_allows_each_client_its_plan(&text).await;
}
