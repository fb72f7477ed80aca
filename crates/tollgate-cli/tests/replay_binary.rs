//! The real `tollgate` binary: every example session, standard input, exit
//! status, and one error line per kind of bad input.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn tollgate(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tollgate binary runs");
    // Written from another thread while this one reads the output, so that
    // neither pipe can fill up and block both processes.
    let writer = stdin.map(|input| {
        let mut pipe = child.stdin.take().expect("piped stdin");
        let input = input.to_owned();
        std::thread::spawn(move || pipe.write_all(input.as_bytes()))
    });
    let output = child.wait_with_output().expect("tollgate finishes");
    if let Some(writer) = writer {
        writer.join().expect("writer thread").expect("write stdin");
    }
    output
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 output")
}

#[test]
fn every_example_session_prints_its_expected_output() {
    let mut sessions: Vec<PathBuf> = std::fs::read_dir(examples())
        .expect("examples/ exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "replay"))
        .collect();
    sessions.sort();
    let names: Vec<String> = sessions
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    for required in ["session1", "session2"] {
        assert!(names.iter().any(|n| n == required), "{names:?}");
    }
    for session in &sessions {
        let expected_path = session.with_extension("expected");
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        let out = tollgate(&["replay", session.to_str().unwrap()], None);
        assert_eq!(stdout(&out), expected, "{}", session.display());
        let has_errors = expected.lines().any(|l| l.starts_with("error:"));
        assert_eq!(
            out.status.code(),
            Some(i32::from(has_errors)),
            "{}",
            session.display()
        );
        assert!(out.stderr.is_empty(), "{}", session.display());
    }
}

#[test]
fn standard_input_when_the_file_is_absent_or_a_dash() {
    let session = std::fs::read_to_string(examples().join("session1.replay")).unwrap();
    let expected = std::fs::read_to_string(examples().join("session1.expected")).unwrap();
    for args in [&["replay"][..], &["replay", "-"][..]] {
        let out = tollgate(args, Some(&session));
        assert_eq!(stdout(&out), expected, "{args:?}");
        assert_eq!(out.status.code(), Some(0), "{args:?}");
    }
}

#[test]
fn an_empty_session_prints_nothing_and_succeeds() {
    let out = tollgate(&["replay"], Some(""));
    assert_eq!(stdout(&out), "");
    assert_eq!(out.status.code(), Some(0));
    let out = tollgate(&["replay", "-"], Some("\n# only a comment\n   \n\t\n"));
    assert_eq!(stdout(&out), "");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_missing_file_is_reported_on_stderr() {
    let out = tollgate(&["replay", "/nonexistent/tollgate/session.replay"], None);
    assert_eq!(stdout(&out), "");
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/tollgate/session.replay"),
        "{err}"
    );
}

#[test]
fn a_file_that_cannot_be_read_is_named_in_the_error() {
    // A directory opens, and fails at the first read.
    let dir = std::env::temp_dir();
    let dir = dir.to_str().expect("utf-8 temp dir");
    let out = tollgate(&["replay", dir], None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!("tollgate replay: cannot read {dir}: ")),
        "{err}"
    );
}

/// Each bad line: its output line, which must start with `error: line N: `
/// and mention every given word.
fn assert_error(session: &str, line: usize, words: &[&str]) {
    let out = tollgate(&["replay"], Some(session));
    assert_eq!(out.status.code(), Some(1), "{session}");
    let text = stdout(&out);
    let prefix = format!("error: line {line}: ");
    let error = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{text}"));
    for word in words {
        assert!(error.contains(word), "{error:?} lacks {word:?}");
    }
}

