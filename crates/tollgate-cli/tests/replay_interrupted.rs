//! `tollgate replay --redis` stopped by ctrl-c (SIGINT) or SIGTERM prints
//! every answer Redis gave before it exits (130, 143): its output is
//! buffered, and the signal's default action lost up to 64 KiB of answers,
//! calls Redis had counted (an audit: 0 lines printed, 2,952 counted).

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use tollgate_redis::testing::RedisServer;
use tollgate_testkit::process::ChildGuard;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

/// A limit no replay here reaches, over a day.
const NEW: &str = "new sliding-window 1000000 86400000\n";

/// Replays `session` with `--redis-prefix prefix`; its standard output.
fn replay(redis: &RedisServer, prefix: &str, session: &str) -> String {
    let mut child = ChildGuard::spawn(
        Command::new(BIN)
            .args(["replay", "--redis", &redis.url(), "--redis-prefix", prefix])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    )
    .expect("tollgate replay runs");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(session.as_bytes())
        .expect("the session sent");
    drop(stdin);
    let mut out = String::new();
    let mut stdout = child.stdout.take().expect("piped stdout");
    stdout.read_to_string(&mut out).expect("the answers");
    assert!(child.wait().expect("replay ends").success(), "{out}");
    out
}

fn interrupted_by(signal: &str, status: i32, prefix: &str) {
    let Some(redis) = RedisServer::spawn("replay_interrupted") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("long.replay");
    // 400,000 calls: a minute or more on Redis, stopped after a second.
    let mut session = String::from(NEW);
    for i in 0..400_000u64 {
        session.push_str(&format!("allow c {}\n", i / 1_000));
    }
    std::fs::write(&path, session).expect("write the session");
    let mut child = ChildGuard::spawn(
        Command::new(BIN)
            .args(["replay", "--redis", &redis.url(), "--redis-prefix", prefix])
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .expect("tollgate replay runs");
    let mut stdout = child.stdout.take().expect("piped stdout");
    // The first buffer of answers: the replay is well under way.
    let mut printed = vec![0u8; 1];
    stdout.read_exact(&mut printed).expect("a first answer");
    child.signal(signal);
    stdout
        .read_to_end(&mut printed)
        .expect("the rest of the answers");
    let printed = String::from_utf8(printed).expect("UTF-8 answers");
    let allowed = printed.lines().filter(|line| *line == "true").count();
    let code = child.wait().expect("replay ends").code();
    assert_eq!(code, Some(status), "{signal}");
    assert!(allowed < 400_000, "{signal}: the replay ran to its end");
    let used = replay(&redis, prefix, &format!("{NEW}remaining c 400\n"));
    let remaining: usize = used
        .lines()
        .nth(1)
        .expect("an answer")
        .parse()
        .expect("a number");
    assert_eq!(
        allowed,
        1_000_000 - remaining,
        "{signal}: answers printed against calls Redis counted"
    );
}

#[test]
fn ctrl_c_prints_every_answer_redis_gave() {
    interrupted_by("INT", 130, "interrupted-int");
}

#[test]
fn sigterm_prints_every_answer_redis_gave() {
    interrupted_by("TERM", 143, "interrupted-term");
}

/// A replay waiting on a quiet standard input has printed every answer
/// (its output is flushed before it waits), and ctrl-c ends it at once:
/// with the signal only noted for the next line, the first ctrl-c was lost
/// on a replay that no line would come to (a review).
#[test]
fn ctrl_c_ends_a_replay_waiting_for_input_with_its_answers_printed() {
    use std::io::{BufRead, BufReader};
    use std::time::{Duration, Instant};

    let mut child = ChildGuard::spawn(
        Command::new(BIN)
            .args(["replay", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )
    .expect("tollgate replay runs");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(b"new sliding-window 2 1000\nallow c 1\nallow c 2\nallow c 3\n")
        .expect("the lines sent");
    // Read on a thread of its own, so that answers left unflushed fail
    // the test (after 10 s) rather than hang it.
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let (lines, answers) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let printed: Vec<String> = (0..4)
        .map(|n| {
            answers
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("answer {n} not printed while waiting for input"))
        })
        .collect();
    assert_eq!(printed, ["ok", "true", "true", "false"]);
    child.signal("INT");
    // Bounded: 10 s, polled every 20 ms; standard input stays open.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still waiting for input after ctrl-c"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    drop(stdin);
}
