//! One thread against two on distinct clients, outside criterion, with the
//! CPU time each thread got: on a shared VM the wall time of two threads
//! says little when a neighbour holds one of the cores, while the CPU time
//! per decision (Linux `/proc/thread-self/schedstat`) still shows what a
//! decision costs a core.
//!
//! Three rows, each the median of ROUNDS runs of 4,000,000 decisions (the
//! bench's workload, `benches/subject.rs`): one thread on one limiter; two
//! threads on one limiter (thread `t` takes the ids at `t`, `t + 2`, ...,
//! as the bench's two-thread rows do); two threads on a limiter each (the
//! same ids, but no line of one store is ever written by both threads).
//!
//! ```sh
//! cargo build --release -p tollgate --example thread_scaling
//! target/release/examples/thread_scaling token-bucket 100000 9
//! ```

#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Instant;

#[path = "../benches/subject.rs"]
mod subject;
use subject::{ids, Subject, SUBJECTS};

const CALLS: u64 = 4_000_000;

/// CPU time the calling thread has had, in ns (0 where Linux does not say).
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `calls` decisions over `threads` threads, thread `t` on `subjects[t]`
/// (cycled): (wall ns per decision, CPU ns per decision summed over threads).
fn run(subjects: &[&Subject], ids: &[String], threads: u64, calls: u64) -> (f64, f64) {
    let per_thread = calls / threads;
    let start = Instant::now();
    let cpu: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let subject = subjects[t as usize % subjects.len()];
                s.spawn(move || {
                    let before = cpu_ns();
                    for k in 0..per_thread {
                        let i = k * threads + t;
                        let id = &ids[(i % ids.len() as u64) as usize];
                        black_box(subject.decide(black_box(id), i));
                    }
                    cpu_ns() - before
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    let decisions = (per_thread * threads) as f64;
    (
        start.elapsed().as_nanos() as f64 / decisions,
        cpu as f64 / decisions,
    )
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, clients, rounds] = args.as_slice() else {
        return Err("usage: thread_scaling SUBJECT CLIENTS ROUNDS".into());
    };
    if !SUBJECTS.contains(&name.as_str()) {
        return Err(format!("unknown subject {name:?}: one of {SUBJECTS:?}"));
    }
    let number = |what: &str, text: &str| {
        text.parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or(format!("{what} must be a positive integer, got {text:?}"))
    };
    let (clients, rounds) = (number("CLIENTS", clients)?, number("ROUNDS", rounds)?);
    let ids = ids(clients);
    let shared = Subject::new(name);
    let (first, second) = (Subject::new(name), Subject::new(name));
    // Every id seen once by every limiter before anything is timed.
    run(&[&shared], &ids, 1, 2 * clients as u64);
    run(&[&first, &second], &ids, 2, 2 * clients as u64);
    let mut rows: [Vec<(f64, f64)>; 3] = Default::default();
    for _ in 0..rounds {
        rows[0].push(run(&[&shared], &ids, 1, CALLS));
        rows[1].push(run(&[&shared], &ids, 2, CALLS));
        rows[2].push(run(&[&first, &second], &ids, 2, CALLS));
    }
    let labels = [
        "one thread",
        "two threads, one limiter",
        "two threads, a limiter each",
    ];
    println!("{name}, {clients} clients, medians of {rounds} rounds: wall ns per decision / CPU ns per decision (all threads)");
    for (label, row) in labels.iter().zip(rows) {
        let wall = median(row.iter().map(|r| r.0).collect());
        let cpu = median(row.iter().map(|r| r.1).collect());
        println!("  {label:28} {wall:7.1} / {cpu:7.1}");
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("  load average after: {}", load.trim());
    Ok(())
}
