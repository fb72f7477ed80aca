//! `tollgate replay --summary`: counts and rate on standard error, standard
//! output byte for byte as without it, and no progress bar when standard
//! error is not a terminal.

use std::path::Path;
use std::process::{Command, Output};

use tollgate_cli::replay::{self, Memory, Summary};

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .output()
        .expect("the tollgate binary runs")
}

const SESSION: &str = "# a comment\nnew token-bucket 2 1000\nallow a 0\nallow a 1\nallow a 2\n\
remaining a 3\nbogus line\n\nallow b 5\n";

#[test]
fn the_summary_counts_lines_answers_and_errors() {
    let mut out = Vec::new();
    let summary = replay::replay(SESSION.as_bytes(), &mut out, &mut Memory::default()).unwrap();
    assert_eq!(
        summary,
        Summary {
            lines: 9,
            answered: 6,
            failed: 1,
            allowed: 3,
            rejected: 1,
            interrupted: false,
        }
    );
    assert_eq!(
        summary.render(2_500),
        "replay: 9 lines, 3 allowed, 1 rejected, 1 errors in 2.500 s (3 lines/s)\n"
    );
    // No time elapsed (a fast run): no rate made up (it said 9000 lines/s,
    // taken over 1 ms), and never a division by 0.
    assert!(summary
        .render(0)
        .ends_with("in 0.000 s (under a millisecond: too fast to give a rate)\n"));
}

#[test]
fn summary_goes_to_stderr_and_stdout_is_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.replay");
    std::fs::write(&file, SESSION).unwrap();
    let file = file.to_str().unwrap();
    let plain = tollgate(&["replay", file]);
    let with_summary = tollgate(&["replay", "--summary", file]);
    assert_eq!(plain.stdout, with_summary.stdout);
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "ok\ntrue\ntrue\nfalse\n0\nerror: line 7: unknown call \"bogus\": expected new, allow or remaining\ntrue\n"
    );
    assert_eq!(plain.status.code(), Some(1));
    assert_eq!(with_summary.status.code(), Some(1));
    // Standard error is a pipe here: no progress bar, no escape codes.
    assert!(
        plain.stderr.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let stderr = String::from_utf8(with_summary.stderr).unwrap();
    assert!(
        stderr.starts_with("replay: 9 lines, 3 allowed, 1 rejected, 1 errors in "),
        "{stderr:?}"
    );
    assert!(
        (stderr.ends_with(" lines/s)\n") || stderr.ends_with(" give a rate)\n"))
            && stderr.lines().count() == 1,
        "{stderr:?}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

#[test]
fn the_example_sessions_print_the_same_with_summary() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for name in ["session1", "session2", "gcra", "errors"] {
        let session = examples.join(format!("{name}.replay"));
        let expected = std::fs::read(examples.join(format!("{name}.expected"))).unwrap();
        let out = tollgate(&["replay", "--summary", session.to_str().unwrap()]);
        assert_eq!(out.stdout, expected, "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("replay: "));
    }
}

/// On a terminal (a pseudo-terminal from util-linux's `script`), standard
/// error shows the bar while standard output still gets exactly the answers.
#[test]
fn a_terminal_gets_a_progress_bar_and_stdout_stays_the_same() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED: `script` (util-linux) is not installed, no pseudo-terminal to test with"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut session = String::from("new sliding-window 5 1000\n");
    for i in 0..20_000 {
        session.push_str(&format!("allow c{} {i}\n", i % 100));
    }
    let file = dir.path().join("long.replay");
    std::fs::write(&file, &session).unwrap();
    let out_file = dir.path().join("out.txt");
    let shell = format!(
        "'{}' replay {} > {}",
        env!("CARGO_BIN_EXE_tollgate"),
        file.display(),
        out_file.display()
    );
    let terminal = Command::new("script")
        .args(["-qec", &shell, "/dev/null"])
        .output()
        .expect("script runs");
    assert!(terminal.status.success(), "{terminal:?}");
    let drawn = String::from_utf8_lossy(&terminal.stdout);
    assert!(
        drawn.contains("lines") && drawn.contains("KiB"),
        "{drawn:?}"
    );
    let plain = tollgate(&["replay", file.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out_file).unwrap(), plain.stdout);
    assert!(plain.stderr.is_empty());
}
