//! The Redis flags (`--redis`, `--redis-cluster`, `--redis-ca`,
//! `--redis-replicas-to-ack`), defined
//! once for `serve`, `proxy` and `replay`, against `redis-server` processes
//! the tests spawn: `tollgate proxy --redis` shares one limit with a
//! `tollgate serve` on the same Redis (one node, and a cluster), and a wrong
//! password or an untrusted certificate stops start-up with an error saying
//! which (the other start-up checks: `redis_start_up.rs`).

mod redis_common;

use std::process::{Command, Stdio};
use std::time::Duration;

use tollgate_redis::testing::{free_port, RedisCluster, RedisServer};
use tollgate_testkit::counting_upstream;
use tollgate_testkit::process::ChildGuard;

use redis_common::*;

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
