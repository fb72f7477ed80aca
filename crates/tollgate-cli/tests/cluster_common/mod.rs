//! What the tests of `tollgate serve` and `tollgate replay` on a Redis
//! Cluster share: the config, serve in this process, and who decided a check.

use std::path::{Path, PathBuf};

use tollgate_redis::testing::RedisCluster;
use tollgate_server::{Options, Overrides};

/// Keys of a cluster node, one per line.
pub fn keys(cluster: &RedisCluster, node: usize) -> String {
    cluster.nodes()[node].cli(&["KEYS", "*"])
}

/// A config: a plan far above the demand (every answer is "allowed" when
/// the store decides), failing closed, the circuit breaker as by default.
pub fn config(dir: &Path) -> PathBuf {
    let path = dir.join("tollgate.toml");
    std::fs::write(
        &path,
        "[store]\nfailure_policy = \"fail-closed\"\ntimeout = \"1s\"\n\n\
         [[plans.big]]\nname = \"1d\"\npolicy = \"sliding-window\"\nlimit = 1000000\nwindow = \"1d\"\n",
    )
    .expect("write the config");
    path
}

/// `tollgate serve` in this process on port 0 with these Redis flags.
pub async fn start_serve(config: &Path, seeds: &str, ca: Option<&Path>) -> String {
    let options = Options {
        config: Some(config.to_owned()),
        flags: Overrides {
            listen: vec!["127.0.0.1:0".to_owned()],
            grpc_listen: Some("off".to_owned()),
            redis_cluster: seeds.split(',').map(str::to_owned).collect(),
            redis_ca: ca.map(Path::to_owned),
            ..Overrides::default()
        },
    };
    let prepared = tollgate_server::prepare(options)
        .await
        .expect("serve starts");
    let addr = prepared.addrs()[0].to_string();
    tokio::spawn(prepared.run(std::future::pending()));
    addr
}

/// Who decided one check of `client` (`store`, or the failure policy), or
/// the HTTP error.
pub async fn decided_by(http: &reqwest::Client, addr: &str, client: &str) -> String {
    let response = http
        .post(format!("http://{addr}/v1/check"))
        .header("content-type", "application/json")
        .body(format!(r#"{{"client":"{client}"}}"#))
        .send()
        .await
        .expect("serve answers");
    let status = response.status();
    let text = response.text().await.expect("a body");
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(body) if status.is_success() || status == 429 => {
            body["decided_by"].as_str().unwrap_or("?").to_owned()
        }
        _ => format!("HTTP {status}: {text}"),
    }
}
