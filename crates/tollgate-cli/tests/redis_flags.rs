//! The Redis flags (`--redis`, `--redis-cluster`, `--redis-ca`,
//! `--redis-replicas-to-ack`), defined
//! once for `serve`, `proxy` and `replay`, against `redis-server` processes
//! the tests spawn: `tollgate proxy --redis` shares one limit with a
//! `tollgate serve` on the same Redis (one node, and a cluster), and a wrong
//! password or an untrusted certificate stops start-up with an error saying
//! which, while an unreachable Redis is reported and answered by the
//! failure policy.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::net::TcpListener;
use tollgate_cli::proxy::ProxyArgs;
use tollgate_redis::testing::{free_port, RedisCluster, RedisServer};
use tollgate_server::{Options, Overrides};
use tollgate_testkit::counting_upstream;
use tollgate_testkit::process::ChildGuard;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    proxy: ProxyArgs,
}

/// A config whose one plan allows 4 requests per client per day, failing
/// closed (so an answer not from Redis is never an allowed request).
fn four_per_day(dir: &Path) -> PathBuf {
    let path = dir.join("tollgate.toml");
    std::fs::write(
        &path,
        "[store]\nfailure_policy = \"fail-closed\"\ntimeout = \"2s\"\n\n[[plans.shared]]\nname = \"1d\"\npolicy = \"token-bucket\"\nlimit = 4\nwindow = \"1d\"\n",
    )
    .expect("write the config");
    path
}

