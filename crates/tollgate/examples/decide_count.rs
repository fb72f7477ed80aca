//! A fixed number of decisions by one of the core benchmark's subjects, for
//! counts that do not depend on the machine's load: run it under
//! `valgrind --tool=callgrind` (instructions) or `--tool=cachegrind
//! --cache-sim=yes` (simulated cache misses) twice, with N and 2N calls, and
//! divide the difference by N (start-up and the warm-up cancel out).
//!
//! ```sh
//! cargo build --release -p tollgate --example decide_count
//! valgrind --tool=callgrind target/release/examples/decide_count token-bucket 100000 1000000
//! ```
//!
//! Arguments: SUBJECT (sliding-window, token-bucket, gcra, governor-keyed),
//! CLIENTS (ids taken round-robin, as in the bench), CALLS. Every id is
//! seen once before the counted calls.

#![allow(missing_docs)]

use std::hint::black_box;

#[path = "../benches/subject.rs"]
mod subject;
use subject::{ids, Subject, SUBJECTS};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, clients, calls] = args.as_slice() else {
        return Err("usage: decide_count SUBJECT CLIENTS CALLS".into());
    };
    if !SUBJECTS.contains(&name.as_str()) {
        return Err(format!("unknown subject {name:?}: one of {SUBJECTS:?}"));
    }
    let number = |what: &str, text: &str| {
        text.parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or(format!("{what} must be a positive integer, got {text:?}"))
    };
    let (clients, calls) = (number("CLIENTS", clients)?, number("CALLS", calls)?);
    let ids = ids(clients as usize);
    let subject = Subject::new(name);
    let mut allowed = 0u64;
    for i in 0..clients + calls {
        let id = &ids[(i % clients) as usize];
        allowed += u64::from(subject.decide(black_box(id), i));
    }
    println!("{name}: {allowed} of {} calls allowed", clients + calls);
    Ok(())
}
