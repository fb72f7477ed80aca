//! Refunds: an abandoned call consumes nothing, even when Redis ran it.
//!
//! A call carries a deadline, so a script that starts after its caller gave
//! up writes nothing ([`crate::deadline`]). But a script can start in time
//! and its reply still reach the store after the caller gave up: Redis
//! writes replies at the end of a pass of its event loop, so a stop of the
//! process (SIGSTOP, a paused VM) or another client's blocking command
//! between the run and the write holds the reply, and so does a slow
//! network on the way back. The caller, meanwhile, answered by its failure
//! policy, or went away (a client that closed its connection).
//!
//! Every decision's reply comes back to a task that outlives its caller (a
//! batch's, [`crate::batch`], or one of its own when the store does not
//! batch), and goes to the caller through a channel (`answer.rs`). When the
//! caller is gone (before the reply is handed over, or after, but before it
//! read it) and the reply says the call consumed, a refund is queued, which
//! one task of the store sends as [`crate::scripts::REFUND`]: each limit's
//! state is put back only if it is still the one the call stored (compare
//! and restore; the script's header says why a blind undo would
//! over-admit).
//!
//! Order matters: a refund finds its state unchanged only once the refunds
//! of the client's later abandoned calls are done. So refunds that arrive
//! together (the replies of one held batch, or of batches released by one
//! read) are sent newest first, and a refund that finds the state changed
//! is kept for a while ([`STALE_KEPT`] of them, for [`STALE_KEPT_US`]) and
//! tried again after a later refund of the same client restores. A refund
//! that still finds the state changed leaves the consumption in place: the
//! client was used by a call the store answered meanwhile, and the error is
//! towards admitting less. (Never under the sliding log, whose undo takes
//! the call's units out of the log whatever was logged after them.) [`crate::CallCounts`] counts each outcome.
//!
//! A caller can also give a call back itself (`give_back`, behind
//! [`tollgate::Store::give_back`]): the same refund, sent at once, for a
//! request of several clients that a later one refused.
//!
//! A reply that never comes (the connection dropped on the way back, or on
//! one node a reply later than [`crate::RESPONSE_TIMEOUT`], 5 s) is taken
//! back the same way, by the receipt its call left ([`crate::lost`]).
//!
//! A refund whose connection drops before its answer may or may not have
//! reached Redis, so it is sent again (`Scripts::refund`, up to 3 times;
//! on a cluster redis-rs sends it again too, and follows its client's slot
//! to another master). It runs once all the same: each refund is sent
//! under an id of its own, and the script keeps its answer under that id,
//! so a copy that finds it answers from it (run twice, the sliding log's
//! undo would take out another request's units logged at the same time).
//!
//! What stays out of reach: the replies of a runtime that shut down first;
//! a refund that Redis refuses (out of memory), or whose connection drops
//! on every send; refunds past [`MAX_QUEUED`] waiting; and what
//! [`crate::lost`] names. Each leaves the consumption in place, counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tollgate::GivenBack;

use redis::Script;

use crate::call::{Arg, Call, Scripts};
use crate::connection::Evalsha;
use crate::keys::KeyLayout;
use crate::RedisStoreError;

mod give_back;
pub(crate) use give_back::give_back;

/// At most this many refunds wait to be sent: replies that all come late
/// (a network that delays every reply past the timeout) must not grow the
/// queue without bound. A refund past it is counted failed.
pub const MAX_QUEUED: usize = 65_536;

/// How long one refund waits for its answer before the next is sent: 5 s.
/// As long as the connections' own [`crate::RESPONSE_TIMEOUT`] (one node's
/// and a cluster's), and kept apart from it: a connection that hangs must
/// not stop every later refund for longer. A refund given up on is counted
/// failed, though Redis may still run it, which is as exact (compare and
/// restore).
pub const REFUND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Refunds that found their state changed, kept to be tried again: at most
/// this many (the oldest go first).
pub const STALE_KEPT: usize = 4_096;

/// How long a refund that found its state changed is kept to be tried
/// again: 10 s (a later refund of the same client comes with the same
/// released replies, well within this).
pub const STALE_KEPT_US: u64 = 10_000_000;

