//! The options of `tollgate proxy`: each one's defaults, bounds and errors.

use super::*;
use clap::Parser;
use tollgate::Policy;

/// `tollgate proxy`'s flags alone, as the binary parses them.
#[derive(Parser)]
pub(in crate::proxy) struct Cli {
    #[command(flatten)]
    pub(in crate::proxy) proxy: ProxyArgs,
}

fn config(args: &[&str]) -> Result<ProxyConfig, String> {
    let cli = Cli::try_parse_from(std::iter::once("proxy").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(cli.proxy.config())
        .map_err(|e| e.to_string())
}

#[test]
fn defaults_give_a_working_config() {
    let config = config(&["--upstream", "http://127.0.0.1:3000"]).unwrap();
    assert_eq!(config.upstream().url(), "http://127.0.0.1:3000");
    let plans = config.limits().current_plans();
    let limit = &plans.default_plan().limits()[0];
    assert_eq!(
        (
            limit.policy().name(),
            limit.policy().limit(),
            limit.policy().window_ms()
        ),
        ("sliding-window", 100, 1_000)
    );
}

/// A worker count the machine cannot hold is refused by name, not left
/// to fail as "Too many open files" (an audit).
#[test]
fn workers_are_counted_from_one_to_the_most() {
    let parse = |n: &str| {
        Cli::try_parse_from([
            "proxy",
            "--upstream",
            "http://127.0.0.1:3000",
            "--workers",
            n,
        ])
        .map(|cli| cli.proxy.workers.map(NonZeroUsize::get))
        .map_err(|e| e.to_string())
    };
    assert_eq!(parse("1"), Ok(Some(1)));
    assert_eq!(parse("1024"), Ok(Some(MAX_WORKERS)));
    for bad in ["0", "1025", "100000000", "two", "1.5"] {
        let error = parse(bad).unwrap_err();
        assert!(error.contains("--workers"), "{bad}: {error}");
    }
    assert!(parse("100000000").unwrap_err().contains("1 to 1024"));
}

/// With `--config`, a Redis flag at fault is named as without it: an
/// unreadable `--redis-ca` was "invalid --config", and a flag given
/// without a Redis store was printed under it.
#[test]
fn with_a_config_a_redis_flag_at_fault_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let limit = "[[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 2\nwindow = \"1s\"\n";
    let tls = format!("{limit}[store]\nurl = \"rediss://127.0.0.1:1\"\n");
    let cases = [
        (
            tls.as_str(),
            ["--redis-ca", "/nonexistent.pem"],
            "invalid --redis-ca /",
        ),
        (
            limit,
            ["--redis-replicas-to-ack", "1"],
            "--redis-replicas-to-ack 1 needs a Redis store",
        ),
    ];
    for (text, flag, expected) in cases {
        std::fs::write(&path, text).unwrap();
        let path = path.to_str().unwrap();
        let mut args = vec!["--upstream", "http://h", "--config", path];
        args.extend(flag);
        let err = config(&args).err().unwrap_or_default();
        assert!(err.starts_with(expected), "{flag:?}: {err}");
    }
}

#[test]
fn a_serve_config_gives_each_client_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        "default_plan = \"free\"\n[clients]\nacme = \"paid\"\n\
         [[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 2\nwindow = \"1s\"\n\
         [[plans.paid]]\nname = \"1s\"\npolicy = \"token-bucket\"\nlimit = 50\nwindow = \"1s\"\n",
    )
    .unwrap();
    let path = path.to_str().unwrap();
    let config = config(&[
        "--upstream",
        "http://127.0.0.1:3000",
        "--key",
        "header:X-Client-Id",
        "--config",
        path,
    ])
    .unwrap();
    let limits = config.limits();
    let plans = limits.current_plans();
    assert_eq!(plans.default_plan().name(), "free");
    assert_eq!(plans.plan_for("acme").name(), "paid");
    assert_eq!(plans.plan_for("acme").limits()[0].policy().limit(), 50);
    assert_eq!(plans.plan_for("someone").name(), "free");
    // --config replaces the one-limit options; a broken file is named.
    let both = config_err(&["--upstream", "http://h", "--config", path, "--limit", "5"]);
    assert!(both.contains("--limit"), "{both}");
    std::fs::write(path, "[[plans.free]\n").unwrap();
    let broken = config_err(&["--upstream", "http://h", "--config", path]);
    assert!(
        broken.contains("invalid --config") || broken.contains("--config"),
        "{broken}"
    );
    assert!(broken.contains("line 1"), "{broken}");
}

