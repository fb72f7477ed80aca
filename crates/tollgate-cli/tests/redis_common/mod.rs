//! What the Redis tests of the binary share: configs, `serve` and `proxy`
//! started in this process or as processes, and their answers.
#![allow(dead_code)] // not every test crate that includes this module uses all of it

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::net::TcpListener;
use tollgate_cli::proxy::ProxyArgs;
use tollgate_server::{Options, Overrides};
use tollgate_testkit::process::ChildGuard;

pub const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

#[derive(Parser)]
pub struct Cli {
    #[command(flatten)]
    pub proxy: ProxyArgs,
}

/// A config whose one plan allows 4 requests per client per day, failing
/// closed (so an answer not from Redis is never an allowed request).
pub fn four_per_day(dir: &Path) -> PathBuf {
    let path = dir.join("tollgate.toml");
    std::fs::write(
        &path,
        "[store]\nfailure_policy = \"fail-closed\"\ntimeout = \"2s\"\n\n[[plans.shared]]\nname = \"1d\"\npolicy = \"token-bucket\"\nlimit = 4\nwindow = \"1d\"\n",
    )
    .expect("write the config");
    path
}

/// [`four_per_day`] with `[store] replicas_to_ack = replicas`.
pub fn replicas_to_ack(dir: &Path, replicas: u32) -> PathBuf {
    let path = dir.join("replicas-to-ack.toml");
    let text = std::fs::read_to_string(four_per_day(dir)).expect("read the config");
    let text = text.replace(
        "[store]\n",
        &format!("[store]\nreplicas_to_ack = {replicas}\n"),
    );
    std::fs::write(&path, text).expect("write the config");
    path
}

/// `tollgate serve` in this process on loopback port 0, with `redis` flags;
/// its HTTP address.
pub async fn start_serve(config: &Path, redis: &[(&str, &str)]) -> String {
    let mut flags = Overrides {
        listen: vec!["127.0.0.1:0".to_owned()],
        grpc_listen: Some("off".to_owned()),
        ..Overrides::default()
    };
    for (flag, value) in redis {
        match *flag {
            "--redis" => flags.redis = Some((*value).to_owned()),
            "--redis-cluster" => {
                flags.redis_cluster = value.split(',').map(str::to_owned).collect()
            }
            "--redis-ca" => flags.redis_ca = Some(PathBuf::from(value)),
            other => panic!("not a Redis flag: {other}"),
        }
    }
    let options = Options {
        config: Some(config.to_owned()),
        flags,
    };
    let prepared = tollgate_server::prepare(options)
        .await
        .expect("serve starts");
    let addr = prepared.addrs()[0].to_string();
    tokio::spawn(prepared.run(std::future::pending()));
    addr
}

/// `tollgate proxy` in this process with `args` (after `--upstream`); its address.
pub async fn start_proxy(upstream: &str, args: &[&str]) -> Result<String, String> {
    let argv = [
        "proxy",
        "--upstream",
        upstream,
        "--key",
        "header:X-Client-Id",
    ];
    let cli = Cli::try_parse_from(argv.iter().chain(args)).map_err(|e| e.to_string())?;
    let config = cli.proxy.config().await.map_err(|e| e.to_string())?;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address").to_string();
    tokio::spawn(tollgate_proxy::run(
        listener,
        config,
        std::future::pending(),
    ));
    Ok(addr)
}

/// Whether `serve` at `addr` allows one request of `client`, and who decided.
pub async fn serve_allows(http: &reqwest::Client, addr: &str, client: &str) -> (bool, String) {
    let text = http
        .post(format!("http://{addr}/v1/check"))
        .header("content-type", "application/json")
        .body(serde_json::json!({ "client": client }).to_string())
        .send()
        .await
        .expect("serve answers")
        .text()
        .await
        .expect("an answer");
    let body: serde_json::Value = serde_json::from_str(&text).expect("a JSON answer");
    let decided_by = body["decided_by"].as_str().unwrap_or_default().to_owned();
    (body["allowed"] == true, decided_by)
}

/// Whether the proxy at `addr` forwards one request of `client`.
pub async fn proxy_allows(http: &reqwest::Client, addr: &str, client: &str) -> bool {
    let status = http
        .get(format!("http://{addr}/items"))
        .header("x-client-id", client)
        .send()
        .await
        .expect("the proxy answers")
        .status();
    assert!(status == 200 || status == 429, "{status}");
    status == 200
}

/// The binary `tollgate proxy` with `flags` (a listen address on port 0 and
/// an upstream nobody needs are added), left to run or exit.
pub fn spawn_proxy(flags: &[&str]) -> ChildGuard {
    Command::new(BIN)
        .args(["proxy", "--listen", "127.0.0.1:0", "--upstream"])
        .arg("http://127.0.0.1:9")
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(ChildGuard::from)
        .expect("spawn tollgate proxy")
}

/// What `serve` (`child`) logs on standard error until it says it listens
/// (it checks Redis first); it is stopped then.
pub fn start_up_log(mut child: ChildGuard) -> String {
    let banner = read_until(child.stdout.take().expect("stdout"), "listening");
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("stderr");
    std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("read stderr");
    assert!(banner.contains("listening"), "{banner}\n{stderr}");
    stderr
}

/// The `tollgate serve` binary on `config` and the Redis at `url`, with
/// `extra` flags, its standard output and error piped.
pub fn serve_process(config: &Path, url: &str, extra: &[&str]) -> ChildGuard {
    Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"])
        .args(["--config", config.to_str().expect("utf-8"), "--redis", url])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map(ChildGuard::from)
        .expect("spawn tollgate serve")
}

/// The exit code and standard error of `child`, which must end within
/// `limit` (else it is killed and the test fails: it did not refuse to start).
pub fn exit_within(mut child: ChildGuard, limit: Duration) -> (Option<i32>, String) {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(status) = child.try_wait().expect("wait for tollgate") {
            let mut stderr = String::new();
            let mut pipe = child.stderr.take().expect("stderr");
            std::io::Read::read_to_string(&mut pipe, &mut stderr).expect("read stderr");
            return (status.code(), stderr);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("still running after {limit:?}: it did not refuse to start");
}

/// Lines of `stream` up to the first containing `needle` (or its end).
pub fn read_until(stream: impl std::io::Read, needle: &str) -> String {
    use std::io::BufRead;
    let mut text = String::new();
    for line in std::io::BufReader::new(stream).lines().take(50) {
        let Ok(line) = line else { break };
        text.push_str(&line);
        text.push('\n');
        if line.contains(needle) {
            break;
        }
    }
    text
}
