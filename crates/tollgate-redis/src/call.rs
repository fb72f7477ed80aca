//! Sending decisions to Redis: one call of the plan script alone, or several
//! in one call of the batch script ([`crate::scripts::BATCH`]), with the
//! reply split back into each call's own answer or error.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

pub(crate) use crate::arg::Arg;
use crate::connection::Connection;
use crate::deadline::RedisClock;
use crate::evalsha::{Evalsha, LuaScript};
use crate::keys::KeyLayout;
use crate::receipts::{OpenReceipt, Receipts};
use crate::replicas::{Acked, ReplicaWait};
use crate::settle::Outstanding;
use crate::RedisStoreError;
use lost::LostCalls;
use refund::{Refund, Refunds};

pub(crate) mod answer;
mod batched;
mod claim;
pub mod lost;
pub mod refund;
mod replicated;
mod resend;
pub(crate) use batched::Batched;
pub(crate) use claim::Claimed;
pub(crate) use resend::resend_after;
use resend::started_late;

/// One script call's KEYS and ARGV: a decision's, of [`crate::scripts::PLAN`]
/// (or an inspection's, of [`crate::scripts::INSPECT`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The client's last-seen key, then one state key per limit.
    pub(crate) keys: Vec<String>,
    /// now, cost, expiry margin, deadline, then four per limit, then the
    /// call's receipt id and its watermark ([`crate::receipts`]).
    /// An inspection's: now, then three per limit.
    pub(crate) args: Vec<Arg>,
    /// The replicas that must hold a decision's writes before it is
    /// answered ([`crate::replicas`]); `None` for every other call.
    pub(crate) wait: Option<ReplicaWait>,
    /// A decision's receipt, open while the call, a clone of it or a refund
    /// made of it lives ([`crate::receipts`]): until its reply is read, its
    /// claim ends, or its refund ends; `None` for every other call.
    pub(crate) open: Option<OpenReceipt>,
}

impl Call {
    /// Its keys and arguments, counted together.
    pub(crate) fn words(&self) -> usize {
        self.keys.len() + self.args.len()
    }

    /// `script` called with its keys and arguments.
    pub(crate) fn invocation<'a>(&self, script: &'a LuaScript) -> Evalsha<'a> {
        let mut invocation = Evalsha::new(script, self.keys.len(), self.words());
        self.write_to(&mut invocation);
        invocation
    }

    /// The plan script called with its keys, the client's receipts key
    /// (declared with them: every key a decision touches, `plan.lua`) and
    /// its arguments.
    pub(crate) fn decision<'a>(&self, plan: &'a LuaScript) -> Evalsha<'a> {
        let mut invocation = Evalsha::new(plan, self.keys.len() + 1, self.words() + 1);
        for key in &self.keys {
            invocation.arg(key);
        }
        let seen = self.keys.first().map_or("", String::as_str);
        invocation.arg(KeyLayout::receipts_key(seen));
        for arg in &self.args {
            invocation.arg(arg);
        }
        invocation
    }

    /// Appends its keys, then its arguments.
    fn write_to(&self, invocation: &mut Evalsha<'_>) {
        for key in &self.keys {
            invocation.arg(key);
        }
        for arg in &self.args {
            invocation.arg(arg);
        }
    }
}

/// One call's reply as the plan script gives it (`redis_time_us` first), or
/// its error, classified as if the call had been sent alone.
pub(crate) type CallReply = Result<Vec<i64>, RedisStoreError>;

