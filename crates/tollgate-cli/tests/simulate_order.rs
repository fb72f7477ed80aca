//! `tollgate simulate` on a log whose times go back (two servers' logs
//! joined one after the other, a clock stepped back): every request is
//! decided as the contract says, at its own time or at the latest time seen
//! for its client, however many requests of others came in between.

mod simulate_common;

use simulate_common::{tollgate, Dir};

/// One request a second per client under `policy`.
fn config(policy: &str) -> String {
    format!(
        "default_plan = \"p\"\n\n[[plans.p]]\nname = \"l\"\npolicy = \"{policy}\"\nlimit = 1\nwindow = \"1s\"\n"
    )
}

#[test]
fn a_client_seen_again_earlier_than_others_is_still_held_to_its_limit() {
    const T: u64 = 1_764_669_600_000;
    // A, then 16 requests of B 20 s later, then A again half a second
    // after its first request: 2 requests in one second, so rejected, as
    // `tollgate replay` and the contract say; B's requests change nothing
    // of it.
    let mut lines = vec![format!(r#"{{"client":"A","time":{T}}}"#)];
    lines.extend((0..16).map(|_| format!(r#"{{"client":"B","time":{}}}"#, T + 20_000)));
    lines.push(format!(r#"{{"client":"A","time":{}}}"#, T + 500));
    for policy in ["sliding-window", "gcra", "token-bucket"] {
        let dir = Dir::new();
        let plans = dir.write("one.toml", &config(policy));
        let log = dir.write("back.jsonl", &(lines.join("\n") + "\n"));
        let out = tollgate(&[
            "simulate", "--json", "--format", "json", "--config", &plans, &log,
        ]);
        assert!(out.status.success(), "{out:?}");
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rejected = |client: &str| {
            summary["clients"]
                .as_array()
                .unwrap()
                .iter()
                .find(|row| row["client"] == client)
                .map_or(0, |row| row["rejected"].as_u64().unwrap())
        };
        assert_eq!(
            (rejected("A"), rejected("B")),
            (1, 15),
            "{policy}: {summary}"
        );
    }
}
