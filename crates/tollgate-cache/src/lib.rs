//! # tollgate-cache
//!
//! An exact rejection cache for instances that share one store (Redis, or
//! Redis Cluster). When the store rejects a request of client `C` under plan
//! `P` with cost `c` at time `t`, with exact wait `w`, the instance rejects
//! further requests of `C` under `P` with cost `≥ c` itself until `t + w`,
//! without a round trip, answering `retry_after = t + w − now` and
//! `decided_by` [`tollgate::DecidedBy::Cache`]. A client sending fifty times
//! its limit then costs the store one call per wait, not fifty.
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use tollgate::{AnyPolicy, DecidedBy, Limit, MemoryBackend, Plan, Store};
//! use tollgate_cache::{CachedStore, RejectionCache};
//!
//! let plan = Plan::new("free", vec![
//!     Limit::new("1s", AnyPolicy::from_name("sliding-window", 1, 1_000)?, false),
//! ])?;
//! // In a server, the inner store is a guarded Redis store.
//! let store = CachedStore::new(MemoryBackend::new(), Arc::new(RejectionCache::new(1_000)?));
//! assert!(store.check(&plan, "app", 0, 1).await?.allowed);
//! let first = store.check(&plan, "app", 10, 1).await?; // the store rejects
//! assert_eq!((first.decided_by, first.retry_after_ms), (DecidedBy::Store, Some(990)));
//! let again = store.check(&plan, "app", 400, 1).await?; // the cache does
//! assert_eq!((again.decided_by, again.retry_after_ms), (DecidedBy::Cache, Some(600)));
//! assert!(store.check(&plan, "app", 1_000, 1).await?.allowed); // at t + w: the store
//! # Ok(())
//! # }
//! ```
//!
//! ## Why the answers are exact
//!
//! The store's wait `w` is exact: the same request is rejected at every
//! time before `t + w` *if nothing else happens to the client*. What else
//! can happen is only consumption: other instances (and this one, for
//! smaller costs) can take from `C`'s budget, never give any back, and
//! under every policy taking more only makes the next allowance later
//! (a rejected request takes nothing). So a request of cost `≥ c` at any
//! time in `[t, t + w)` is rejected by the store too, whatever happened in
//! between. The allow/reject answers with the cache are therefore those
//! without it, decision by decision; and since the cache's answers are
//! rejections, which take nothing, the store's state, and with it every
//! later answer the store gives, is the same too.
//!
//! What may differ in a cached answer is only what the store would have
//! *reported* with it: the retry-after is `t + w − now`, which is shorter
//! than the true wait when someone consumed meanwhile, when the cost is
//! larger than `c`, or when the store decided the rejection at a time
//! later than `t` (a shared store decides at the latest time it has seen
//! for the client, and a request stamped later may have reached it first:
//! another instance's, or this one's own when the cache held no entry for
//! the client to keep its latest time in, e.g. one allowed at `t + 400`
//! before a request stamped `t` came; `w` then counts from that time); `remaining` and each
//! limit's waits are those of the store's rejection at `t`, counted down.
//! When `c = 1`, the plan has a single limit (the repeat offender's case)
//! and the store decided at `t`, nobody can consume from `C` before
//! `t + w` (every request of cost ≥ 1 is rejected), so the client's state
//! only ages and every number of the cached answer, retry-after included
//! for cost 1, equals the store's.
//!
//! The rules that keep it exact ([`RejectionCache`]):
//! - only the store's own rejections are remembered: never a failure
//!   policy's answer (the cache sits outside the guarded store, see
//!   [`CachedStore`]), never an allowed request or a cost that can never
//!   pass (more than a limit: the store says "never", not a wait);
//! - a rejection of cost `c` says nothing about smaller costs: they go to
//!   the store;
//! - at exactly `t + w` the request goes to the store (the wait is exact:
//!   it is allowed then);
//! - each limit's own answer is the store's too (the metrics, the top
//!   clients and a shadow limit's count take them from the cached
//!   answer): a limit that refused goes on refusing until its own wait is
//!   over, and one that allowed with `remaining ≥ cost` goes on allowing,
//!   as long as nobody consumes (what the store allowed this instance
//!   since is taken off an entry's `remaining`, a call in flight beside
//!   the rejection included: [`RejectionCache::remember_call`]; another
//!   instance's consumption it cannot see); so the cache answers only
//!   while every limit would answer as it answered the rejection, and
//!   otherwise the store does (a cost larger than an allowing limit's
//!   room; a refusing limit at the end of its own wait while another still
//!   refuses);
//! - a plan whose limits (policy, limit, window, shadow) changed answers
//!   nothing from the old entries, and a reload drops them
//!   ([`RejectionCache::forget_changed`]).
//!
//! ## Limits of the argument
//!
//! - **Times that go backwards.** The store answers a request stamped
//!   before the client's latest time at that latest time, and would have
//!   seen the times of the requests the cache answered. So the cache keeps,
//!   with each entry, the latest time of the client's requests it answered
//!   or the store answered since, and both answers and sends every request
//!   (and inspection) at that time or later ([`Lookup::AskStore`]): the
//!   store then sees what it would have seen without the cache. An entry
//!   ends only once the store has answered a request at or past that time
//!   and past its wait. What this cannot cover: an entry dropped for room
//!   (the cap) or by a reload forgets its latest time, so a request
//!   stamped before that time and arriving after the entry went is
//!   answered by the store at the time it has; and the entry is this
//!   instance's alone (below).
//! - **Clocks skewed across servers.** Under `TimeSource::Caller` (the
//!   default of the Redis store) the store decides a request at the later
//!   of its caller's time and the client's latest time it has seen, and
//!   the waits are measured on each caller's clock. If another server's
//!   clock runs ahead, the store answers this client at that later time,
//!   and may allow a request this instance's cache still rejects. If
//!   another server's clock runs behind, its request is decided, and if
//!   allowed counted, at Redis's latest time for the client, which lags
//!   this instance's by the requests the cache answered (Redis never saw
//!   them): earlier than without the cache, so a later request may be
//!   allowed that would not have been. Never earlier than that server's
//!   own time, so both differences stay within the bound the skew sets
//!   without the cache (a skew of S can let a client in up to twice its
//!   limit within S). Servers sharing a store must keep their clocks
//!   close, cache or not.
//! - **`TimeSource::Redis`** lifts that limit: Redis's clock decides, and
//!   the cache times its entries by a monotonic clock of its own
//!   ([`RejectionCache::on_own_clock`]; `tollgate-config` wires it), so no
//!   caller's clock, skewed or stepped, moves an entry's end. A wait is
//!   counted from when the request was sent, before Redis decided, so an
//!   entry ends no later than Redis's wait does: a cached retry-after may
//!   be shorter than Redis's by the call's round trip, never longer.
//! - **Refunds.** One thing other than time gives budget back: the Redis
//!   store takes back what a call consumed when its caller gave up before
//!   the reply came (`tollgate_redis::call::refund`: Redis ran it in time, but
//!   held the reply). A rejection the store gave while such a consumption
//!   was still counted (on another instance, or on this one through
//!   another connection, in the moments between that call running and its
//!   refund) is remembered like any other, so the cache may go on rejecting
//!   until `t + w` where the store, refunded, would allow. Only after a
//!   fault, and only towards admitting less: the store's rejection was
//!   already made with the consumption counted. The same holds for what a
//!   request of several clients gives back when one of them refuses it
//!   ([`tollgate::Store::give_back`], the Envoy service's all or nothing),
//!   which happens only when another instance raced it.
//! - **State lost in the store.** A Redis restarted without persistence,
//!   flushed, or failed over to a replica that had not received the writes
//!   gives every client's budget back at once. The cache goes on answering
//!   its entries until their waits are over, rejecting where the emptied
//!   store would allow: towards admitting less, for at most the longest
//!   wait it holds (a fault drill saw a client rejected for the rest of its
//!   wait after an empty restart, where the store had forgotten it).
//! - **Multi-limit plans.** A plan rejected by one of its limits is
//!   rejected for the longest wait among its rejecting limits; the cached
//!   answer repeats every limit's numbers as they were at `t`, so a limit
//!   that did not reject (or whose own wait ran out first) may show a stale
//!   `remaining`. The allow/reject answer is exact as above.
//!
//! This crate knows no network and no server: it wraps any
//! [`tollgate::Store`].

#![forbid(unsafe_code)]

mod cache;
mod cached;
mod error;
mod in_flight;

pub use cache::{Lookup, RejectionCache, DEFAULT_MAX_CLIENTS, MAX_MAX_CLIENTS};
pub use cached::CachedStore;
pub use error::Error;
pub use in_flight::CallInFlight;