/// How many decisions the store sent to Redis, and in how many script calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Decisions sent to Redis (each in a call alone or in a batch).
    pub decisions: u64,
    /// Script calls (EVALSHA) that carried them: `decisions / calls` is the
    /// mean batch size, 1 when nothing was batched.
    pub calls: u64,
    /// Of those calls, the ones that carried more than one decision.
    pub batches: u64,
    /// Decisions that consumed, but whose caller had given up (timed out,
    /// or gone) before the answer came, or whose caller gave them back
    /// ([`tollgate::Store::give_back`]: another client of its request
    /// refused), taken back in full ([`crate::call::refund`]).
    pub refunded: u64,
    /// Such decisions that could not be taken back because the client's
    /// state had changed since (another call used it), or because the
    /// master the refund reached does not hold the call's write (a replica
    /// promoted before it arrived): their consumption stays, an error
    /// towards admitting less.
    pub refunds_stale: u64,
    /// Of the refunds that found the state changed, those that restored on
    /// a later try (`call/refund/stale.rs`): counted in [`Self::refunded`]
    /// since, and no longer in [`Self::refunds_stale`], which so goes down
    /// by one each time. Never goes down: with it, the refunds that found
    /// the state changed first are `refunds_stale + refunds_restored_late`,
    /// and those restored at once `refunded - refunds_restored_late`, both
    /// counters (as `/metrics` shows them).
    pub refunds_restored_late: u64,
    /// Such decisions whose refund Redis refused or never answered: their
    /// consumption stays.
    pub refunds_failed: u64,
    /// Refunds not ended yet (a gauge): queued, being sent, or waiting to
    /// be sent again because Redis could not be reached (for up to
    /// [`crate::call::LOST_KEPT`]); each ends as one of the three above.
    pub refunds_pending: u64,
    /// Decisions of cost 1 or more whose reply never came (the connection
    /// dropped after they were sent, say), looked up by their receipt once
    /// their deadline passed ([`crate::call::lost`]); those that had consumed are
    /// refunded, and counted above as such.
    pub replies_lost: u64,
    /// Decisions that consumed but that fewer replicas than
    /// [`crate::RedisStoreConfig::replicas_to_ack`] acknowledged in time
    /// ([`crate::replicas`]): refunded (and counted above as such), and
    /// answered by the failure policy.
    pub not_replicated: u64,
}

#[derive(Debug, Default)]
struct Counters {
    decisions: AtomicU64,
    calls: AtomicU64,
    batches: AtomicU64,
    not_replicated: AtomicU64,
}

/// At most this many take-backs (clients' refunds, and claims of lost
/// calls) are on their way to Redis at once, the two together: a burst of
/// them (the replies of a Redis stopped for a second, all late; the calls in
/// flight on a connection that dropped) queues at most this many calls
/// ahead of the decisions on the connection, as one batch of
/// [`crate::RedisStoreConfig::batch_max`]'s default does, where sending
/// them all at once could hold the decisions behind them past their
/// timeout.
pub(crate) const TAKE_BACKS_AT_ONCE: usize = 64;

/// How long one refund waits for its answer before the next is sent: 5 s.
/// As long as the connections' own [`crate::RESPONSE_TIMEOUT`] (one node's
/// and a cluster's), and kept apart from it: a connection that hangs must
/// not stop every later refund for longer. A refund given up on is sent
/// again later under the same id, so whichever copy Redis runs first is
/// the one that acts.
pub const REFUND_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a lost call's claim is tried again while Redis cannot be
/// reached: 60 s, enough for a restart or a failover.
pub const LOST_KEPT: Duration = Duration::from_secs(60);

/// The longest pause between two tries of a claim: short, since a claim
/// waiting keeps its store's receipts from being dropped (and a Redis
/// that refuses connections answers at once).
pub(crate) const MOST_BETWEEN_TRIES: Duration = Duration::from_millis(100);

/// The connection, the two decision scripts and the refund script, shared
/// by every clone of a store and by its batcher.
pub(crate) struct Scripts {
    pub(crate) connection: Connection,
    pub(crate) plan: LuaScript,
    batch: LuaScript,
    refund: LuaScript,
    claim: LuaScript,
    pub(crate) clock: Arc<RedisClock>,
    counters: Counters,
    pub(crate) refunds: Refunds,
    pub(crate) lost: LostCalls,
    /// One permit per take-back on its way ([`TAKE_BACKS_AT_ONCE`]): a
    /// client's refunds hold one while their task sends them (it never
    /// waits in place: refunds to send again go back to the queue), a claim
    /// only while it is sent (its task waits in place for deadlines, or for
    /// Redis), so that a client waiting on a master that is down holds back
    /// no other's. A caller's own give-back takes none: it is answered as
    /// its caller waits.
    pub(crate) take_backs: Semaphore,
    pub(crate) receipts: Arc<Receipts>,
    /// Calls and give-backs not answered yet ([`crate::settle`]).
    pub(crate) outstanding: Arc<Outstanding>,
    /// The runtime the store was made on, where its tasks run
    /// ([`crate::connection::home`]).
    home: Handle,
}

