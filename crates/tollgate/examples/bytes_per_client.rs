//! Memory per client for each policy, two ways:
//!
//! - computed (allocator-independent): the store's slot plus control byte
//!   ([`MemoryStore::bytes_per_client_inline`]), the id's heap bytes (none for an id that fits in the slot), and the
//!   state's own heap bytes (the log's buffer capacity);
//! - measured: the growth of the process's resident memory (Linux
//!   `/proc/self/statm`) while adding N clients, divided by N; this includes
//!   the allocator's rounding and headers and the hash tables' spare capacity.
//!
//! Requests are of cost 1, each at its own millisecond (the sliding log's
//! worst case: requests at one millisecond, or a request of any cost, take
//! one entry), except in the row that says otherwise.
//!
//! Run: `cargo run --release -p tollgate --example bytes_per_client [N]`

use std::any::Any;

use tollgate::policy::{Gcra, SlidingLog, SlidingWindow, TokenBucket};
use tollgate::{Limiter, MemoryStore, Policy};

const LIMIT: u32 = 100;
const WINDOW_MS: u64 = 60_000;

/// Resident memory in bytes, if the platform says.
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn id(i: usize) -> String {
    format!("client-{i:08}")
}

/// Adds `n` clients each making `requests` requests (at distinct
/// milliseconds, or all at one when `one_ms`) and prints both figures.
/// Returns the limiter so that it stays alive: the next case then grows into
/// fresh pages rather than into memory this one freed.
fn report<P: Policy>(
    label: &str,
    policy: P,
    n: usize,
    requests: u32,
    one_ms: bool,
    heap: impl Fn(&P::State) -> usize,
) -> Box<dyn Any> {
    let before = rss_bytes();
    let limiter = Limiter::new(policy);
    for i in 0..n {
        let client = id(i);
        for r in 0..requests {
            let now = if one_ms { 1_000 } else { 1_000 + u64::from(r) };
            limiter.check(&client, now, 1);
        }
    }
    let after = rss_bytes();
    // Read in place (a copy of the state would have a tighter capacity).
    let sample = limiter.store().with_entry(
        &id(0),
        1_000,
        |now| limiter.policy().new_state(now),
        |access| heap(access.state),
    );
    let inline = MemoryStore::<P::State>::bytes_per_client_inline();
    let id_bytes = MemoryStore::<P::State>::id_heap_bytes(&id(0));
    let computed = inline + id_bytes + sample;
    let measured = match (before, after) {
        (Some(b), Some(a)) => format!("{:.1}", a.saturating_sub(b) as f64 / n as f64),
        _ => "n/a".to_owned(),
    };
    let when = if one_ms && requests > 1 {
        " at one ms"
    } else {
        ""
    };
    println!(
        "| {label} | {requests}{when} | {inline} | {id_bytes} | {sample} | {computed} | {measured} |"
    );
    assert_eq!(limiter.clients(), n);
    Box::new(limiter)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    println!(
        "{n} clients (the last row: n / 10), limit {LIMIT}, window {WINDOW_MS} ms, ids of 15 bytes"
    );
    println!();
    println!("| policy | requests per client | slot + ctrl (B) | id heap (B) | state heap (B) | computed (B/client) | RSS delta (B/client) |");
    println!("|---|---|---|---|---|---|---|");
    let bucket = || TokenBucket::new(LIMIT, WINDOW_MS).expect("valid");
    let gcra = || Gcra::new(LIMIT, WINDOW_MS).expect("valid");
    let log = || SlidingWindow::new(LIMIT, WINDOW_MS).expect("valid");
    let log_heap = |s: &SlidingLog| s.heap_bytes();
    let _kept = [
        report("token-bucket", bucket(), n, 1, false, |_| 0),
        report("gcra", gcra(), n, 1, false, |_| 0),
        report("sliding-window", log(), n, 1, false, log_heap),
        report("sliding-window", log(), n, 10, false, log_heap),
        report("sliding-window", log(), n, 10, true, log_heap),
        report("sliding-window", log(), n / 10, LIMIT, false, log_heap),
    ];
}
