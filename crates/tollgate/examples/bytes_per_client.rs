//! Memory per client for each policy, two ways:
//!
//! - computed (allocator-independent): the store's slot plus control byte
//!   ([`MemoryStore::bytes_per_client_inline`]), the id's bytes, and the
//!   state's own heap bytes (the log's `VecDeque` capacity);
//! - measured: the growth of the process's resident memory (Linux
//!   `/proc/self/statm`) while adding N clients, divided by N; this includes
//!   the allocator's rounding and the hash tables' spare capacity.
//!
//! Run: `cargo run --release -p tollgate --example bytes_per_client [N]`

use tollgate::policy::{Gcra, SlidingWindow, TokenBucket};
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

/// Adds `n` clients each making `requests` requests, and prints both figures.
fn report<P: Policy>(
    label: &str,
    policy: P,
    n: usize,
    requests: u32,
    heap: impl Fn(&P::State) -> usize,
) where
    P::State: Clone,
{
    let before = rss_bytes();
    let limiter = Limiter::new(policy);
    for i in 0..n {
        let client = id(i);
        for _ in 0..requests {
            limiter.check(&client, 1_000, 1);
        }
    }
    let after = rss_bytes();
    let sample = limiter
        .store()
        .get(&id(0))
        .map(|e| heap(&e.state))
        .unwrap_or(0);
    let inline = MemoryStore::<P::State>::bytes_per_client_inline();
    let id_bytes = id(0).len();
    let computed = inline + id_bytes + sample;
    let measured = match (before, after) {
        (Some(b), Some(a)) => format!("{:.1}", a.saturating_sub(b) as f64 / n as f64),
        _ => "n/a".to_owned(),
    };
    println!(
        "| {label} | {requests} | {inline} | {id_bytes} | {sample} | {computed} | {measured} |"
    );
    assert_eq!(limiter.clients(), n);
    drop(limiter);
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    println!("{n} clients, limit {LIMIT}, window {WINDOW_MS} ms, ids of 15 bytes");
    println!();
    println!("| policy | requests per client | slot + ctrl (B) | id (B) | state heap (B) | computed (B/client) | RSS delta (B/client) |");
    println!("|---|---|---|---|---|---|---|");
    let log = || SlidingWindow::new(LIMIT, WINDOW_MS).expect("valid");
    let log_heap = |s: &tollgate::policy::SlidingLog| s.heap_bytes();
    report("sliding-window", log(), n, 1, log_heap);
    report("sliding-window", log(), n, 10, log_heap);
    report("sliding-window", log(), n / 10, LIMIT, log_heap);
    let bucket = TokenBucket::new(LIMIT, WINDOW_MS).expect("valid");
    report("token-bucket", bucket, n, 1, |_| 0);
    report(
        "gcra",
        Gcra::new(LIMIT, WINDOW_MS).expect("valid"),
        n,
        1,
        |_| 0,
    );
}
