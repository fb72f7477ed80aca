//! Twenty servers, one limit: twenty real `tollgate serve` processes on one
//! private Redis, and again on a private three-master cluster, are hammered
//! at once for one client per policy. The limits are per day, so the
//! servers' own clocks cannot refill anything while the test runs: counted
//! from every process's answers, exactly `LIMIT` requests per client are
//! allowed in total (never more, and the limit is reached), whatever the
//! interleaving, and every answer is decided by the store.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tollgate_redis::testing::{RedisCluster, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");
const SERVERS: usize = 20;
const LIMIT: u32 = 25;
/// Requests per client per server: 20 x 4 = 80 per client, over three times the limit.
const PER_SERVER: usize = 4;
const CLIENTS: [&str; 3] = ["sliding", "bucket", "gcra"];

/// One `tollgate serve` process, killed on drop.
struct Serve {
    child: Child,
    addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    fn start(config: &str, store: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"])
            .args(["--config", config])
            .args(store)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tollgate serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut addr = None;
        for _ in 0..20 {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            if let Some(rest) = line.strip_prefix("tollgate listening on http://") {
                addr = rest.split_whitespace().next().map(str::to_owned);
                break;
            }
        }
        let addr = addr.expect("the server's address in its banner");
        Self { child, addr }
    }

    /// `POST /v1/check` for `client`: whether it was allowed.
    fn check(&self, client: &str) -> bool {
        let body = format!(r#"{{"client":"{client}"}}"#);
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            stream,
            "POST /v1/check HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        // Decided by Redis, or by the server's rejection cache repeating
        // Redis's own rejection; never by the failure policy.
        assert!(
            response.contains(r#""decided_by":"store""#)
                || (response.contains(r#""decided_by":"cache""#)
                    && response.contains(r#"{"allowed":false"#)),
            "{response}"
        );
        response.contains(r#"{"allowed":true"#)
    }
}

/// The config: one plan per policy, each client on its own plan.
fn config(dir: &std::path::Path) -> String {
    let mut text =
        String::from("default_plan = \"sliding\"\n\n[store]\nfailure_policy = \"fail-closed\"\ntimeout = \"2s\"\n\n[clients]\n");
    for client in CLIENTS {
        text.push_str(&format!("{client} = \"{client}\"\n"));
    }
    for (client, policy) in CLIENTS
        .iter()
        .zip(["sliding-window", "token-bucket", "gcra"])
    {
        text.push_str(&format!(
            "\n[[plans.{client}]]\nname = \"1d\"\npolicy = \"{policy}\"\nlimit = {LIMIT}\nwindow = \"1d\"\n"
        ));
    }
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, text).expect("write the config");
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// Starts the fleet on `store`, hammers it from one thread per server, and
/// checks every client's total.
fn twenty_servers_hold_one_limit(store: &[&str]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = config(dir.path());
    let fleet: Vec<Serve> = (0..SERVERS).map(|_| Serve::start(&config, store)).collect();
    let allowed: Vec<AtomicU32> = CLIENTS.iter().map(|_| AtomicU32::new(0)).collect();
    std::thread::scope(|scope| {
        for serve in &fleet {
            let allowed = &allowed;
            scope.spawn(move || {
                for _ in 0..PER_SERVER {
                    for (i, client) in CLIENTS.iter().enumerate() {
                        if serve.check(client) {
                            allowed[i].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    let totals: Vec<u32> = allowed.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    assert_eq!(
        totals, [LIMIT; 3],
        "allowed per client ({CLIENTS:?}) across {SERVERS} servers"
    );
}

#[test]
fn twenty_servers_on_one_redis_hold_one_limit() {
    let Some(redis) = RedisServer::spawn("twenty_servers_on_one_redis") else {
        return;
    };
    twenty_servers_hold_one_limit(&["--redis", &redis.url()]);
}

#[test]
fn twenty_servers_on_a_cluster_hold_one_limit() {
    let Some(cluster) = RedisCluster::spawn("twenty_servers_on_a_cluster") else {
        return;
    };
    let seeds = cluster.urls().join(",");
    twenty_servers_hold_one_limit(&["--redis-cluster", &seeds]);
}
