//! Starting `serve` and `proxy` on a Redis that cannot serve them as they
//! are: a user without the scripts' permissions stops start-up, an
//! unreachable Redis is reported and answered by the failure policy, a
//! Redis that evicts keys or is a replica is warned of, and
//! `--redis-replicas-to-ack` replaces the file's value; against
//! `redis-server` processes the tests spawn.

mod redis_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_redis::testing::{free_port, RedisServer};
use tollgate_testkit::process::ChildGuard;

use redis_common::*;

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

/// `serve`'s standard error, line by line, read on a thread of its own
/// (serve keeps it open): what it has said so far.
struct Log {
    lines: std::sync::mpsc::Receiver<String>,
    text: String,
}

impl Log {
    /// Follows `serve` once it listens.
    fn of(serve: &mut ChildGuard) -> Self {
        let banner = read_until(serve.stdout.take().expect("stdout"), "listening");
        assert!(banner.contains("listening"), "{banner}");
        let stderr = serve.stderr.take().expect("stderr");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let lines = std::io::BufReader::new(stderr).lines();
            for line in lines.map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            lines,
            text: String::new(),
        }
    }

    /// Reads on until every one of `wanted` was said, for at most 20 s:
    /// what was said.
    fn until(&mut self, wanted: &[&str]) -> &str {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !wanted.iter().all(|w| self.text.contains(w)) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = self.lines.recv_timeout(left) else {
                break;
            };
            self.text.push_str(&line);
            self.text.push('\n');
        }
        &self.text
    }
}

/// A `serve` started while its Redis (an evicting one, `alice` granted as
/// `commands` and with the password `password`) is down, then the Redis
/// started: the Redis, the serve (stopped when dropped), its log, and the
/// temporary directory of its config.
fn serve_before_redis(
    test: &str,
    password: &str,
    commands: &str,
) -> Option<(RedisServer, ChildGuard, Log, tempfile::TempDir)> {
    let password = format!(">{password}");
    let acl = [
        "--user",
        "alice",
        "on",
        &password,
        "~*",
        "&*",
        "+@all",
        commands,
        "--maxmemory-policy",
        "allkeys-lru",
    ];
    let mut redis = RedisServer::spawn_with(test, &acl)?;
    redis.kill();
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("redis://alice:pw@127.0.0.1:{}", redis.port());
    let mut serve = serve_process(&four_per_day(dir.path()), &url, &[]);
    let log = Log::of(&mut serve);
    redis.restart();
    Some((redis, serve, log, dir))
}

/// A Redis down when `serve` starts (the usual order when both start
/// together) is checked once it is up: a user without `EVALSHA`, and an
/// evicting memory policy, are logged then. Before, the start-up checks
/// ran only on a Redis up at start-up, and such a service answered every
/// decision by its failure policy without a word of why.
#[test]
fn a_redis_that_comes_up_after_serve_is_checked_when_it_does() {
    let Some((_redis, _serve, mut log, _dir)) =
        serve_before_redis("late_no_evalsha", "pw", "-evalsha")
    else {
        return;
    };
    let wanted = ["grant it +evalsha", "maxmemory-policy"];
    let said = log.until(&wanted);
    assert!(
        said.contains("Redis is up, but every decision will be refused"),
        "{said}"
    );
    for w in wanted {
        assert!(said.contains(w), "{w}: {said}");
    }
}

/// The same Redis up with a password the service does not have: said once,
/// as such (not as a permission to grant), and checked again until it is
/// put right, when the other checks run.
#[test]
fn a_late_redis_that_refuses_the_password_is_checked_again_once_it_does_not() {
    let Some((redis, _serve, mut log, _dir)) =
        serve_before_redis("late_wrong_password", "other", "+@all")
    else {
        return;
    };
    let refused = "Redis is up, but refuses this service";
    let said = log.until(&[refused]).to_owned();
    assert!(said.contains(refused), "{said}");
    assert!(!said.contains("grant the user"), "{said}");
    assert_eq!(redis.cli(&["ACL", "SETUSER", "alice", ">pw"]).trim(), "OK");
    let said = log.until(&["Redis is up: limit state in Redis", "maxmemory-policy"]);
    assert!(said.contains("allkeys-lru"), "{said}");
    assert_eq!(said.matches(refused).count(), 1, "said once: {said}");
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

/// A user who may not read the memory policy (neither `CONFIG GET` nor
/// `INFO`), the role or, with `replicas_to_ack`, the replicas (the grant
/// the README once recommended) is told
/// what could not be checked and what to grant: before, the policy's
/// refusal was logged at debug level and the role's not at all, so an
/// evicting Redis or a replica went unwarned.
#[test]
fn serve_warns_when_it_cannot_check_the_memory_policy_or_the_role() {
    let user = [
        "--user", "app", "on", ">pw", "~*", "&*", "+@all", "-config", "-info", "-role",
    ];
    let Some(server) = RedisServer::spawn_with("unchecked_redis", &user) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let config = replicas_to_ack(dir.path(), 1);
    let url = format!("redis://app:pw@127.0.0.1:{}", server.port());
    let stderr = start_up_log(serve_process(&config, &url, &[]));
    assert!(stderr.contains("connected"), "{stderr}");
    let policy = "cannot read Redis's maxmemory-policy (grant the user +config|get or +info)";
    assert!(stderr.contains(policy), "{stderr}");
    let role = "cannot ask Redis whether it is a replica (grant the user +role)";
    assert!(stderr.contains(role), "{stderr}");
    let replicas = "cannot read how many replicas Redis has (grant the user +info)";
    assert!(stderr.contains(replicas), "{stderr}");
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