/// What [`crate::scripts::REFUND`] needs to take back one call's
/// consumption: the state keys it consumed from and, per key, the policy,
/// the limit and the two undo numbers the call's reply carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refund {
    /// The client's last-seen key: names the client, for the order of
    /// refunds.
    client: String,
    call: Call,
}

impl Refund {
    /// The refund of `call`, whose reply (after Redis's time) is `reply`;
    /// `None` when the call consumed nothing (refused, late, or only
    /// asking) or the reply does not hold the undo numbers.
    pub(crate) fn of(call: &Call, reply: &[i64]) -> Option<Refund> {
        let limits = call.keys.len().checked_sub(1)?;
        let (&now_used, rest) = reply.get(1..)?.split_first()?;
        let (&allowed, fields) = rest.split_first()?;
        if now_used < 0 || allowed != 1 || fields.len() != 6 * limits {
            return None;
        }
        let Some(&Arg::Number(cost @ 1..)) = call.args.get(1) else {
            return None;
        };
        let (decisions, undo) = fields.split_at(4 * limits);
        let mut keys = Vec::new();
        let mut args = vec![Arg::Number(now_used.unsigned_abs()), Arg::Number(cost)];
        for (i, (decision, undo)) in decisions
            .chunks_exact(4)
            .zip(undo.chunks_exact(2))
            .enumerate()
        {
            if decision[0] != 1 {
                continue;
            }
            keys.push(call.keys.get(1 + i)?.clone());
            args.extend_from_slice(call.args.get(4 + 4 * i..7 + 4 * i)?);
            args.extend([Arg::Signed(undo[0]), Arg::Signed(undo[1])]);
        }
        if keys.is_empty() {
            return None;
        }
        Some(Refund {
            client: call.keys.first()?.clone(),
            call: Call { keys, args },
        })
    }

    /// The refund script's KEYS and ARGV, sent under `id`, an id of its own
    /// ([`crate::receipts::Receipts::refund_id`]): its state keys, then the
    /// key its answer is kept in.
    pub(crate) fn invocation<'a>(&self, script: &'a Script, id: &str) -> Evalsha<'a> {
        let keys = self.call.keys.len() + 1;
        let mut invocation = Evalsha::new(script, keys, self.call.words() + 1);
        for key in &self.call.keys {
            invocation.arg(key);
        }
        invocation.arg(KeyLayout::refund_key(&self.client, id));
        for arg in &self.call.args {
            invocation.arg(arg);
        }
        invocation
    }
}

/// How refunds ended (see [`crate::CallCounts`]).
#[derive(Debug, Default)]
pub(crate) struct RefundCounters {
    pub(crate) restored: AtomicU64,
    pub(crate) stale: AtomicU64,
    pub(crate) failed: AtomicU64,
}

/// A refund numbered in the order its reply came, which is the order Redis
/// ran the calls of one client (one connection to the node that holds its
/// keys, and a batch's calls in order).
type Numbered = (u64, Refund);

#[derive(Default)]
struct Pending {
    /// Refunds waiting to be sent, in the order their replies came.
    queue: Vec<Numbered>,
    /// The next refund's number.
    next: u64,
    /// Refunds that found their state changed, with when (monotonic µs).
    stale: Vec<(u64, Numbered)>,
    /// A task is sending refunds.
    running: bool,
}

/// The refunds of one store's connection, sent by one task at a time.
#[derive(Default)]
pub(crate) struct Refunds {
    pending: Mutex<Pending>,
    pub(crate) counters: RefundCounters,
}

