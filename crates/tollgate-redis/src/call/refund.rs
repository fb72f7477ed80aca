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
//! tried again after a later refund of the same client restores, and on a
//! timer, for the later refunds another store holds (`refund/stale.rs`). A refund
//! that still finds the state changed leaves the consumption in place: the
//! client was used by a call the store answered meanwhile, and the error is
//! towards admitting less. (Never under the sliding log, whose undo takes
//! the call's units out of the log whatever was logged after them.) [`crate::CallCounts`] counts each outcome.
//!
//! A refund runs only where its call's write is: the script takes back
//! nothing, and writes nothing, on a Redis that does not hold the call's
//! receipt (`receipts.rs`), which the call wrote with its state, so
//! replicated with it. On a cluster, a refund follows its client's slot;
//! after a failover that is a replica promoted before the call's write
//! reached it (the call of an old master that went on deciding, not
//! acknowledged with [`crate::RedisStoreConfig::replicas_to_ack`]), where
//! the sliding log's undo took out units of other, answered requests
//! logged at the same millisecond (over-admission). A refund that finds no
//! receipt is counted stale, and not tried again. The receipt is there for
//! every call that ran: a refund holds its call's receipt open until it
//! ends, so that the store's later calls of the client, which drop the
//! receipts of its calls no longer open, leave it; and the script marks
//! what it restored as taken back in the receipt, so that neither a claim
//! ([`crate::call::lost`]) nor a copy of the call takes it again.
//!
//! A caller can also give a call back itself (`give_back`, behind
//! [`tollgate::Store::give_back`]): the same refund, sent at once, for a
//! request of several clients that a later one refused.
//!
//! A reply that never comes (the connection dropped on the way back, or on
//! one node a reply later than [`crate::RESPONSE_TIMEOUT`], 5 s) is taken
//! back the same way, by the receipt its call left ([`crate::call::lost`]).
//!
//! A refund that meets an error trying again may fix is sent again, every
//! 100 ms, for up to [`crate::call::LOST_KEPT`] (60 s) after it was made:
//! its connection dropped before its answer (it may or may not have reached
//! Redis), Redis refused the connection (restarting), or did not answer
//! within [`crate::call::REFUND_TIMEOUT`]. Meanwhile the queue moves on
//! (`refund/queue.rs`, which sends each client's refunds newest first and
//! up to 64 clients' at once). It runs once all the same: each refund is sent
//! under an id of its own, and the script keeps its answer under that id,
//! so a copy that finds it answers from it (run twice, the sliding log's
//! undo would take out another request's units logged at the same time).
//! On a cluster, redis-rs sends it again too, and follows its client's
//! slot to another master.
//!
//! What stays out of reach: the replies of a runtime that shut down first;
//! a refund that Redis refuses for good (a script error), or cannot be
//! reached for within 60 s; refunds past [`MAX_QUEUED`] waiting; and what
//! [`crate::call::lost`] names. Each leaves the consumption in place, counted.

use crate::evalsha::LuaScript;

use crate::call::{Arg, Call};
use crate::evalsha::Evalsha;
use crate::keys::KeyLayout;

mod give_back;
mod queue;
mod stale;
pub(crate) use give_back::give_back;
pub(crate) use queue::Refunds;

/// At most this many refunds wait to be sent: replies that all come late
/// (a network that delays every reply past the timeout) must not grow the
/// queue without bound. A refund past it is counted failed.
pub const MAX_QUEUED: usize = 65_536;

/// Refunds that found their state changed, kept to be tried again: at most
/// this many (the oldest go first).
pub const STALE_KEPT: usize = 4_096;

/// How long a refund that found its state changed is kept to be tried
/// again: 10 s (a later refund of the same client comes with the same
/// released replies, well within this). It lets go of its call's receipt
/// meanwhile, and is dropped once this old (`refund/stale.rs`).
pub const STALE_KEPT_US: u64 = 10_000_000;

/// What [`crate::scripts::REFUND`] needs to take back one call's
/// consumption: the call's receipt id, the state keys it consumed from
/// and, per key, the policy, the limit, the two undo numbers the call's
/// reply carried and the limit's place in the call's plan. It holds the
/// call's receipt open ([`Call::open`]) until it ends, so that no later
/// call of the store drops the receipt it must find.
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
        let receipt @ Arg::Receipt { .. } = *call.args.get(4 + 4 * limits)? else {
            return None;
        };
        let (decisions, undo) = fields.split_at(4 * limits);
        let mut keys = Vec::new();
        let mut args = vec![
            Arg::Number(now_used.unsigned_abs()),
            Arg::Number(cost),
            receipt,
        ];
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
            args.push(Arg::Number(u64::try_from(1 + i).ok()?));
        }
        if keys.is_empty() {
            return None;
        }
        Some(Refund {
            client: call.keys.first()?.clone(),
            call: Call {
                keys,
                args,
                wait: None,
                open: call.open.clone(),
            },
        })
    }

    /// Stops holding the call's receipt open (a refund kept after a stale
    /// result: `refund/stale.rs` says why).
    pub(crate) fn let_go_of_receipt(&mut self) {
        self.call.open = None;
    }

    /// The refund script's KEYS and ARGV, sent under `id`, an id of its own
    /// ([`crate::receipts::Receipts::refund_id`]): its state keys, the key
    /// its answer is kept in, then the client's receipts key.
    pub(crate) fn invocation<'a>(&self, script: &'a LuaScript, id: &str) -> Evalsha<'a> {
        let keys = self.call.keys.len() + 2;
        let mut invocation = Evalsha::new(script, keys, self.call.words() + 2);
        for key in &self.call.keys {
            invocation.arg(key);
        }
        invocation.arg(KeyLayout::refund_key(&self.client, id));
        invocation.arg(KeyLayout::receipts_key(&self.client));
        for arg in &self.call.args {
            invocation.arg(arg);
        }
        invocation
    }

    /// What is left of it once the limits `restored` says were restored
    /// are taken out (its receipt still open).
    pub(super) fn partly(&self, restored: &[i64]) -> Refund {
        let mut keys = Vec::new();
        let mut args = self.call.args[..3].to_vec();
        for (i, key) in self.call.keys.iter().enumerate() {
            if restored.get(i) != Some(&1) {
                keys.push(key.clone());
                args.extend_from_slice(&self.call.args[3 + 6 * i..9 + 6 * i]);
            }
        }
        Refund {
            client: self.client.clone(),
            call: Call {
                keys,
                args,
                wait: None,
                open: self.call.open.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests;
