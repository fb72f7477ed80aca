//! A fixed-bucket latency histogram of atomics.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in nanoseconds: 10 µs to 1 s, spaced so
/// that the 2 ms p99 target falls between two bounds.
const BOUNDS_NS: [u64; 13] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    250_000_000,
    1_000_000_000,
];

/// A Prometheus histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Non-cumulative counts; the last one is the `+Inf` overflow.
    buckets: [AtomicU64; BOUNDS_NS.len() + 1],
    sum_ns: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// Records one duration.
    pub fn observe(&self, elapsed: Duration) {
        let ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Appends the `_bucket`, `_sum` and `_count` lines of `name`.
    pub fn render(&self, out: &mut String, name: &str) {
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            match BOUNDS_NS.get(i) {
                Some(&bound) => {
                    let _ = writeln!(
                        out,
                        "{name}_bucket{{le=\"{}\"}} {cumulative}",
                        bound as f64 / 1e9
                    );
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let _ = writeln!(
            out,
            "{name}_sum {}",
            self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count {}", self.count.load(Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_bounds_inclusive() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(10));
        h.observe(Duration::from_micros(11));
        h.observe(Duration::from_secs(5));
        let mut out = String::new();
        h.render(&mut out, "x");
        assert!(out.contains("x_bucket{le=\"0.00001\"} 1\n"));
        assert!(out.contains("x_bucket{le=\"0.000025\"} 2\n"));
        assert!(out.contains("x_bucket{le=\"1\"} 2\n"));
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"));
        assert!(out.contains("x_count 3\n"));
    }
}