impl Refunds {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether no refund waits to be sent and none is being sent (those
    /// kept after finding their state changed wait for nothing).
    pub(crate) fn is_idle(&self) -> bool {
        let pending = self.lock();
        pending.queue.is_empty() && !pending.running
    }

    /// Counts a refund that could not be sent.
    pub(crate) fn count_failed(&self) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Queues `refund`, and starts the task that sends refunds unless it
    /// runs. Must be called inside a Tokio runtime.
    pub(crate) fn push(&self, scripts: &Arc<Scripts>, refund: Refund) {
        let start = {
            let mut pending = self.lock();
            if pending.queue.len() >= MAX_QUEUED {
                self.count_failed();
                return;
            }
            let number = pending.next;
            pending.next += 1;
            pending.queue.push((number, refund));
            !std::mem::replace(&mut pending.running, true)
        };
        if start {
            tokio::spawn(send(scripts.clone()));
        }
    }
}

/// Sends what is queued, newest first, until the queue is empty. Waits one
/// turn first, so that the other replies of the same read queue theirs.
async fn send(scripts: Arc<Scripts>) {
    let mut place = Running {
        refunds: &scripts.refunds,
        given_back: false,
    };
    tokio::task::yield_now().await;
    loop {
        let group = {
            let mut pending = scripts.refunds.lock();
            if pending.queue.is_empty() {
                // Under the lock that a refund is queued under: the next
                // one starts a task.
                pending.running = false;
                place.given_back = true;
                return;
            }
            std::mem::take(&mut pending.queue)
        };
        for refund in group.into_iter().rev() {
            if send_one(&scripts, &refund).await {
                retry_stale_of(&scripts, &refund.1.client).await;
            }
        }
    }
}

/// The sending task's place, given back if the task ends early (a panic,
/// or the runtime shutting down) so that the next refund starts a task.
struct Running<'a> {
    refunds: &'a Refunds,
    given_back: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.given_back {
            self.refunds.lock().running = false;
        }
    }
}

/// Sends one refund; true when it restored every limit.
async fn send_one(scripts: &Arc<Scripts>, numbered: &Numbered) -> bool {
    matches!(attempt(scripts, numbered).await, Ok(GivenBack::Restored))
}

/// Sends one refund and counts how it ended. One that found a state
/// changed is kept to be tried again.
async fn attempt(
    scripts: &Arc<Scripts>,
    (number, refund): &Numbered,
) -> Result<GivenBack, RedisStoreError> {
    let counters = &scripts.refunds.counters;
    let answer = tokio::time::timeout(REFUND_TIMEOUT, scripts.refund(refund))
        .await
        .unwrap_or(Err(RedisStoreError::Timeout(REFUND_TIMEOUT)));
    match answer {
        Ok(restored) if restored.iter().all(|&r| r == 1) => {
            counters.restored.fetch_add(1, Ordering::Relaxed);
            Ok(GivenBack::Restored)
        }
        Ok(restored) => {
            counters.stale.fetch_add(1, Ordering::Relaxed);
            keep_stale(scripts, (*number, partly(refund, &restored)));
            Ok(GivenBack::Kept)
        }
        Err(error) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            Err(error)
        }
    }
}

/// The part of `refund` whose limits were not restored.
fn partly(refund: &Refund, restored: &[i64]) -> Refund {
    let mut keys = Vec::new();
    let mut args = refund.call.args[..2].to_vec();
    for (i, key) in refund.call.keys.iter().enumerate() {
        if restored.get(i) != Some(&1) {
            keys.push(key.clone());
            args.extend_from_slice(&refund.call.args[2 + 5 * i..7 + 5 * i]);
        }
    }
    Refund {
        client: refund.client.clone(),
        call: Call { keys, args },
    }
}

fn keep_stale(scripts: &Scripts, refund: Numbered) {
    let now_us = scripts.clock.now_us();
    let mut pending = scripts.refunds.lock();
    pending
        .stale
        .retain(|(at, _)| now_us.saturating_sub(*at) < STALE_KEPT_US);
    if pending.stale.len() >= STALE_KEPT {
        pending.stale.remove(0);
    }
    pending.stale.push((now_us, refund));
}

/// Tries `client`'s kept refunds again, newest call first, while they
/// restore: a refund of the client just restored may have been what they
/// waited for.
async fn retry_stale_of(scripts: &Arc<Scripts>, client: &str) {
    loop {
        let next = {
            let mut pending = scripts.refunds.lock();
            let newest = pending
                .stale
                .iter()
                .enumerate()
                .filter(|(_, (_, (_, r)))| r.client == client)
                .max_by_key(|(_, (_, (number, _)))| *number)
                .map(|(at, _)| at);
            let Some(at) = newest else {
                return;
            };
            pending.stale.remove(at).1
        };
        // Counted as stale when first tried: a success now moves it over.
        scripts
            .refunds
            .counters
            .stale
            .fetch_sub(1, Ordering::Relaxed);
        if !send_one(scripts, &next).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
