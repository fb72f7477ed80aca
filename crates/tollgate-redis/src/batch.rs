//! Batching concurrent decisions into one script call, exact by
//! construction.
//!
//! While a call is in flight, decisions that arrive queue up; the next call
//! carries all of them (up to [`crate::RedisStoreConfig::batch_max`]) as one
//! call of [`crate::scripts::BATCH`], which decides them one after another in
//! arrival order, exactly as separate calls in that order would (Redis runs
//! a script alone, so nothing comes between them either way). There is no
//! timer: a decision that arrives while fewer than
//! [`crate::RedisStoreConfig::batches_in_flight`] calls are in flight starts
//! a call, which leaves as soon as the tasks already ready on the runtime
//! have had their turn (one [`tokio::task::yield_now`]) and carries what
//! they queued meanwhile; alone, as the plan script, when nothing else
//! came. So a store under light load adds one pass of its scheduler, and
//! under load batches form by themselves from the first call on: requests
//! read in one pass of a server's connections go in one call, instead of
//! the first alone and the rest a round trip later. Redis runs one script
//! per batch instead of one per decision.
//!
//! What each caller sees is unchanged:
//! - its answer, computed by the same Lua function (`decide.lua`);
//! - its own deadline, checked against Redis's `TIME` when its decision
//!   starts inside the script: a decision that starts late writes nothing
//!   and is refused as late ([`crate::RedisStoreError::DeadlinePassed`]);
//! - its own error when its decision fails (bad arguments, a refused stored
//!   state, Redis refusing its first write): the others in the batch are
//!   decided all the same;
//! - the error of the whole call (connection lost, BUSY, ...), with the same
//!   classification (transient or permanent) as a call of its own would have
//!   met, so a failure policy and a circuit breaker see what they saw before.
//!
//! A caller that gives up (its timeout, or its future dropped) leaves its
//! decision in the queue; a decision whose caller is gone by the time a
//! batch is taken is never sent (it writes nothing), and one already sent
//! either starts before its deadline or writes nothing, as before; one that
//! started in time and consumed, but whose caller was gone when its answer
//! came, is taken back ([`crate::call::refund`]).
//!
//! The queue is for one Redis node: on a cluster, one queue per master
//! ([`crate::masters`]). A batch declares one key, which routes it to its
//! master, and carries the calls' keys as arguments (a cluster script may
//! declare keys of one slot only, but touch any slot its node serves). A
//! call whose keys another master holds (the map of slots was out of date)
//! fails there before writing anything, and is sent again alone, routed by
//! its own key.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::call::answer::{self, Answer};
use crate::call::{Batched, Call, CallReply, Scripts};
use crate::connection::Connection;
use crate::task_place::TaskPlace;

/// A decision waiting for a call to carry it, and where its answer goes.
struct Waiting {
    call: Call,
    answer: Answer,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    in_flight: usize,
    /// The length at which the queue next drops the decisions whose callers
    /// gave up ([`Queue::push`]).
    prune_at: usize,
}

/// The queue drops the decisions whose callers gave up once it is this
/// long, and again each time it doubles after that.
const PRUNE_FROM: usize = 4_096;

impl Queue {
    /// Queues `waiting`. While a call is held in flight (a Redis that stalls
    /// holds its reply for up to [`crate::RESPONSE_TIMEOUT`]), callers give up
    /// and their decisions would pile up until the next batch is taken: so
    /// a long queue first drops those no one waits for.
    fn push(&mut self, waiting: Waiting) {
        if self.waiting.len() >= self.prune_at.max(PRUNE_FROM) {
            self.waiting.retain(|w| !w.answer.is_closed());
            self.prune_at = 2 * self.waiting.len();
        }
        self.waiting.push_back(waiting);
    }
}

/// The queue of decisions for one Redis node, and the calls carrying them.
pub(crate) struct Batcher {
    scripts: Arc<Scripts>,
    /// The connection the batches go on: on a cluster, their master's lane
    /// ([`Connection::lane`]).
    connection: Connection,
    batch_max: usize,
    in_flight_max: usize,
    queue: Mutex<Queue>,
    /// Set when a master answered that another master holds a call's keys:
    /// the cluster's map of slots ([`crate::masters`]) is out of date.
    misrouted: Arc<AtomicBool>,
}

impl Batcher {
    /// Batches of at most `batch_max` decisions on `connection`, at most
    /// `in_flight_max` of them in flight at once (both at least 1);
    /// `misrouted` is set when a call turns out to belong to another master
    /// of a cluster.
    pub(crate) fn new(
        scripts: Arc<Scripts>,
        connection: Connection,
        batch_max: usize,
        in_flight_max: usize,
        misrouted: Arc<AtomicBool>,
    ) -> Self {
        Self {
            scripts,
            connection,
            batch_max: batch_max.max(1),
            in_flight_max: in_flight_max.max(1),
            queue: Mutex::new(Queue::default()),
            misrouted,
        }
    }

