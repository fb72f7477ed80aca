//! The Lua scripts, kept as documented files in `src/scripts/`.
//!
//! Each policy is one Lua file that returns a table of `load`, `decide` and
//! `write` on its own state key (the key layout and value format are
//! described at the top of each file), listed once in [`crate::policies`];
//! [`PLAN`] composes them with the shared helpers, the per-call function
//! ([`DECIDE`]) and the plan driver into the script that every decision sent
//! alone runs ([`BATCH`], the same with the batch driver, for decisions that
//! queued up behind a call in flight) ([`INSPECT`], the same with the
//! read-only inspection driver, the one every inspection runs). Its KEYS and ARGV:
//!
//! ```text
//! KEYS[1]        <prefix>:{c:<client>}:seen   latest time seen for the client
//! KEYS[1 + i]    <prefix>:{c:<client>}:<id>[:v<format>]   state of limit i, i = 1..n
//! KEYS[2 + n]    <prefix>:{c:<client>}:receipts   its receipts (declared so that
//!                Redis checks, while the slot moves, that the node holds them all)
//! ARGV[1]        now_ms (decimal), or "redis" to use Redis's TIME
//! ARGV[2]        cost (0 only asks)
//! ARGV[3]        expiry margin in ms
//! ARGV[4]        deadline: latest Redis TIME (µs) at which the script may start
//! ARGV[1+4i..4+4i] limit i: policy code (crate::policies), limit, window_ms, shadow (0/1)
//! ARGV[5+4n]     the call's receipt id, <tag>:<seq>: a call that consumes
//!                leaves a receipt under it, for [`CLAIM`] should its reply
//!                be lost (crate::receipts); a call of cost > 0 whose
//!                receipt is already stored has run, and is answered from
//!                it without consuming again (sent again by redis-rs's
//!                cluster client after its connection dropped)
//! ARGV[6+4n]     the watermark: no call of the store for this client
//!                numbered below it is still open (crate::receipts)
//! reply          { redis_time_us, now_used, allowed, then per limit: allowed,
//!                  remaining, retry_after_ms (-1: never), reset_after_ms },
//!                then, when the call consumed (allowed, cost > 0), two undo
//!                numbers per limit for [`REFUND`];
//!                or { redis_time_us, -1 } past the deadline (nothing written)
//! ```
//!
//! The script is loaded once and called with EVALSHA (`crate::evalsha`):
//! on a NOSCRIPT error (after a restart, a failover or SCRIPT FLUSH) it is
//! loaded and EVALSHA sent again (tested in `tests/faults.rs`); should that
//! meet NOSCRIPT too (a node just added to a cluster, which SCRIPT LOAD
//! does not reach), the script's text is sent with EVAL
//! (`tests/cluster_new_node.rs`).

use crate::policies;

/// The version of the stored state format of the policy with this script
/// code ([`crate::policies::RedisPolicy::format`]), part of its state key
/// from version 2 on ([`crate::keys`]); 1 for an unknown code.
///
/// The sliding-window log is at version 2 (one list element per distinct
/// time, `time:count:end`; version 1 held one element per unit of cost).
pub fn state_format(code: &str) -> u32 {
    policies::by_code(code).map_or(1, |p| p.format)
}

/// Helpers every policy uses: exact integer parsing, formatting and division.
pub const COMMON: &str = include_str!("scripts/common.lua");
/// One call of the plan script as a Lua function, `decide_call(keys, argv)`:
/// decides all limits, then consumes from all or none. The one definition
/// of the per-call arithmetic, run by both drivers ([`PLAN_DRIVER`],
/// [`BATCH_DRIVER`]).
pub const DECIDE: &str = include_str!("scripts/decide.lua");
/// The plan driver: one call, `decide_call(KEYS, ARGV)`.
pub const PLAN_DRIVER: &str = include_str!("scripts/plan.lua");
/// The batch driver: several calls in one script, in order, each failing
/// alone (see [`BATCH`]).
pub const BATCH_DRIVER: &str = include_str!("scripts/batch.lua");

/// The read-only driver of [`INSPECT`]: reads a client's raw state under
/// every limit of a plan, writing nothing.
pub const INSPECT_DRIVER: &str = include_str!("scripts/inspect.lua");

/// The script run for every inspection ([`crate::RedisStore::inspect`]):
/// [`COMMON`], each policy's file as in [`PLAN`], then [`INSPECT_DRIVER`].
/// Its KEYS and ARGV:
///
/// ```text
/// KEYS[1]        <prefix>:{c:<client>}:seen   latest time seen for the client
/// KEYS[1 + i]    <prefix>:{c:<client>}:<id>[:v<format>]   state of limit i, i = 1..n
/// ARGV[1]        now_ms (decimal), or "redis" to use Redis's TIME
/// ARGV[3i-1..3i+1] limit i: policy code (crate::policies), limit, window_ms
/// reply          { now_used, then per limit: m, then the m integers of its
///                  stored state (m = 0: none), as the policy's raw() gives it }
/// ```
pub const INSPECT: &str = policies::INSPECT;

/// The driver of [`REFUND`]: takes back what one abandoned call consumed.
pub const REFUND_DRIVER: &str = include_str!("scripts/refund.lua");