#[test]
fn each_kind_of_bad_line_names_its_line_and_problem() {
    // Unknown policy: named, with the known ones listed.
    assert_error(
        "new leaky-bucket 3 1000\n",
        1,
        &["leaky-bucket", "sliding-window", "token-bucket"],
    );
    assert_error("new Token-Bucket 3 1000\n", 1, &["Token-Bucket"]);
    // Arguments that cannot work.
    assert_error("new token-bucket 3 1000\n", 1, &["multiple"]);
    assert_error("new sliding-window 0 1000\n", 1, &["limit"]);
    assert_error("new sliding-window 3 0\n", 1, &["window"]);
    // Bad or negative numbers.
    assert_error(
        "new sliding-window -3 1000\n",
        1,
        &["LIMIT", "-3", "negative"],
    );
    assert_error("new sliding-window 3 1e3\n", 1, &["WINDOW_MS", "1e3"]);
    assert_error(
        "new sliding-window 4294967296 1000\n",
        1,
        &["LIMIT", "too large"],
    );
    assert_error(
        "new sliding-window 3 1000\nallow a -1\n",
        2,
        &["NOW_MS", "negative"],
    );
    assert_error(
        "new sliding-window 3 1000\nallow a 1.5\n",
        2,
        &["NOW_MS", "1.5"],
    );
    assert_error(
        "new sliding-window 3 1000\nremaining a 18446744073709551616\n",
        2,
        &["NOW_MS", "too large"],
    );
    // Unknown verb.
    assert_error("new sliding-window 3 1000\nfetch a 1\n", 2, &["fetch"]);
    assert_error("ALLOW a 1\n", 1, &["ALLOW"]);
    // Wrong number of fields.
    assert_error("new sliding-window 3\n", 1, &["new", "3"]);
    assert_error("new sliding-window 3 1000\nallow a\n", 2, &["allow", "2"]);
    assert_error(
        "new sliding-window 3 1000\nremaining a 1 2\n",
        2,
        &["remaining"],
    );
    // A call before any `new`.
    assert_error("allow a 0\n", 1, &["new"]);
    assert_error("# comment\n\nremaining a 0\n", 3, &["new"]);
}

#[test]
fn calls_after_a_failed_new_fail_until_the_next_good_one() {
    let session = "new sliding-window 2 1000\n\
                   allow a 0\n\
                   new sliding-window 2 x\n\
                   allow a 0\n\
                   remaining a 0\n\
                   new gcra 2 1000\n\
                   allow a 0\n\
                   new nope 1 1\n\
                   allow a 0\n\
                   new token-bucket 2 1000\n\
                   allow a 0\n";
    let out = tollgate(&["replay"], Some(session));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 11, "{text}");
    assert_eq!(lines[..2], ["ok", "true"]);
    assert!(lines[2].starts_with("error: line 3: "), "{text}");
    assert!(
        lines[3].starts_with("error: line 4: ") && lines[3].contains("line 3"),
        "{text}"
    );
    assert!(
        lines[4].starts_with("error: line 5: ") && lines[4].contains("line 3"),
        "{text}"
    );
    assert_eq!(lines[5..7], ["ok", "true"], "{text}");
    assert!(lines[7].starts_with("error: line 8: "), "{text}");
    assert!(
        lines[8].starts_with("error: line 9: ") && lines[8].contains("line 8"),
        "{text}"
    );
    // A fresh limiter: client a starts over.
    assert_eq!(lines[9..], ["ok", "true"], "{text}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn blank_and_comment_lines_print_nothing_and_windows_line_ends_work() {
    let session = "\n# comment\nnew sliding-window 1 10\r\n\r\n  # indented comment\nallow a 0\r\n\t\nallow a 5\nremaining a 10";
    let out = tollgate(&["replay"], Some(session));
    assert_eq!(stdout(&out), "ok\ntrue\nfalse\n1\n");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_output_is_complete_even_when_lines_fail() {
    // Many lines, every other one bad: every line answered, in order.
    let mut session = String::from("new token-bucket 1000 1000\n");
    for i in 0..5_000 {
        session.push_str(&format!("allow c{} {i}\nbogus {i}\n", i % 7));
    }
    let out = tollgate(&["replay"], Some(&session));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10_001);
    for (i, pair) in lines[1..].chunks(2).enumerate() {
        assert!(pair[0] == "true" || pair[0] == "false");
        assert!(
            pair[1].starts_with(&format!("error: line {}: ", 2 * i + 3)),
            "{}",
            pair[1]
        );
    }
    assert_eq!(out.status.code(), Some(1));
}
