//! The real `tollgate` binary: `check` on good and bad files, and `serve`
//! answering over HTTP, reloading on SIGHUP and on file change, and stopping
//! cleanly on SIGTERM. Waits are bounded loops on real events (a line
//! printed, an answer changed), never sleeps standing in for a clock.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tollgate_testkit::process::{ChildGuard, Log};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tollgate.toml");

fn tollgate(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn check_accepts_the_example_with_a_summary() {
    let out = tollgate(&["check", EXAMPLE]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("tollgate.toml: ok"), "{stdout}");
    assert!(stdout.contains("2 plan(s)"), "{stdout}");
    assert!(stdout.contains("plan \"paid\""), "{stdout}");
}

/// `tollgate check FILE | head -1` and the like: the reader is gone before
/// the summary is written. The check's verdict stands, without a panic.
#[test]
fn check_into_a_closed_pipe_exits_with_its_verdict() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(BIN)
        .args(["check", EXAMPLE])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn check_points_at_the_line_of_the_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[[plans.free]]\nname = \"1s\"\npolicy = \"sliding-window\"\nlimit = 10\nwindow = \"1fortnight\"\n", "line 5, column 10", "invalid duration"),
        ("[[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 10\nwindow = \"1s\"\n[clients]\nbob = \"gold\"\n", "line 7, column 7", "unknown plan \"gold\""),
        ("[[plans.free]\n", "line 1", ""),
        ("[[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 10\nwindow = \"1s\"\n[connections]\nmax_connections = 0\n", "line 7, column 19", "[connections] max_connections must be between 1 and 1000000 (got 0)"),
        // A window the Redis store can never serve exactly: refused at its line.
        ("[store]\nurl = \"redis://127.0.0.1:6379\"\n[[plans.free]]\nname = \"1s\"\npolicy = \"sliding-window\"\nlimit = 10\nwindow = \"100000000000d\"\n", "line 7, column 10", "the redis store cannot serve"),
    ];
    for (i, (text, position, message)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = tollgate(&["check", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("bad{i}.toml: {position}")),
            "{stderr}"
        );
        assert!(stderr.contains(message), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    let out = tollgate(&["check", "/nonexistent/tollgate.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/tollgate.toml"));
}

#[test]
fn serve_refuses_bad_flags() {
    let out = tollgate(&["serve", "--listen", "127.0.0.1:0", "--redis", "http://nope"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --redis URL \"http://nope\""),
        "{stderr}"
    );
    let out = tollgate(&["serve", "--listen", "nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --listen address \"nowhere\""),
        "{stderr}"
    );
    let out = tollgate(&["serve", "--grpc-listen", "nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --grpc-listen address \"nowhere\""),
        "{stderr}"
    );
    let seeds = "redis://127.0.0.1:1,redis://:pw@nowhere:x";
    let out = tollgate(&["serve", "--redis-cluster", seeds]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --redis-cluster URL \"redis://:***@nowhere:x\""),
        "{stderr}"
    );
    let ca = [
        "--redis",
        "rediss://127.0.0.1:1",
        "--redis-ca",
        "/nonexistent.pem",
    ];
    let out = tollgate(&[&["serve"][..], &ca].concat());
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --redis-ca /nonexistent.pem: "),
        "{stderr}"
    );
    let out = tollgate(&[&["replay"][..], &ca, &["/nonexistent.replay"]].concat());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --redis-ca /nonexistent.pem: "),
        "{stderr}"
    );
    let out = tollgate(&["replay", "--redis", "nope", "/nonexistent.replay"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid --redis URL \"nope\""), "{stderr}");
}

/// A running `tollgate serve`, the address it printed and what it logs.
struct Serve {
    child: ChildGuard,
    addr: String,
    banner: String,
    /// Its standard error, read as it comes.
    log: Log,
}