    /// The connection this queue's batches go on.
    pub(crate) fn lane(&self) -> &Connection {
        &self.connection
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides `call`: in a call that starts now when one may still go in
    /// flight, else in the next batch. Must be called inside a Tokio
    /// runtime (a batch is sent by a task of its own, so that no caller
    /// giving up can stop it).
    pub(crate) async fn decide(self: &Arc<Self>, call: Call) -> CallReply {
        let (answer, answered) = answer::channel(&self.scripts);
        let starts_a_call = {
            let mut queue = self.lock();
            queue.push(Waiting { call, answer });
            let starts = queue.in_flight < self.in_flight_max;
            if starts {
                queue.in_flight += 1;
            }
            starts
        };
        if starts_a_call {
            self.scripts.spawn(self.clone().carry());
        }
        answered.reply().await
    }

    /// Up to `batch_max` waiting decisions whose callers still wait.
    fn take(&self, queue: &mut Queue) -> Vec<Waiting> {
        let mut batch = Vec::with_capacity(queue.waiting.len().min(self.batch_max));
        while batch.len() < self.batch_max {
            let Some(waiting) = queue.waiting.pop_front() else {
                break;
            };
            if !waiting.answer.is_closed() {
                batch.push(waiting);
            }
        }
        batch
    }

    /// Sends what waits once the tasks already ready have queued their
    /// decisions too, then every batch that queued up meanwhile, until the
    /// queue is empty; then gives its place in flight back.
    async fn carry(self: Arc<Self>) {
        let mut place = TaskPlace::new(|| self.lock().in_flight -= 1);
        // Without this, the task that spawned this one would hand over to it
        // at once (Tokio runs a task just spawned next), and the call would
        // leave with that task's decision alone.
        tokio::task::yield_now().await;
        loop {
            let batch = {
                let mut queue = self.lock();
                let batch = self.take(&mut queue);
                if batch.is_empty() {
                    queue.in_flight -= 1;
                    place.given_back();
                    return;
                }
                batch
            };
            self.send(batch).await;
        }
    }

    /// Sends one batch and answers each of its callers (a caller that gave
    /// up no longer listens).
    async fn send(&self, mut batch: Vec<Waiting>) {
        if batch.len() <= 1 {
            if let Some(waiting) = batch.pop() {
                let reply = self.scripts.one(&self.connection, &waiting.call).await;
                waiting.answer.send(&self.scripts, waiting.call, reply);
            }
            return;
        }
        let calls: Vec<&Call> = batch.iter().map(|w| &w.call).collect();
        match self.scripts.many(&self.connection, &calls).await {
            Ok(replies) => {
                let mut elsewhere = Vec::new();
                for (waiting, reply) in batch.into_iter().zip(replies) {
                    match reply {
                        Batched::Answered(reply) => {
                            waiting.answer.send(&self.scripts, waiting.call, reply);
                        }
                        Batched::Elsewhere => elsewhere.push(waiting),
                    }
                }
                self.send_elsewhere(elsewhere);
            }
            Err(e) => {
                for waiting in batch {
                    waiting
                        .answer
                        .send(&self.scripts, waiting.call, Err(e.clone()));
                }
            }
        }
    }

    /// Sends each call that the batch's master said another master holds
    /// alone, routed by its own key on the store's own connection (nothing
    /// was written for it), each in a task of its own, unless its caller gave
    /// up meanwhile (as for a batch being taken); and reports that the map of
    /// slots is out of date.
    fn send_elsewhere(&self, calls: Vec<Waiting>) {
        if calls.is_empty() {
            return;
        }
        self.misrouted.store(true, Ordering::Relaxed);
        for waiting in calls {
            if waiting.answer.is_closed() {
                continue;
            }
            let scripts = self.scripts.clone();
            self.scripts.spawn(async move {
                let reply = scripts.one(&scripts.connection, &waiting.call).await;
                waiting.answer.send(&scripts, waiting.call, reply);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting() -> (Waiting, impl Drop) {
        let (answer, answered) = answer::unread();
        let call = Call {
            keys: Vec::new(),
            args: Vec::new(),
            wait: None,
            open: None,
        };
        (Waiting { call, answer }, answered)
    }

    #[test]
    fn a_long_queue_drops_the_decisions_no_one_waits_for() {
        let mut queue = Queue::default();
        let mut listening = Vec::new();
        for i in 0..PRUNE_FROM {
            let (entry, answered) = waiting();
            queue.push(entry);
            // One caller in four still waits; the others gave up.
            if i % 4 == 0 {
                listening.push(answered);
            }
        }
        assert_eq!(
            queue.waiting.len(),
            PRUNE_FROM,
            "short queues are left alone"
        );
        let (entry, answered) = waiting();
        queue.push(entry);
        listening.push(answered);
        assert_eq!(queue.waiting.len(), PRUNE_FROM / 4 + 1);
        // However many give up, the queue stays bounded, and keeps every
        // decision whose caller waits.
        for _ in 0..10 * PRUNE_FROM {
            let (entry, _) = waiting();
            queue.push(entry);
            assert!(queue.waiting.len() <= PRUNE_FROM);
        }
        let waited_for = queue
            .waiting
            .iter()
            .filter(|w| !w.answer.is_closed())
            .count();
        assert_eq!(waited_for, listening.len());
    }
}