fn config_err(args: &[&str]) -> String {
    config(args).err().unwrap_or_default()
}

#[test]
fn each_bad_option_is_named() {
    // Each message starts with what names the option: once (a Redis
    // flag's own check was once prefixed with "invalid --redis: ").
    let cases: [(&[&str], &str); 13] = [
        (
            &["--upstream", "http://h", "--redis-ca", "/tmp/ca.pem"],
            "--redis-ca /tmp/ca.pem needs a Redis store",
        ),
        (
            &["--upstream", "http://h", "--redis-replicas-to-ack", "1"],
            "--redis-replicas-to-ack 1 needs a Redis store",
        ),
        (
            &[
                "--upstream",
                "http://h",
                "--redis",
                "redis://127.0.0.1:1",
                "--redis-replicas-to-ack",
                "17",
            ],
            "invalid --redis-replicas-to-ack 17: must be from 0 to 16",
        ),
        (
            &[
                "--upstream",
                "http://h",
                "--redis-cluster",
                "redis://127.0.0.1:1,x",
            ],
            "invalid --redis-cluster: seed number 2 is not a redis:// or rediss:// URL",
        ),
        (
            &[
                "--upstream",
                "http://h",
                "--redis",
                "rediss://127.0.0.1:1",
                "--redis-ca",
                "/nonexistent.pem",
            ],
            "invalid --redis-ca /",
        ),
        (
            &["--upstream", "http://h", "--redis", "nope"],
            "invalid --redis URL \"nope\": expected redis://",
        ),
        (&["--upstream", "ftp://x"], "invalid upstream"),
        (
            &["--upstream", "http://u:pw@h:1"],
            "invalid upstream \"http://***@h:1\": user info (user:password@) is not supported",
        ),
        (
            &["--upstream", "http://h", "--window", "1w"],
            "invalid --window",
        ),
        (
            &["--upstream", "http://h", "--key", "cookie"],
            "invalid --key",
        ),
        (
            &["--upstream", "http://h", "--policy", "leaky"],
            "unknown policy",
        ),
        (
            &["--upstream", "http://h", "--limit", "0"],
            "limit must be at least 1",
        ),
        (
            &["--upstream", "http://h", "--upstream-timeout", "0s"],
            "invalid --upstream-timeout",
        ),
    ];
    for (args, expected) in cases {
        let err = config(args).err().unwrap_or_default();
        assert!(err.starts_with(expected), "{args:?}: {err}");
    }
}

#[test]
fn a_limit_the_redis_store_cannot_serve_is_refused_before_connecting() {
    // Nobody listens there: a refusal can only come from the check.
    let redis = format!("redis://127.0.0.1:{}", tollgate_redis::testing::free_port());
    let cases = [
        // The window alone is beyond the store's exact range.
        (
            ["sliding-window", "3", "100000000000d"],
            "invalid --window: \"100000000000d\" (sliding-window, --limit 3): \
             the redis store cannot serve it exactly: out of the Redis store's exact range: ",
        ),
        // The window is fine; GCRA scales times by this limit.
        (
            ["gcra", "100000", "1s"],
            "invalid --limit: 100000 (gcra, --window \"1s\"): \
             the redis store cannot serve it exactly: out of the Redis store's exact range: ",
        ),
    ];
    for ([policy, limit, window], expected) in cases {
        let flags = [
            "--upstream",
            "http://h",
            "--policy",
            policy,
            "--limit",
            limit,
            "--window",
            window,
        ];
        let err = config_err(&[&flags[..], &["--redis", &redis]].concat());
        assert!(err.starts_with(expected), "{flags:?}: {err}");
        assert!(err.contains("exceeds 2^53 - 1"), "{flags:?}: {err}");
        // In memory, the same limit is exact: nothing to refuse.
        assert!(config(&flags).is_ok(), "{flags:?}");
    }
}