impl Serve {
    fn start(args: &[&str]) -> Self {
        let mut child = ChildGuard::spawn(
            Command::new(BIN)
                .arg("serve")
                // Tests run side by side: never the default gRPC port.
                .args(["--grpc-listen", "127.0.0.1:0"])
                .args(args)
                .env("RUST_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        )
        .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut banner = String::new();
        let mut addr = None;
        for _ in 0..20 {
            let mut line = String::new();
            if stdout.read_line(&mut line).unwrap() == 0 {
                break;
            }
            banner.push_str(&line);
            if let Some(rest) = line.strip_prefix("tollgate listening on http://") {
                addr = rest.split_whitespace().next().map(str::to_owned);
            }
            if line.starts_with("/v1/auth") {
                break;
            }
        }
        let addr = addr.unwrap_or_else(|| panic!("no address in the banner:\n{banner}"));
        let log = Log::read(child.stderr.take().unwrap());
        Self {
            child,
            addr,
            banner,
            log,
        }
    }

    /// One HTTP/1.1 request on a fresh connection; the whole response.
    fn request(&self, head: &str, body: &str) -> String {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "{head} HTTP/1.1\r\nHost: tollgate\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    fn signal(&self, name: &str) {
        self.child.signal(name);
    }

    /// Waits (bounded) until `GET /v1/remaining/probe` contains `needle`.
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let response = self.request("GET /v1/remaining/probe", "");
            if response.contains(needle) {
                return response;
            }
            assert!(
                Instant::now() < deadline,
                "never saw {needle:?}; last:\n{response}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit status and everything logged.
    fn stop(mut self) -> (bool, String) {
        self.signal("TERM");
        let status = self.child.wait().unwrap();
        (status.success(), self.log.finish())
    }
}

fn write(path: &Path, text: &str) {
    // Write then rename, as editors and config managers do, so the server
    // never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn serve_on_the_embedded_default_answers_and_stops_on_sigterm() {
    let serve = Serve::start(&["--listen", "127.0.0.1:0"]);
    assert!(
        serve.banner.contains("embedded default"),
        "{}",
        serve.banner
    );
    assert!(
        serve.banner.contains("\"1s\" sliding-window 100 per 1s"),
        "{}",
        serve.banner
    );
    let response = serve.request("POST /v1/check", r#"{"client":"x","cost":1}"#);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains("ratelimit: \"default-1s\";r=99;t=1"),
        "{response}"
    );
    let (ok, log) = serve.stop();
    assert!(ok, "{log}");
    assert!(log.contains("shutting down"), "{log}");
}

/// Without `--config` a SIGHUP has nothing to reload: `serve` says so and
/// goes on, as `proxy` does (an audit: it said nothing, so an operator
/// could not tell a reload from a signal lost).
#[test]
fn serve_without_a_config_says_a_sighup_has_nothing_to_reload() {
    let serve = Serve::start(&["--listen", "127.0.0.1:0"]);
    serve.signal("HUP");
    serve
        .log
        .wait_for("SIGHUP: no --config to reload; going on");
    let response = serve.request("POST /v1/check", r#"{"client":"x","cost":1}"#);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (ok, log) = serve.stop();
    assert!(ok, "{log}");
}

#[test]
fn serve_on_a_redis_that_is_down_starts_and_answers_by_its_failure_policy() {
    let port = tollgate_redis::testing::free_port();
    let url = format!("redis://127.0.0.1:{port}/0");
    let serve = Serve::start(&["--listen", "127.0.0.1:0", "--redis", &url]);
    assert!(
        serve.banner.contains(&format!("redis {url}")),
        "{}",
        serve.banner
    );
    let response = serve.request("POST /v1/check", r#"{"client":"x","cost":1}"#);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.contains(r#""decided_by":"fail-open""#),
        "{response}"
    );
    let (ok, log) = serve.stop();
    assert!(ok, "{log}");
}

#[test]
fn two_serve_processes_on_one_redis_share_one_limit() {
    let Some(redis) = tollgate_redis::testing::RedisServer::spawn(
        "two_serve_processes_on_one_redis_share_one_limit",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tollgate.toml");
    // A day-long token bucket: the servers' own clocks cannot refill it
    // while the test runs, so exactly 5 requests can pass in total.
    write(
        &config,
        &format!(
            "[store]\nurl = \"{}\"\nfailure_policy = \"fail-closed\"\n\n[[plans.shared]]\nname = \"1d\"\npolicy = \"token-bucket\"\nlimit = 5\nwindow = \"1d\"\n",
            redis.url()
        ),
    );
    let config = config.to_str().unwrap();
    let first = Serve::start(&["--listen", "127.0.0.1:0", "--config", config]);
    let second = Serve::start(&["--listen", "127.0.0.1:0", "--config", config]);
    let mut allowed = 0;
    for i in 0..12 {
        let serve = if i % 2 == 0 { &first } else { &second };
        let response = serve.request("POST /v1/check", r#"{"client":"app-42"}"#);
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        // Decided by Redis (or by its rejection cache, repeating Redis's own
        // rejection), never by the failure policy.
        assert!(
            response.contains(r#""decided_by":"store""#)
                || (response.contains(r#""decided_by":"cache""#)
                    && response.contains(r#"{"allowed":false"#)),
            "{response}"
        );
        if response.contains(r#"{"allowed":true"#) {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5);
    for serve in [first, second] {
        let (ok, log) = serve.stop();
        assert!(ok, "{log}");
    }
}

#[test]
fn serve_reloads_on_sighup_and_on_file_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let plan = |limit: u32| {
        format!("[[plans.basic]]\nname = \"1m\"\npolicy = \"sliding-window\"\nlimit = {limit}\nwindow = \"1m\"\n")
    };
    write(&path, &plan(5));
    let serve = Serve::start(&[
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    serve.wait_for("\"basic-1m\";q=5;w=60");

    write(&path, &plan(7));
    serve.signal("HUP");
    serve.wait_for("\"basic-1m\";q=7;w=60");

    // A broken file is refused; the running config stays.
    write(&path, "[[plans.basic]]\nname = \"1m\"\npolicy = \"nope\"\n");
    serve.signal("HUP");
    // And a later good edit is picked up without a signal.
    write(&path, &plan(9));
    serve.wait_for("\"basic-1m\";q=9;w=60");

    let (ok, log) = serve.stop();
    assert!(ok, "{log}");
    assert!(log.contains("SIGHUP: reloading the config"), "{log}");
    assert!(log.contains("config reloaded"), "{log}");
}

/// A config with a day-long limit of 2 on `[store]` given by flags. The
/// store's timeout is 2 s, not the default 100 ms: the first call also makes
/// the connection (a TLS handshake, a cluster's slot map), which on a loaded
/// test machine can take longer than 100 ms, and these tests are about
/// reaching Redis, not about the failure policy.
fn two_per_day(dir: &Path) -> String {
    let config = dir.join("tollgate.toml");
    write(
        &config,
        "[store]\nfailure_policy = \"fail-closed\"\ntimeout = \"2s\"\n\n[[plans.shared]]\nname = \"1d\"\npolicy = \"token-bucket\"\nlimit = 2\nwindow = \"1d\"\n",
    );
    config.to_str().unwrap().to_owned()
}

/// Three checks of one client: the first two allowed, all decided by Redis.
fn decided_by_redis(serve: &Serve) {
    let mut answers = Vec::new();
    for _ in 0..3 {
        let response = serve.request("POST /v1/check", r#"{"client":"app-42"}"#);
        assert!(response.contains(r#""decided_by":"store""#), "{response}");
        answers.push(response.contains(r#"{"allowed":true"#));
    }
    assert_eq!(answers, [true, true, false]);
}

#[test]
fn serve_reaches_a_tls_redis_as_an_acl_user_with_a_private_ca() {
    let acl = ["--user", "alice", "on", ">s3cret-pw", "~*", "&*", "+@all"];
    let Some(redis) = tollgate_redis::testing::RedisServer::spawn_tls("serve_tls_acl", &acl) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = two_per_day(dir.path());
    let url = format!("rediss://alice:s3cret-pw@127.0.0.1:{}/1", redis.port());
    let ca = redis.certs().unwrap().ca.to_str().unwrap().to_owned();
    let args = ["--listen", "127.0.0.1:0", "--config", &config];
    let serve = Serve::start(&[&args[..], &["--redis", &url, "--redis-ca", &ca]].concat());
    let shown = format!(
        "rediss://alice:***@127.0.0.1:{}/1 (private CA)",
        redis.port()
    );
    assert!(serve.banner.contains(&shown), "{}", serve.banner);
    decided_by_redis(&serve);
    let banner = serve.banner.clone();
    let (ok, log) = serve.stop();
    assert!(ok, "{log}");
    // The password is in neither the banner nor the log.
    assert!(!format!("{banner}{log}").contains("s3cret-pw"));
    assert_ne!(redis.cli(&["-n", "1", "DBSIZE"]).trim(), "0");
}

#[test]
fn serve_reaches_a_cluster_through_its_seeds() {
    let Some(cluster) = tollgate_redis::testing::RedisCluster::spawn("serve_cluster") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = two_per_day(dir.path());
    let seeds = cluster.urls().join(",");
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--config",
        &config,
        "--redis-cluster",
        &seeds,
    ];
    let serve = Serve::start(&args);
    assert!(
        serve.banner.contains("store: redis cluster ["),
        "{}",
        serve.banner
    );
    decided_by_redis(&serve);
    let (ok, log) = serve.stop();
    assert!(ok, "{log}");
}

#[test]
fn check_refuses_a_ca_for_a_plain_redis_url_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tollgate.toml");
    write(
        &config,
        "[store]\nurl = \"redis://127.0.0.1:6379\"\ntls_ca = \"/nonexistent/ca.pem\"\n\n[[plans.default]]\nname = \"s\"\npolicy = \"sliding-window\"\nlimit = 1\nwindow = \"1s\"\n",
    );
    let output = tollgate(&["check", config.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("line 3") && stderr.contains("/nonexistent/ca.pem"),
        "{stderr}"
    );
}
