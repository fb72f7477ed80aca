//! # tollgate-redis
//!
//! tollgate's per-client limit state in Redis, so that many API servers share
//! one limit per client, with exactly the answers of the in-memory limiter.
//!
//! - [`RedisStore`] implements [`tollgate::Store`]: each decision is one
//!   EVALSHA of one Lua script ([`scripts::PLAN`]) that decides every limit
//!   of a plan for one client and consumes from all of them or none,
//!   atomically, with the same policies and numbers as `tollgate`'s
//!   (sliding-window log, token bucket anchored at the first call, GCRA) and
//!   the same rule for times that go backwards (answered as at the latest
//!   time seen for the client).
//! - Batching ([`batch`]): decisions that arrive while calls are in flight
//!   queue up, and the next call carries them all ([`scripts::BATCH`], up
//!   to [`RedisStoreConfig::batch_max`]), decided one after another in
//!   arrival order with the plan script's own per-call function: the
//!   answers of separate calls in that order, each with its own deadline
//!   and its own errors. No timer: a decision that arrives when a call may
//!   still go out starts one, which leaves once the tasks already ready
//!   have queued theirs. On a cluster, one queue per master, on a
//!   connection of its own ([`masters`], by the cluster's map of slots,
//!   [`slots`]); a decision
//!   whose slot moved is refused by the old master before it writes and
//!   sent again alone. [`RedisStore::call_counts`] says how many calls
//!   carried how many decisions.
//! - Inspection ([`RedisStore::inspect`], [`tollgate::Store::inspect`]): one
//!   read-only script ([`scripts::INSPECT`]) returns a client's stored
//!   states, decoded into the core's and answered by
//!   [`tollgate::inspect_plan`]: the same numbers as the memory store's,
//!   nothing written.
//! - Keys ([`keys`]): `<prefix>:{c:<escaped client>}:<limit id>[:v<format>]`, one hash
//!   tag per client (never CROSSSLOT on Redis Cluster), client ids of any
//!   bytes escaped, every key with an expiry.
//! - Policies ([`policies`]): one descriptor per policy (name, Redis code,
//!   stored format, Lua file, bound), declared on the first line of the
//!   policy's Lua file; the dispatch, the bounds check and the plan script's
//!   table come from the list. [`check_limit`] says whether the store can
//!   serve a limit at all (for config checks).
//! - Exactness ([`bounds`]): Lua numbers are doubles, so arguments whose
//!   arithmetic could pass 2^53 are refused before any write.
//! - Replicas ([`replicas`]): with [`RedisStoreConfig::replicas_to_ack`],
//!   a decision that consumed is answered as allowed only once that many
//!   replicas acknowledged it (Redis's `WAIT`, in one pipeline behind the
//!   script), so that a master that dies takes no allowed decision with it;
//!   one acknowledged by fewer is taken back and answered by the failure
//!   policy.
//! - Failures: every error is converted here ([`RedisStoreError`]) and
//!   marked transient or permanent; the timeout, the failure policy and the
//!   circuit breaker around any store live in `tollgate-guard`.
//!
//! ## Deadlines: an abandoned call writes nothing
//!
//! A caller gives up after its timeout ([`RedisStoreConfig::timeout`], the
//! `tollgate_guard::GuardedStore`'s), but Redis may run the call later: a stopped, paused
//! (`CLIENT PAUSE`) or busy Redis runs what waited once it resumes. So every
//! call carries a deadline on Redis's own clock (`TIME`, read first thing in
//! the script): a script that starts after it writes nothing and answers
//! "late", and the store returns the transient
//! [`RedisStoreError::DeadlinePassed`], which the guard answers by its
//! failure policy. The store estimates Redis's clock from its monotonic
//! clock with a lower bound of the offset (a `TIME` round trip, tightened by
//! the `TIME` every script reply carries, replaced every second so it cannot
//! drift), so the deadline never falls after the moment the caller gives up:
//! see [`deadline`].
//!
//! What a caller may still see: a call whose script ran before its deadline
//! but whose answer reached the caller after it gave up. How late such an
//! answer comes is not bounded by the round trip: Redis writes replies at the
//! end of a pass of its event loop, so a command of another client that
//! blocks in the same pass (`DEBUG SLEEP`, a long script under
//! `busy-reply-threshold`), a stop of the process (SIGSTOP, a paused VM)
//! between the run and the write, or a slow network on the way back holds the
//! reply that long. Measured before refunds, in fault drills against `serve`
//! (2,000 to 30,000 decisions/s, timeout 100 ms): 0 to 17 units counted per
//! drill for calls answered by the failure policy. So such a call is refunded
//! ([`call::refund`]): every reply comes back to a task that outlives its caller,
//! and when the caller is gone and the reply says the call consumed, a script
//! puts each limit's state back, if it is still the one that call stored
//! (compare and restore: after other calls, a blind undo could give back
//! tokens the bucket's cap would have wasted, which over-admits). Refunds of
//! one client unwind newest first. What still stays counted, always towards
//! admitting less: a call whose client was used by an answered call (token
//! bucket, GCRA; the sliding log takes the units out all the same) before its
//! refund ran. A reply that never comes (the connection dropped on the way
//! back, or a reply later than 5 s, `RESPONSE_TIMEOUT`:
//! redis-rs's default of 500 ms dropped the replies of a Redis stopped for
//! seconds) is refunded too: its call left a receipt under an id of its own,
//! which the store claims once the call's deadline has passed ([`call::lost`]);
//! the same receipt makes a call run once when redis-rs's cluster client
//! sends it again after its connection dropped (`decide.lua`);
//! [`CallCounts`] counts refunds by outcome (`tests/held_replies.rs`,
//! `tests/refund_model.rs`, `tests/receipts.rs`, `tests/cluster_replies.rs`). Errors of the estimate
//! only make the deadline earlier (by up to the measuring round trip, plus 1
//! ms of slack), never later, unless Redis's clock steps back or runs slow,
//! which the next measurement (within 1 to 2 s, while every master answers)
//! follows. A call refused as late consumes nothing.
//!
//! ## Runtimes: the store's home
//!
//! A store serves callers on several runtimes at once: `tollgate serve`
//! answers HTTP on its main runtime and Envoy's gRPC on threads with a
//! single-threaded runtime each, which end at shutdown before the main one
//! (so do `tollgate proxy`'s workers). redis-rs runs a connection's work in
//! tasks of the runtime the connection is made on, and the store makes some
//! connections at their first use (a store made without connecting, a
//! cluster's lane per master). So the runtime a store is made on is its
//! home ([`RedisStore::connect_to`]): every task the store starts for its
//! calls (a decision's call, a batch, refunds, claims, readings of the map,
//! clock measurements, inspections) runs there, and every connection is
//! made there. Made on a caller's runtime instead, a connection died with
//! it: a lazily made cluster connection then failed every later call of
//! the store (`tests/runtimes.rs`).
//!
//! ## Expiry
//!
//! Every write sets the key's expiry (PEXPIRE / SET PX) on Redis's clock,
//! computed from the decision's time plus [`RedisStoreConfig::expiry_margin_ms`]
//! (the margin covers callers whose clocks lag Redis's or each other's),
//! plus how far the decision's time runs ahead of Redis's clock, up to a
//! day (a server whose clock ran ahead, then stepped back to the true time,
//! finds the state it wrote until its clock has passed that time again, as
//! the memory store keeps a client whose latest seen time is ahead),
//! except where the expiry it needs has not moved (below):
//!
//! - sliding-window log: `window_ms + margin` after the write that logged
//!   its newest entry (which leaves the window `window_ms` after it was
//!   logged; units added at that same time keep the expiry), so the expiry
//!   never changes an answer;
//! - GCRA: `reset_after_ms + margin` (once the theoretical arrival time has
//!   passed, a missing state and the stored one answer alike), never changes
//!   an answer;
//! - token bucket: `window_ms + margin` after the last write (a request used
//!   tokens, or the first call anchored it). The bucket is full by then, so
//!   the expiry forgets only the drip phase: the client starts full again,
//!   anchored at its next call, and its next drip may come up to one interval
//!   earlier or later than it would have (the same trade-off as the core's
//!   opt-in `sweep(now, reset_phase = true)`);
//! - the client's last-seen key: the longest expiry of the client's limits,
//!   so it outlives every state key (a call that writes no state key keeps
//!   the key's expiry as it is: no state key's expiry moved, unless its
//!   time runs ahead of Redis's, which lengthens it as a write would); once
//!   it is gone the client is forgotten, as after the core's `sweep` (which
//!   keeps a client whose latest seen time is ahead of the sweep's: here, up
//!   to a day ahead of Redis's clock);
//! - the client's receipts (`:receipts`, what a call consumed, for a refund
//!   or a claim of a reply that never came: [`crate::call::refund`],
//!   [`crate::call::lost`]): 180 s after the last call that consumed, whatever the
//!   window, since they serve the calls in flight, not the limits (a
//!   client idle that long keeps only the state keys its windows need).
//!
//! ## Time
//!
//! By default the caller's `now_ms` ([`TimeSource::Caller`]), exactly as the
//! in-memory limiter; [`TimeSource::Redis`] reads `TIME` inside the script
//! instead, so servers with skewed clocks still agree (see [`TimeSource`]
//! for the trade-off).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate::{AnyPolicy, Limit, Plan, Store};
//! use tollgate_redis::{RedisStore, RedisStoreConfig};
//!
//! let store = RedisStore::connect("redis://127.0.0.1:6379", RedisStoreConfig::default()).await?;
//! let plan = Plan::new("free", vec![
//!     Limit::new("per-second", AnyPolicy::from_name("sliding-window", 10, 1_000)?, false),
//!     Limit::new("per-day", AnyPolicy::from_name("token-bucket", 1_000, 86_400_000)?, false),
//! ])?;
//! let decision = store.check(&plan, "app-42", 1_700_000_000_000, 1).await?;
//! println!("allowed: {} (decided by {})", decision.allowed, decision.decided_by.as_str());
//! # Ok(())
//! # }
//! ```

