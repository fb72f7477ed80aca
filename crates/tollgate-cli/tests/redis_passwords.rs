//! The real `tollgate` binary never shows the password of a Redis URL it
//! refuses: not in `check`'s error (its message nor the line it quotes),
//! not in `serve`, `proxy` or `replay`'s error for a bad `--redis` or
//! `--redis-cluster`, not in serve's log of a refused reload. Waits are
//! bounded loops on real events (a line logged), never sleeps.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use tollgate_testkit::process::{ChildGuard, Log};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

const PLAN: &str =
    "[[plans.basic]]\nname = \"1m\"\npolicy = \"sliding-window\"\nlimit = 5\nwindow = \"1m\"\n";

/// A URL whose port is not one, with the password `s3cret`.
const BAD_URL: &str = "redis://alice:s3cret@127.0.0.1:notaport";

fn tollgate(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn check_shows_a_bad_url_at_its_line_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    for store in [
        format!("url = \"{BAD_URL}\""),
        format!("cluster = [\"redis://h:7000\", \"{BAD_URL}\"]"),
    ] {
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, format!("[store]\n{store}\n{PLAN}")).unwrap();
        let out = tollgate(&["check", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("line 2"), "{stderr}");
        assert!(stderr.contains("alice:***@127.0.0.1:notaport"), "{stderr}");
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
}

#[test]
fn serve_proxy_and_replay_refuse_a_bad_redis_flag_without_its_password() {
    let proxy = [
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "http://127.0.0.1:9",
    ];
    let serve = ["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"];
    for command in [&serve[..], &proxy[..], &["replay"][..]] {
        for flags in [
            ["--redis", BAD_URL],
            ["--redis", "http://alice:s3cret@127.0.0.1:6379"],
            // A raw comma in a password cuts the URL in two.
            ["--redis-cluster", "redis://dan:s3,cret@127.0.0.1:7000"],
        ] {
            let out = tollgate(&[command, &flags[..]].concat());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command:?} {flags:?}: {stderr}");
            assert!(stderr.contains("redis"), "{stderr}");
            assert!(!stderr.contains("s3cret"), "{stderr}");
            assert!(!stderr.contains(":s3"), "{stderr}");
            assert!(!stderr.contains("cret@"), "{stderr}");
        }
    }
}

/// Writes `text` to `path` whole (write, then rename), as editors do.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_reload_refused_for_a_bad_url_logs_no_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    write(&path, PLAN);
    let mut child = ChildGuard::spawn(
        Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--grpc-listen", "off"])
            .args(["--config", path.to_str().unwrap()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )
    .unwrap();
    let log = Log::read(child.stderr.take().unwrap());
    // Listening (the banner's last line) before the file changes.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("/v1/auth") {
        line.clear();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "serve exited");
    }

    write(&path, &format!("[store]\nurl = \"{BAD_URL}\"\n{PLAN}"));
    child.signal("HUP");
    log.wait_for("config reload refused");

    child.signal("TERM");
    assert!(child.wait().unwrap().success());
    let _ = stdout.read_to_string(&mut String::new());
    let log = log.finish();
    assert!(log.contains("alice:***@127.0.0.1:notaport"), "{log}");
    assert!(!log.contains("s3cret"), "{log}");
}