/// [`four_per_day`] with `[store] replicas_to_ack = replicas`.
fn replicas_to_ack(dir: &Path, replicas: u32) -> PathBuf {
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
async fn start_serve(config: &Path, redis: &[(&str, &str)]) -> String {
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
async fn start_proxy(upstream: &str, args: &[&str]) -> Result<String, String> {
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
async fn serve_allows(http: &reqwest::Client, addr: &str, client: &str) -> (bool, String) {
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
async fn proxy_allows(http: &reqwest::Client, addr: &str, client: &str) -> bool {
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

/// Two requests through serve and three through the proxy, one client:
/// together they allow exactly the plan's 4, and serve then sees the
/// client's budget spent by the proxy.
async fn one_limit_for_serve_and_proxy(redis: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = four_per_day(dir.path());
    let serve = start_serve(&config, redis).await;
    let (upstream, seen) = counting_upstream().await;
    let mut proxy_args = vec!["--config", config.to_str().expect("utf-8")];
    for (flag, value) in redis {
        proxy_args.extend([*flag, *value]);
    }
    let proxy = start_proxy(&format!("http://{upstream}"), &proxy_args)
        .await
        .expect("proxy starts");
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for _ in 0..2 {
        let (allowed, decided_by) = serve_allows(&http, &serve, "acme").await;
        assert_eq!(decided_by, "store");
        answers.push(allowed);
    }
    for _ in 0..3 {
        answers.push(proxy_allows(&http, &proxy, "acme").await);
    }
    answers.push(serve_allows(&http, &serve, "acme").await.0);
    assert_eq!(answers, [true, true, true, true, false, false], "{redis:?}");
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 2);
    // Another client has its own budget, in both.
    assert!(proxy_allows(&http, &proxy, "bob").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_and_serve_share_one_limit_on_one_redis() {
    let Some(redis) = RedisServer::spawn("proxy_and_serve_one_redis") else {
        return;
    };
    one_limit_for_serve_and_proxy(&[("--redis", &redis.url())]).await;
    assert_ne!(
        redis.cli(&["DBSIZE"]).trim(),
        "0",
        "the state is in this Redis"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_and_serve_share_one_limit_on_a_cluster() {
    let Some(cluster) = RedisCluster::spawn("proxy_and_serve_cluster") else {
        return;
    };
    one_limit_for_serve_and_proxy(&[("--redis-cluster", &cluster.urls().join(","))]).await;
}

/// The proxy with its one-limit flags and `--redis`: the limit is in Redis,
/// so a second proxy on the same Redis shares it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_without_a_config_share_one_limit_through_redis() {
    let Some(redis) = RedisServer::spawn("two_proxies_one_redis") else {
        return;
    };
    let (upstream, _) = counting_upstream().await;
    let upstream = format!("http://{upstream}");
    let url = redis.url();
    let args = [
        "--policy", "gcra", "--limit", "3", "--window", "1d", "--redis", &url,
    ];
    let first = start_proxy(&upstream, &args).await.expect("first proxy");
    let second = start_proxy(&upstream, &args).await.expect("second proxy");
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for proxy in [&first, &second, &first, &second] {
        answers.push(proxy_allows(&http, proxy, "acme").await);
    }
    assert_eq!(answers, [true, true, true, false]);
}

/// A TLS Redis with an ACL user `alice` (password `s3cret-pw`); `None`
/// when Redis is not installed (and not required).
fn tls_redis_with_alice(test: &str) -> Option<RedisServer> {
    let acl = ["--user", "alice", "on", ">s3cret-pw", "~*", "&*", "+@all"];
    RedisServer::spawn_tls(test, &acl)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_proxy_refuse_to_start_with_a_wrong_password_or_an_untrusted_certificate() {
    let Some(redis) = tls_redis_with_alice("startup_refusals") else {
        return;
    };
    let ca = redis
        .certs()
        .expect("TLS")
        .ca
        .to_str()
        .expect("utf-8")
        .to_owned();
    let good = format!("rediss://alice:s3cret-pw@127.0.0.1:{}", redis.port());
    let wrong = format!("rediss://alice:not-it@127.0.0.1:{}", redis.port());
    let other_dir = tempfile::tempdir().expect("temp dir");
    let other_ca = tollgate_redis::testing::TestCerts::generate(other_dir.path()).ca;
    let other_ca = other_ca.to_str().expect("utf-8");
    let cases: [(&[&str], &str); 3] = [
        (
            &["--redis", &wrong, "--redis-ca", &ca],
            "wrong user name or password",
        ),
        (&["--redis", &good], "not trusted"),
        (&["--redis", &good, "--redis-ca", other_ca], "not trusted"),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let config = four_per_day(dir.path());
    let config = config.to_str().expect("utf-8");
    for (flags, expected) in cases {
        let child = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"])
            .args(["--config", config])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map(ChildGuard::from)
            .expect("spawn tollgate serve");
        let (code, stderr) = exit_within(child, Duration::from_secs(20));
        assert_eq!(code, Some(1), "{flags:?}: {stderr}");
        assert!(stderr.contains(expected), "{flags:?}: {stderr}");
        assert!(
            !stderr.contains("not-it") && !stderr.contains("s3cret-pw"),
            "{stderr}"
        );
        let proxy = start_proxy("http://127.0.0.1:9", flags).await;
        let error = proxy.expect_err("the proxy refuses to start");
        assert!(error.contains(expected), "{flags:?}: {error}");
    }
    // The right credentials and CA work, for both.
    let flags = [("--redis", good.as_str()), ("--redis-ca", ca.as_str())];
    one_limit_for_serve_and_proxy(&flags).await;
}

/// The binary `tollgate proxy` with `flags` (a listen address on port 0 and
/// an upstream nobody needs are added), left to run or exit.
fn spawn_proxy(flags: &[&str]) -> ChildGuard {
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

#[test]
fn the_proxy_refuses_a_flag_limit_the_redis_store_cannot_serve_before_listening() {
    // Refused before any connection: nobody needs to listen there.
    let redis = format!("redis://127.0.0.1:{}", free_port());
    let mut child = spawn_proxy(&[
        "--redis",
        &redis,
        "--window",
        "100000000000d",
        "--limit",
        "3",
    ]);
    let stdout = child.stdout.take().expect("stdout");
    let (code, stderr) = exit_within(child, Duration::from_secs(20));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("tollgate proxy: invalid --window: \"100000000000d\" (sliding-window, --limit 3): the redis store cannot serve it exactly: out of the Redis store's exact range: "),
        "{stderr}"
    );
    let mut said = String::new();
    std::io::Read::read_to_string(&mut { stdout }, &mut said).expect("read stdout");
    assert!(!said.contains("listening"), "{said}");
    // A config file with the same limit is refused at start-up by the same check.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.toml");
    std::fs::write(
        &config,
        "[[plans.p]]\nname = \"l\"\npolicy = \"sliding-window\"\nlimit = 3\nwindow = \"100000000000d\"\n",
    )
    .expect("write the config");
    let config = config.to_str().expect("utf-8");
    let child = spawn_proxy(&["--redis", &redis, "--config", config]);
    let (code, from_file) = exit_within(child, Duration::from_secs(20));
    assert_eq!(code, Some(2), "{from_file}");
    let cause = |text: &str| {
        let at = text
            .find("the redis store cannot serve it exactly: ")
            .expect("the cause");
        text[at..].lines().next().unwrap_or_default().to_owned()
    };
    assert_eq!(cause(&stderr), cause(&from_file));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_refusing_the_login_is_a_failed_connection_not_an_invalid_flag() {
    let acl = ["--user", "alice", "on", ">s3cret-pw", "~*", "&*", "+@all"];
    let Some(redis) = RedisServer::spawn_with("login_refused", &acl) else {
        return;
    };
    let wrong = format!("redis://alice:not-it@127.0.0.1:{}", redis.port());
    // In the library: the error says the connection failed, and which flag
    // named that Redis.
    let error = start_proxy("http://127.0.0.1:9", &["--redis", &wrong])
        .await
        .expect_err("the proxy refuses to start");
    assert!(
        error.starts_with("cannot connect to the Redis given by --redis: "),
        "{error}"
    );
    assert!(error.contains("wrong user name or password"), "{error}");
    assert!(!error.contains("not-it"), "{error}");
    // The binary: exit 2, with serve's own words for the same failure.
    let (code, stderr) = exit_within(spawn_proxy(&["--redis", &wrong]), Duration::from_secs(20));
    assert_eq!(code, Some(2), "{stderr}");
    let proxy_says = stderr
        .lines()
        .find_map(|line| {
            line.strip_prefix("tollgate proxy: cannot connect to the Redis given by --redis: ")
        })
        .unwrap_or_else(|| panic!("{stderr}"))
        .to_owned();
    let serve = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"])
        .args(["--redis", &wrong])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map(ChildGuard::from)
        .expect("spawn tollgate serve");
    let (_, serve_stderr) = exit_within(serve, Duration::from_secs(20));
    assert!(
        serve_stderr.contains(&format!("tollgate serve: {proxy_says}")),
        "{serve_stderr}\n{proxy_says}"
    );
    assert!(
        !stderr.contains("not-it") && !stderr.contains("s3cret-pw"),
        "{stderr}"
    );
    // The Redis of a config file names the file's flag.
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("tollgate.toml");
    std::fs::write(
        &config,
        format!("[store]\nurl = \"{wrong}\"\n\n[[plans.p]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 4\nwindow = \"1s\"\n"),
    )
    .expect("write the config");
    let error = start_proxy(
        "http://127.0.0.1:9",
        &["--config", config.to_str().expect("utf-8")],
    )
    .await
    .expect_err("the proxy refuses to start");
    assert!(
        error.starts_with("cannot connect to the Redis given by --config: "),
        "{error}"
    );
}

/// An ACL user that logs in but may not run `EVALSHA` stops `serve` at
/// start-up (exit 1) with what to grant, as a user without `TIME` does:
/// else every decision would be refused and answered by the failure policy.
#[test]
fn serve_refuses_to_start_with_a_redis_user_that_cannot_run_scripts() {
    let acl = [
        "--user", "alice", "on", ">pw", "~*", "&*", "+@all", "-evalsha",
    ];
    let Some(redis) = RedisServer::spawn_with("no_evalsha", &acl) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("redis://alice:pw@127.0.0.1:{}", redis.port());
    let serve = serve_process(&four_per_day(dir.path()), &url, &[]);
    let (code, stderr) = exit_within(serve, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the Redis user cannot run EVALSHA: grant it +evalsha"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_is_reported_and_answered_by_the_failure_policy() {
    // Nothing listens on a port that was just free.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().expect("temp dir");
    let config = four_per_day(dir.path());
    let started = Instant::now();
    let serve = start_serve(&config, &[("--redis", &url)]).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let http = reqwest::Client::new();
    let (allowed, decided_by) = serve_allows(&http, &serve, "acme").await;
    assert_eq!((allowed, decided_by.as_str()), (false, "fail-closed"));
    // The binary says so at start-up, naming the node and the cause.
    let mut child = serve_process(&config, &url, &[]);
    let stderr = read_until(child.stderr.take().expect("stderr"), "unreachable");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        stderr.contains("nothing accepts connections there"),
        "{stderr}"
    );
    assert!(stderr.contains(&url), "{stderr}");
}

/// A Redis that may evict tollgate's keys when full (`maxmemory-policy
/// volatile-lru`, a managed service's usual default) is named at start-up,
/// with what to set instead; one that refuses writes when full is not; a
/// replica (which refuses every write) is named too.
#[test]
fn serve_warns_at_start_up_of_a_redis_that_evicts_keys_or_is_a_replica() {
    let Some(server) =
        RedisServer::spawn_with("evicting_redis", &["--maxmemory-policy", "volatile-lru"])
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let config = four_per_day(dir.path());
    let start_up_log_of = |config: &Path, url: &str| start_up_log(serve_process(config, url, &[]));
    let start_up_log = |url: &str| start_up_log_of(&config, url);
    let stderr = start_up_log(&server.url());
    assert!(stderr.contains("volatile-lru"), "{stderr}");
    assert!(stderr.contains("maxmemory-policy noeviction"), "{stderr}");

    let set = server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    assert_eq!(set.trim(), "OK");
    let stderr = start_up_log(&server.url());
    assert!(stderr.contains("connected"), "{stderr}");
    assert!(!stderr.contains("maxmemory-policy"), "{stderr}");
    assert!(!stderr.contains("replica"), "{stderr}");

    // A replica of it, given by mistake (a reader endpoint).
    let port = server.port().to_string();
    let replica = RedisServer::spawn_with("evicting_redis", &["--replicaof", "127.0.0.1", &port])
        .expect("replica");
    let stderr = start_up_log(&replica.url());
    assert!(stderr.contains("Redis is a replica"), "{stderr}");
    assert!(stderr.contains("give the primary's address"), "{stderr}");
    drop(replica);

    // Waiting for more replicas than the primary has.
    let stderr = start_up_log_of(&replicas_to_ack(dir.path(), 2), &server.url());
    assert!(
        stderr.contains("fewer replicas connected than replicas_to_ack"),
        "{stderr}"
    );
}

/// `--redis-replicas-to-ack N` replaces the file's `[store]
/// replicas_to_ack`: `serve` warns of a Redis with fewer replicas than the
/// flag asks for over a file that asks for none, and not when the flag asks
/// for none over a file that asks for two. A flag out of bounds, or on the
/// memory store, stops start-up with an error that names it.
#[test]
fn the_replicas_to_ack_flag_replaces_the_files() {
    let Some(server) = RedisServer::spawn("replicas_to_ack_flag") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let warning = "fewer replicas connected than replicas_to_ack";
    let flag = |replicas: &'static str| ["--redis-replicas-to-ack", replicas];
    let stderr = start_up_log(serve_process(
        &four_per_day(dir.path()),
        &server.url(),
        &flag("1"),
    ));
    assert!(stderr.contains(warning), "{stderr}");
    let stderr = start_up_log(serve_process(
        &replicas_to_ack(dir.path(), 2),
        &server.url(),
        &flag("0"),
    ));
    assert!(
        stderr.contains("connected") && !stderr.contains(warning),
        "{stderr}"
    );

    let refused = serve_process(&four_per_day(dir.path()), &server.url(), &flag("17"));
    let (code, stderr) = exit_within(refused, Duration::from_secs(10));
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("invalid --redis-replicas-to-ack 17: must be from 0 to 16"),
        "{stderr}"
    );
    let memory = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"])
        .args(flag("1"))
        .stderr(Stdio::piped())
        .spawn()
        .map(ChildGuard::from)
        .expect("spawn tollgate serve");
    let (code, stderr) = exit_within(memory, Duration::from_secs(10));
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("--redis-replicas-to-ack 1 needs a Redis store"),
        "{stderr}"
    );
}

/// What `serve` (`child`) logs on standard error until it says it listens
/// (it checks Redis first); it is stopped then.
fn start_up_log(mut child: ChildGuard) -> String {
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
fn serve_process(config: &Path, url: &str, extra: &[&str]) -> ChildGuard {
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
fn exit_within(mut child: ChildGuard, limit: Duration) -> (Option<i32>, String) {
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
fn read_until(stream: impl std::io::Read, needle: &str) -> String {
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