impl Scripts {
    pub(crate) fn new(connection: Connection, clock: Arc<RedisClock>, home: Handle) -> Self {
        Self {
            connection,
            plan: LuaScript::new(crate::scripts::PLAN),
            batch: LuaScript::new(crate::scripts::BATCH),
            refund: LuaScript::new(crate::scripts::REFUND),
            claim: LuaScript::new(crate::scripts::CLAIM),
            clock,
            counters: Counters::default(),
            refunds: Refunds::default(),
            lost: LostCalls::default(),
            take_backs: Semaphore::new(TAKE_BACKS_AT_ONCE),
            receipts: Arc::new(Receipts::new()),
            outstanding: Arc::default(),
            home,
        }
    }

    /// Runs `task` on the store's home runtime ([`crate::connection::home`]),
    /// whichever runtime the caller is on: every task the store starts for
    /// its calls goes through here, so none ends with a caller's runtime.
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.home.spawn(task)
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> CallCounts {
        let refunds = &self.refunds.counters;
        CallCounts {
            decisions: self.counters.decisions.load(Ordering::Relaxed),
            calls: self.counters.calls.load(Ordering::Relaxed),
            batches: self.counters.batches.load(Ordering::Relaxed),
            refunded: refunds.restored.load(Ordering::Relaxed),
            refunds_stale: refunds.stale.load(Ordering::Relaxed),
            refunds_restored_late: refunds.restored_late.load(Ordering::Relaxed),
            refunds_failed: refunds.failed.load(Ordering::Relaxed),
            refunds_pending: refunds.pending.load(Ordering::Relaxed),
            replies_lost: self.lost.queued.load(Ordering::Relaxed),
            not_replicated: self.counters.not_replicated.load(Ordering::Relaxed),
        }
    }

