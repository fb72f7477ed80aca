//! `tollgate simulate` gives the same answers for the same log and config
//! in every run, `max_clients` evictions included: its store spread clients
//! over its shards by a random hash, so a cap near the number of clients
//! evicted different clients, and let different numbers through, from one
//! run to the next (an audit: 600 clients under a cap of 1,000 gave 600 to
//! 654 allowed). The numbers themselves are those of a cap kept per shard
//! (README: a shard can fill before the store does), as in `serve`.

mod simulate_common;

use simulate_common::{tollgate, Dir};

#[test]
fn the_same_log_gives_the_same_answers_in_every_run() {
    const T: u64 = 1_764_669_600_000;
    let config = "default_plan = \"p\"\n\n[store]\nmax_clients = 1000\n\n\
                  [[plans.p]]\nname = \"l\"\npolicy = \"sliding-window\"\nlimit = 1\nwindow = \"1h\"\n";
    // 600 clients, each twice: the second request of each is rejected when
    // its client's state is still there.
    let lines: Vec<String> = (0..1_200u64)
        .map(|i| format!(r#"{{"client":"c{}","time":{}}}"#, i % 600, T + i))
        .collect();
    let dir = Dir::new();
    let plans = dir.write("capped.toml", config);
    let log = dir.write("twice.jsonl", &(lines.join("\n") + "\n"));
    let run = || {
        let out = tollgate(&[
            "simulate", "--json", "--format", "json", "--config", &plans, &log,
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    // Allowed, rejected: the message of a difference (the whole output
    // lists every client).
    let totals = |text: &str| {
        let summary: serde_json::Value = serde_json::from_str(text).expect("JSON");
        (summary["allowed"].clone(), summary["rejected"].clone())
    };
    let first = run();
    for again in 1..6 {
        let other = run();
        assert!(
            other == first,
            "run {again} differs from the first: allowed, rejected {:?} against {:?}",
            totals(&other),
            totals(&first)
        );
    }
}
