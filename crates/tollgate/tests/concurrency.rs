//! Many threads, one limiter: exactly `limit` in total for one client, and
//! each client its own limit.

use std::sync::{Arc, Barrier};

use tollgate::{RateLimiter, POLICY_NAMES};

/// `RateLimiter` can be shared between threads without an outer lock.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<RateLimiter>();
    send_sync::<tollgate::PlanLimiter>();
};

const THREADS: usize = 8;
const CALLS_PER_THREAD: usize = 300;

/// Runs `work(thread_index)` on every thread at once and sums what they return.
fn hammer(
    limiter: &Arc<RateLimiter>,
    work: impl Fn(&RateLimiter, usize) -> usize + Sync,
) -> Vec<usize> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let limiter = Arc::clone(limiter);
                let barrier = &barrier;
                let work = &work;
                s.spawn(move || {
                    barrier.wait();
                    work(&limiter, i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn threads_hammering_one_client_get_exactly_the_limit() {
    for name in POLICY_NAMES {
        for limit in [1, 100, 1_000] {
            let limiter = Arc::new(RateLimiter::new(name, limit, 60_000).unwrap());
            let allowed = hammer(&limiter, |l, _| {
                (0..CALLS_PER_THREAD)
                    .filter(|_| l.allow("hot", 1_000))
                    .count()
            });
            let total: usize = allowed.iter().sum();
            assert_eq!(total, limit as usize, "{name} limit {limit}: {allowed:?}");
            assert_eq!(limiter.remaining("hot", 1_000), 0, "{name}");
        }
    }
}

#[test]
fn threads_with_costs_never_exceed_the_limit() {
    for name in POLICY_NAMES {
        let limiter = Arc::new(RateLimiter::new(name, 1_000, 60_000).unwrap());
        let used = hammer(&limiter, |l, i| {
            let cost = 1 + (i as u32 % 4); // 1..=4
            (0..CALLS_PER_THREAD)
                .filter(|_| l.check("hot", 5, cost).allowed)
                .count()
                * cost as usize
        });
        let total: usize = used.iter().sum();
        assert!(total <= 1_000, "{name}: {total}");
        // Whatever is left is smaller than the smallest cost that was refused.
        assert!(total + 4 > 1_000, "{name}: {total} left too much unused");
        assert_eq!(
            limiter.remaining("hot", 5) as usize,
            1_000 - total,
            "{name}"
        );
    }
}

#[test]
fn threads_on_different_clients_each_get_their_own_limit() {
    for name in POLICY_NAMES {
        let limiter = Arc::new(RateLimiter::new(name, 50, 60_000).unwrap());
        let allowed = hammer(&limiter, |l, i| {
            let mine = format!("client-{i}");
            let shared = "shared";
            (0..CALLS_PER_THREAD)
                .map(|k| {
                    let now = k as u64; // each thread's clock moves on; shared sees them interleaved
                    usize::from(l.allow(&mine, now)) + 1_000 * usize::from(l.allow(shared, 0))
                })
                .sum()
        });
        for (i, a) in allowed.iter().enumerate() {
            assert_eq!(a % 1_000, 50, "{name}: thread {i} got {a}");
        }
        let shared: usize = allowed.iter().map(|a| a / 1_000).sum();
        assert_eq!(shared, 50, "{name}");
        assert_eq!(limiter.clients(), THREADS + 1);
    }
}