mod arg;
pub mod batch;
pub mod bounds;
mod by_client;
pub mod call;
mod config;
mod connection;
pub mod deadline;
mod error;
mod evalsha;
mod info;
mod inspect;
pub mod keys;
mod lazy_cluster;
pub mod masters;
mod measure;
mod node;
pub mod policies;
mod receipts;
mod redact;
pub mod replicas;
mod reply;
pub mod scripts;
mod settle;
pub mod slots;
mod store;
mod target;
mod task_place;
#[cfg(feature = "testing")]
pub mod testing;

pub use bounds::{at_fault, check_limit, check_servable, check_servable_limit, AtFault};
pub use call::CallCounts;
pub use config::{
    RedisStoreConfig, TimeSource, DEFAULT_BATCHES_IN_FLIGHT, DEFAULT_BATCH_MAX, DEFAULT_TIMEOUT,
    MAX_BATCH, MAX_BATCHES_IN_FLIGHT, MAX_EXPIRY_MARGIN_MS, MAX_REPLICAS_TO_ACK, MAX_TIMEOUT,
    MIN_TIMEOUT,
};
pub use connection::{FIRST_CONNECTION_TIMEOUT, RESPONSE_TIMEOUT};
pub use error::{RedisStoreError, PERMANENT_CODES, SLOT_CODES, TRANSIENT_CODES};
pub use redact::{redact_url, redact_urls_in};
pub use store::{RedisStore, NO_EVICTION};
pub use target::RedisTarget;
