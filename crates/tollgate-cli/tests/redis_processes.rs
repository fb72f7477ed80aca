//! The `tollgate` binary against a real Redis: `replay --redis` prints what
//! the in-memory replay prints, and two processes sharing one Redis and one
//! client never allow more than the limit together; `--redis-replicas-to-ack`
//! waits for the replicas it names.

use std::process::{Command, Stdio};

use tollgate_redis::testing::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

#[test]
fn replay_redis_prints_the_expected_sessions() {
    let Some(server) = RedisServer::spawn("replay_redis_prints_the_expected_sessions") else {
        return;
    };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
    for name in ["session1", "session2"] {
        let output = Command::new(BIN)
            .args(["replay", "--redis", &server.url()])
            .arg(format!("{root}{name}.replay"))
            .output()
            .expect("run tollgate");
        assert!(output.status.success(), "{name}: {output:?}");
        let expected = std::fs::read_to_string(format!("{root}{name}.expected")).expect("expected");
        assert_eq!(String::from_utf8_lossy(&output.stdout), expected, "{name}");
    }
}

#[test]
fn replay_redis_reports_an_unreachable_redis() {
    // Nothing listens on a port that was just free.
    let port = tollgate_redis::testing::free_port();
    let output = Command::new(BIN)
        .args([
            "replay",
            "--redis",
            &format!("redis://127.0.0.1:{port}"),
            "-",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot use Redis"));
}

#[test]
fn a_bad_redis_prefix_is_shown_as_given() {
    // Refused before connecting: nothing needs to listen there.
    let redis = format!("redis://127.0.0.1:{}", tollgate_redis::testing::free_port());
    for (prefix, says) in [
        ("a{b", "the key prefix \"a{b\" contains '{' or '}'"),
        ("", "the key prefix is empty"),
    ] {
        let output = Command::new(BIN)
            .args(["replay", "--redis", &redis, "--redis-prefix", prefix, "-"])
            .stdin(Stdio::null())
            .output()
            .expect("run tollgate");
        assert_eq!(output.status.code(), Some(2), "{prefix:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.starts_with(&format!("tollgate replay: invalid --redis-prefix: {says}")),
            "{prefix:?}: {stderr}"
        );
        assert!(!stderr.contains(&format!("{prefix}:0")), "{stderr}");
    }
}

/// replay has no config file: a Redis-only flag without a Redis names the
/// flags that give one, not a config's keys (audit).
#[test]
fn a_redis_only_flag_without_a_redis_names_replays_flags() {
    for (args, flag) in [
        (["--redis-ca", "ca.pem"], "--redis-ca ca.pem"),
        (
            ["--redis-replicas-to-ack", "1"],
            "--redis-replicas-to-ack 1",
        ),
        (["--redis-prefix", "p"], "--redis-prefix"),
    ] {
        let output = Command::new(BIN)
            .arg("replay")
            .args(args)
            .arg("-")
            .stdin(Stdio::null())
            .output()
            .expect("run tollgate");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let expected = format!("tollgate replay: {flag} needs --redis or --redis-cluster\n");
        assert_eq!(stderr, expected, "{args:?}");
    }
}

#[test]
fn two_processes_share_one_limit() {
    let Some(server) = RedisServer::spawn("two_processes_share_one_limit") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("tollgate-two-processes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (i, policy) in tollgate::POLICY_NAMES.iter().enumerate() {
        let mut session = format!("new {policy} 10 1000000\n");
        for call in 0..300 {
            session.push_str(&format!("allow shared-client {}\n", 5 + call % 3));
        }
        let file = dir.join(format!("{policy}.replay"));
        std::fs::write(&file, session).expect("write session");
        let prefix = format!("two-processes-{i}");
        let children: Vec<_> = (0..2)
            .map(|_| {
                Command::new(BIN)
                    .args([
                        "replay",
                        "--redis",
                        &server.url(),
                        "--redis-prefix",
                        &prefix,
                    ])
                    .arg(&file)
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("spawn tollgate")
            })
            .collect();
        let mut allowed = 0;
        for child in children {
            let output = child.wait_with_output().expect("wait");
            assert!(output.status.success());
            allowed += String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter(|l| *l == "true")
                .count();
        }
        assert_eq!(allowed, 10, "{policy}: two processes, 600 calls, limit 10");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn replay_reaches_a_tls_redis_with_its_private_ca() {
    let Some(server) = RedisServer::spawn_tls("replay_reaches_a_tls_redis", &[]) else {
        return;
    };
    let ca = &server.certs().expect("TLS").ca;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
    let output = Command::new(BIN)
        .args(["replay", "--redis", &server.url(), "--redis-ca"])
        .arg(ca)
        .arg(format!("{root}session1.replay"))
        .output()
        .expect("run tollgate");
    assert!(output.status.success(), "{output:?}");
    let expected = std::fs::read_to_string(format!("{root}session1.expected")).expect("expected");
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
    // Without the CA, the system's roots do not trust the test's certificate.
    let output = Command::new(BIN)
        .args(["replay", "--redis", &server.url(), "-"])
        .stdin(Stdio::null())
        .output()
        .expect("run tollgate");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not trusted"), "{stderr}");
}

#[test]
fn replay_reaches_a_cluster_through_its_seeds() {
    let Some(cluster) = tollgate_redis::testing::RedisCluster::spawn("replay_reaches_a_cluster")
    else {
        return;
    };
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
    let output = Command::new(BIN)
        .args(["replay", "--redis-cluster", &cluster.urls().join(",")])
        .arg(format!("{root}session2.replay"))
        .output()
        .expect("run tollgate");
    assert!(output.status.success(), "{output:?}");
    let expected = std::fs::read_to_string(format!("{root}session2.expected")).expect("expected");
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
}

/// `replay --redis-replicas-to-ack N`: with a replica that acknowledges,
/// the session prints what it prints without the flag; asking for two
/// replicas of a Redis that has one, no request is allowed (each one that
/// consumed is taken back and its line prints an error), and the exit code
/// says lines failed.
#[test]
fn replay_waits_for_the_replicas_the_flag_asks_for() {
    let Some(server) = RedisServer::spawn("replay_replicas_to_ack") else {
        return;
    };
    let replica =
        RedisServer::spawn_replica_of("replay_replicas_to_ack", server.port()).expect("replica");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
    let replay = |replicas: &str, session: &str| {
        Command::new(BIN)
            .args(["replay", "--redis", &server.url()])
            .args(["--redis-replicas-to-ack", replicas])
            .arg(session)
            .output()
            .expect("run tollgate")
    };
    let output = replay("1", &format!("{root}session1.replay"));
    assert!(output.status.success(), "{output:?}");
    let expected = std::fs::read_to_string(format!("{root}session1.expected")).expect("expected");
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);

    // One call that consumes: it waits replay's whole store timeout (2 s)
    // for the replica that is not there.
    let dir = tempfile::tempdir().expect("temp dir");
    let one_call = dir.path().join("one_call.replay");
    std::fs::write(&one_call, "new sliding-window 3 1000\nallow rahul 0\n")
        .expect("write the session");
    let output = replay("2", one_call.to_str().expect("a UTF-8 path"));
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.lines().any(|line| line == "true"), "{stdout}");
    assert!(stdout.contains("replica"), "{stdout}");

    // The error says the call's consumption is taken back: the next line
    // sees it back, as an error line changes nothing.
    let then_look = dir.path().join("then_look.replay");
    std::fs::write(
        &then_look,
        "new token-bucket 2 1000\nallow rahul 0\nremaining rahul 10\n",
    )
    .expect("write the session");
    let output = replay("2", then_look.to_str().expect("a UTF-8 path"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{output:?}");
    assert!(lines[1].contains("taken back"), "{stdout}");
    assert_eq!(lines[2], "2", "{stdout}");
    drop(replica);
}

/// A replayed call that Redis holds up for longer than the store's default
/// timeout (100 ms: a busy machine, a stalled Redis) is still decided, and
/// its line prints the decision: a replay is compared line by line with
/// the answers its session should give, so its calls wait up to 2 s, where
/// a stall of 300 ms used to print an error.
#[test]
fn replay_waits_out_a_redis_held_up_past_the_default_timeout() {
    let Some(server) = RedisServer::spawn("replay_waits_out_a_stall") else {
        return;
    };
    let mut child = Command::new(BIN)
        .args(["replay", "--redis", &server.url(), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tollgate");
    // Connected: CLIENT LIST shows replay's connection beside its own.
    let connected = tollgate_redis::testing::wait_for(250, || {
        server.cli(&["CLIENT", "LIST"]).lines().count() >= 2
    });
    assert!(connected, "replay never connected");
    server.stop_process();
    let mut stdin = child.stdin.take().expect("stdin");
    let session = b"new sliding-window 2 1000\nallow a 0\nallow a 1\nallow a 2\n";
    std::io::Write::write_all(&mut stdin, session).expect("write the session");
    drop(stdin);
    // The stall: three times the store's default timeout.
    std::thread::sleep(std::time::Duration::from_millis(300));
    server.continue_process();
    let output = child.wait_with_output().expect("wait");
    assert!(output.status.success(), "{output:?}");
    // The third call is refused: the two held up were counted in Redis.
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "ok\ntrue\ntrue\nfalse\n"
    );
}