/// The script that takes back what a call consumed when its caller gave up
/// before the answer came ([`crate::call::refund`]): [`COMMON`], each policy's
/// file as in [`PLAN`], then [`REFUND_DRIVER`]. Compare and restore: each
/// limit's state is put back only if it is still the one the call stored;
/// and only where the call's receipt is (its write with it), each limit
/// restored marked in it as taken back. Its KEYS and ARGV:
///
/// ```text
/// KEYS[i]        the state key of limit i that the call consumed from
/// KEYS[n+1]      the refund's own key (its answer, for a copy sent again)
/// KEYS[n+2]      the client's receipts key
/// ARGV[1]        now_used (the call's reply's), ARGV[2] its cost (>= 1),
///                ARGV[3] the call's receipt id
/// ARGV[6i-2..6i+3] limit i: policy code, limit, window_ms, the two undo
///                numbers of the call's reply for limit i, and the limit's
///                place in the call's plan (1-based)
/// reply          { r_1, ..., r_n }: 1 restored, 0 changed since (kept);
///                {} when the call's receipt is not there (nothing done)
/// ```
pub const REFUND: &str = policies::REFUND;

/// The driver of [`CLAIM`]: finds and removes one call's receipt.
pub const CLAIM_DRIVER: &str = include_str!("scripts/claim.lua");

/// The script that takes back what a call consumed when its reply never
/// reached the store ([`crate::call::lost`]), once the call's deadline has
/// passed, by the receipt the call left, and removes the receipt, in one
/// run (so it can be sent again): [`COMMON`], each policy's file as in
/// [`PLAN`], then [`CLAIM_DRIVER`]. Its KEYS and ARGV:
///
/// ```text
/// KEYS[1]        the client's last-seen key
/// KEYS[2]        its receipts key
/// KEYS[3..]      every state key of the calls (every key touched is declared)
/// ARGV[1]        m, the number of calls, then per call: n_j, its 1 + n_j
///                keys, its receipt id, deadline (Redis TIME in µs) and
///                cost, then per limit: policy code, limit, window_ms
/// reply          { -1, redis_time_us } before every deadline; else per
///                call { 0 } no receipt, or { 1, r_1, ..., r_n } (1
///                restored, 0 changed since, kept), the receipt removed
/// ```
pub const CLAIM: &str = policies::CLAIM;

/// The whole script run for a decision sent alone: [`COMMON`], each
/// policy's file registered under its code (one line each, from
/// [`crate::policies::POLICIES`]), [`DECIDE`], then [`PLAN_DRIVER`].
pub const PLAN: &str = policies::PLAN;

/// The script run for decisions that queued up while another call was in
/// flight ([`crate::RedisStoreConfig::batch_max`]): the same chunks as
/// [`PLAN`], with [`BATCH_DRIVER`] as the driver. It decides its calls one
/// after another in the order given, exactly as separate [`PLAN`] calls in
/// that order (a script runs alone), each with its own deadline; a call that
/// fails (its arguments or stored state refused, or Redis refusing its first
/// write) fails alone, having written nothing. Its KEYS and ARGV:
///
/// ```text
/// KEYS[1]        call 1's last-seen key: only routes the script to its node
/// ARGV[1]        1 on a cluster (each call first checks, in one EXISTS of
///                all its keys and its receipts key, that its node holds
///                them all), 0 on one node
/// ARGV[2]        m, the number of calls
/// then per call  n_j (its number of limits), its 1 + n_j keys as PLAN's
///                first KEYS, then its 6 + 4 n_j ARGV as for PLAN
///
/// (The calls' keys are arguments: a cluster script may declare keys of one
/// slot only, but touch any key its node serves; a call whose keys another
/// node serves, or that its slot moving left on two nodes (a resharding),
/// fails alone, before writing, with Redis's "non local key" error, and the
/// store sends it again alone.)
/// reply          one string, the m calls' answers in order, each a kind
///                byte, a count n (4 bytes, unsigned), then its content,
///                every number little-endian: 0, then n numbers of 8 bytes
///                (signed), PLAN's reply to the call; or 1, then n bytes,
///                the text "<CODE> <message>" of the error reply PLAN
///                would have raised for it
/// ```
pub const BATCH: &str = policies::BATCH;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_script_starts_with_the_helpers_and_ends_with_the_driver() {
        assert!(PLAN.starts_with(COMMON));
        assert!(PLAN.ends_with(&format!("{DECIDE}{PLAN_DRIVER}")));
        assert!(BATCH.starts_with(COMMON) && BATCH.ends_with(&format!("{DECIDE}{BATCH_DRIVER}")));
        assert!(INSPECT.starts_with(COMMON) && INSPECT.ends_with(INSPECT_DRIVER));
        assert!(REFUND.starts_with(COMMON) && REFUND.ends_with(REFUND_DRIVER));
        for write in [
            "'SET'",
            "'DEL'",
            "'RPUSH'",
            "'LSET'",
            "'LTRIM'",
            "'PEXPIRE'",
        ] {
            assert!(!INSPECT_DRIVER.contains(write), "inspect.lua calls {write}");
        }
        assert_eq!(state_format("s"), 2);
        assert_eq!(state_format("g"), 1);
    }
}
