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
    let (upstream_addr, seen) = counting_upstream().await;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, CONFIG).unwrap();
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
