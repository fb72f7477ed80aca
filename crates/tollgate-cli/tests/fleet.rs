//! Twenty servers, one limit: twenty real `tollgate serve` processes on one
//! private Redis, and again on a private three-master cluster, are hammered
//! at once for one client per policy. The limits are per day, so the
//! servers' own clocks cannot refill anything while the test runs: counted
//! from every process's answers, exactly `LIMIT` requests per client are
//! allowed in total (never more, and the limit is reached), whatever the
//! interleaving, and every answer is decided by the store. Then the same
//! fleet is hammered for several one-second windows, and checked window by
//! window (see [`every_window_holds_the_limit`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tollgate_redis::testing::{RedisCluster, RedisServer};
use tollgate_testkit::process::ChildGuard;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");
const SERVERS: usize = 20;
const LIMIT: u32 = 25;
/// Requests per client per server: 20 x 4 = 80 per client, over three times the limit.
const PER_SERVER: usize = 4;
const CLIENTS: [&str; 3] = ["sliding", "bucket", "gcra"];

/// One `tollgate serve` process, killed on drop.
struct Serve {
    _child: ChildGuard,
    addr: String,
}

impl Serve {
    fn start(config: &str, store: &[&str]) -> Self {
        let mut child = ChildGuard::spawn(
            Command::new(BIN)
                .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"])
                .args(["--config", config])
                .args(store)
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        )
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
        Self {
            _child: child,
            addr,
        }
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

/// The policies, each with a day-long plan and a one-window-per-second plan.
const POLICIES: [&str; 3] = ["sliding-window", "token-bucket", "gcra"];
/// The short window, in ms (a multiple of `LIMIT`, as the token bucket needs).
const WINDOW_MS: u64 = 1_000;
/// How long the fleet is hammered for the short windows: several windows.
const RUN: Duration = Duration::from_millis(3 * WINDOW_MS + 400);

/// The config: one plan per client, each client on its own plan: `CLIENTS`
/// on day-long limits, `<client>-1s` on `WINDOW_MS` limits.
fn config(dir: &std::path::Path) -> String {
    let mut text =
        String::from("default_plan = \"sliding\"\n\n[store]\nfailure_policy = \"fail-closed\"\ntimeout = \"2s\"\n\n[clients]\n");
    for client in CLIENTS {
        text.push_str(&format!(
            "{client} = \"{client}\"\n\"{client}-1s\" = \"{client}-1s\"\n"
        ));
    }
    for (client, policy) in CLIENTS.iter().zip(POLICIES) {
        text.push_str(&format!(
            "\n[[plans.{client}]]\nname = \"1d\"\npolicy = \"{policy}\"\nlimit = {LIMIT}\nwindow = \"1d\"\n"
        ));
        text.push_str(&format!(
            "\n[[plans.\"{client}-1s\"]]\nname = \"1s\"\npolicy = \"{policy}\"\nlimit = {LIMIT}\nwindow = \"{WINDOW_MS}ms\"\n"
        ));
    }
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, text).expect("write the config");
    path.to_str().expect("a UTF-8 path").to_owned()
}

/// Starts the fleet on `store`, hammers it from one thread per server, and
/// checks every client's total (day-long limits), then every window of the
/// short limits.
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
    every_window_holds_the_limit(&fleet);
}

/// One allowed request: when it was sent and when its answer came back, in
/// ms since the run began (the server decided somewhere in between).
#[derive(Debug, Clone, Copy)]
struct Allowed {
    sent_ms: u64,
    answered_ms: u64,
}

/// Hammers the `-1s` clients through every server for `RUN`, then checks,
/// from every process's answers: for the sliding window, no window of
/// `WINDOW_MS` holds more than `LIMIT` allowed requests; for the token
/// bucket and GCRA, no more than the policy permits over the run in total
/// (`LIMIT` plus one per `WINDOW_MS / LIMIT`); and for all three, that the
/// limit was reached (demand is far higher): at least `LIMIT` per whole
/// window of the run.
fn every_window_holds_the_limit(fleet: &[Serve]) {
    let start = Instant::now();
    let since_start = || u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let answers: Vec<Mutex<Vec<Allowed>>> = CLIENTS.iter().map(|_| Mutex::default()).collect();
    std::thread::scope(|scope| {
        for serve in fleet {
            let answers = &answers;
            scope.spawn(move || {
                while start.elapsed() < RUN {
                    for (i, client) in CLIENTS.iter().enumerate() {
                        let sent_ms = since_start();
                        if serve.check(&format!("{client}-1s")) {
                            let answered_ms = since_start();
                            let mut list = answers[i].lock().expect("answers");
                            list.push(Allowed {
                                sent_ms,
                                answered_ms,
                            });
                        }
                    }
                }
            });
        }
    });
    let run_ms = since_start();
    let whole_windows = run_ms / WINDOW_MS;
    assert!(whole_windows >= 3, "the run lasted {run_ms} ms");
    for ((client, policy), answers) in CLIENTS.iter().zip(POLICIES).zip(answers) {
        let allowed = answers.into_inner().expect("answers");
        let total = allowed.len() as u64;
        if policy == "sliding-window" {
            let most = most_in_any_window(&allowed);
            assert!(
                most <= u64::from(LIMIT),
                "{client}: {most} allowed within one window"
            );
            assert_eq!(
                most,
                u64::from(LIMIT),
                "{client}: the limit was never reached in a window"
            );
        } else {
            let permitted = u64::from(LIMIT) + run_ms * u64::from(LIMIT) / WINDOW_MS;
            assert!(
                total <= permitted,
                "{client}: {total} allowed in {run_ms} ms, at most {permitted} permitted"
            );
        }
        let reached = whole_windows * u64::from(LIMIT);
        assert!(
            total >= reached,
            "{client}: only {total} allowed in {run_ms} ms: the limit was not reached"
        );
        println!("{client}: {total} allowed in {run_ms} ms (limit {LIMIT} per {WINDOW_MS} ms)");
    }
}

/// The most allowed requests that surely fell within one window of
/// `WINDOW_MS`: for each request's sending time `a`, those sent at or after
/// `a` and answered before `a + WINDOW_MS` (their decisions lie in
/// `[a, a + WINDOW_MS)`, which a sliding window limits to `LIMIT`).
fn most_in_any_window(allowed: &[Allowed]) -> u64 {
    allowed
        .iter()
        .map(|start| {
            let end = start.sent_ms + WINDOW_MS;
            allowed
                .iter()
                .filter(|a| a.sent_ms >= start.sent_ms && a.answered_ms < end)
                .count() as u64
        })
        .max()
        .unwrap_or(0)
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