    /// Counts a decision that consumed but too few replicas acknowledged.
    pub(crate) fn count_not_replicated(&self) {
        self.counters.not_replicated.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends `call` alone on `connection` from a task of its own (on the
    /// home runtime), so that its reply is read even when the caller gives
    /// up first (and then refunded: see [`crate::call::answer`]).
    pub(crate) async fn one_detached(
        self: &Arc<Self>,
        connection: &Connection,
        call: Call,
    ) -> CallReply {
        let (answer, answered) = answer::channel(self);
        let scripts = self.clone();
        let connection = connection.clone();
        self.spawn(async move {
            // A caller gone before the call left: nothing to send.
            if answer.is_closed() {
                return;
            }
            let reply = scripts.one(&connection, &call).await;
            answer.send(&scripts, call, reply);
        });
        answered.reply().await
    }

    /// Sends one refund under `id`, its own ([`crate::call::refund`]): per limit,
    /// 1 restored, 0 changed since.
    pub(crate) async fn refund(
        &self,
        refund: &Refund,
        id: &str,
    ) -> Result<Vec<i64>, RedisStoreError> {
        let invocation = refund.invocation(&self.refund, id);
        self.connection
            .invoke(&invocation)
            .await
            .map_err(script_error)
    }

    /// Sends `call` alone on `connection` (the store's own, or a master's
    /// lane: [`Connection::lane`]), as the plan script.
    pub(crate) async fn one(self: &Arc<Self>, connection: &Connection, call: &Call) -> CallReply {
        let invocation = call.decision(&self.plan);
        self.count(1);
        let sent_us = self.clock.now_us();
        let sent = connection.invoke_acked(&invocation, call.wait).await;
        let (reply, acked): (Vec<i64>, Acked) = match sent {
            Err(dropped) if resend_after(connection, &dropped) => {
                let again = connection.invoke_acked::<Vec<i64>>(&invocation, call.wait);
                match again.await {
                    Ok((reply, acked)) if !started_late(&reply) => (reply, acked),
                    Ok(_) => return Err(script_error(dropped)),
                    Err(again) => return Err(self.resend_failed(&[call], dropped, again)),
                }
            }
            sent => sent.map_err(script_error)?,
        };
        self.record(sent_us, &reply);
        acked.answer(self, call, reply)
    }

    /// Sends `calls` (at least two) in one call of the batch script on
    /// `connection`, to the node that holds the first call's keys: each
    /// call's own reply or error, in order ([`Batched::Elsewhere`] for a
    /// call whose keys another master of a cluster holds, or that its slot
    /// moving left on two masters); or the error of the whole call
    /// (connection lost, BUSY, ...), which every one of them then meets.
    pub(crate) async fn many(
        self: &Arc<Self>,
        connection: &Connection,
        calls: &[&Call],
    ) -> Result<Vec<Batched>, RedisStoreError> {
        let words = calls.iter().map(|c| 1 + c.words()).sum::<usize>();
        let mut invocation = Evalsha::new(&self.batch, 1, 3 + words);
        invocation.arg(
            calls
                .first()
                .and_then(|c| c.keys.first())
                .map_or("", String::as_str),
        );
        invocation.arg(u8::from(connection.is_cluster()));
        invocation.arg(calls.len());
        for call in calls {
            invocation.arg(call.keys.len().saturating_sub(1));
            call.write_to(&mut invocation);
        }
        self.count(calls.len());
        let sent_us = self.clock.now_us();
        let wait = replicated::strictest(calls.iter().copied());
        let sent = connection.invoke_acked(&invocation, wait).await;
        let (reply, acked, dropped): (Value, Acked, _) = match sent {
            Err(dropped) if resend_after(connection, &dropped) => {
                match connection.invoke_acked(&invocation, wait).await {
                    Ok((reply, acked)) => (reply, acked, Some(script_error(dropped))),
                    Err(again) => return Err(self.resend_failed(calls, dropped, again)),
                }
            }
            sent => {
                let (reply, acked) = sent.map_err(script_error)?;
                (reply, acked, None)
            }
        };
        let mut replies = batched::answers(reply, calls.len())?;
        if let Some(dropped) = dropped {
            for reply in &mut replies {
                if matches!(reply, Batched::Answered(Ok(r)) if started_late(r)) {
                    *reply = Batched::Answered(Err(dropped.clone()));
                }
            }
        }
        if let Some(Batched::Answered(Ok(first))) = replies
            .iter()
            .find(|r| matches!(r, Batched::Answered(Ok(_))))
        {
            self.record(sent_us, first);
        }
        Ok(calls
            .iter()
            .zip(replies)
            .map(|(call, reply)| match reply {
                Batched::Answered(Ok(reply)) => Batched::Answered(acked.answer(self, call, reply)),
                other => other,
            })
            .collect())
    }

    fn count(&self, decisions: usize) {
        let c = &self.counters;
        c.decisions.fetch_add(
            u64::try_from(decisions).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        c.calls.fetch_add(1, Ordering::Relaxed);
        if decisions > 1 {
            c.batches.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Tightens the estimate of Redis's clock with the `TIME` a reply
    /// carries (read by Redis between `sent_us` and now). On a cluster each
    /// node has its own clock: only the `TIME` of every primary
    /// (`RedisStore::measure_offset`) bounds them all.
    fn record(&self, sent_us: u64, reply: &[i64]) {
        let received_us = self.clock.now_us();
        if self.connection.is_cluster() {
            return;
        }
        if let Some(redis_us) = reply.first().and_then(|&t| u64::try_from(t).ok()) {
            self.clock.record(sent_us, received_us, redis_us);
        }
    }
}

/// A Redis error of a script call as the store's error: the script's own
/// refusals ("TOLLGATE ...") without Redis's script hash and line.
pub(crate) fn script_error(e: redis::RedisError) -> RedisStoreError {
    match e.code() {
        Some("TOLLGATE") => {
            // Redis appends " script: <sha>, on @user_script:<line>."
            let detail = e.detail().unwrap_or_default();
            let message = detail.split(" script: ").next().unwrap_or(detail);
            RedisStoreError::Script(message.to_owned())
        }
        _ => RedisStoreError::Redis(e),
    }
}
