//! The Lua scripts, kept as documented constants.
//!
//! Each policy is one Lua chunk defining `load`, `decide` and `write` on its
//! own state key (the key layout and value format are described at the top
//! of each file); [`PLAN`] composes them with the shared helpers and the plan
//! driver into the one script that every decision runs. Its KEYS and ARGV:
//!
//! ```text
//! KEYS[1]        <prefix>:{c:<client>}:seen   latest time seen for the client
//! KEYS[1 + i]    <prefix>:{c:<client>}:<id>[:v<format>]   state of limit i, i = 1..n
//! ARGV[1]        now_ms (decimal), or "redis" to use Redis's TIME
//! ARGV[2]        cost (0 only asks)
//! ARGV[3]        expiry margin in ms
//! ARGV[4i..4i+3] limit i: policy code (s, t, g), limit, window_ms, shadow (0/1)
//! reply          { now_used, allowed, then per limit: allowed, remaining,
//!                  retry_after_ms (-1: never), reset_after_ms }
//! ```
//!
//! The script is loaded once and called with EVALSHA: `redis::Script` sends
//! EVALSHA and, on a NOSCRIPT error (after a restart, a failover or SCRIPT
//! FLUSH), loads the script and sends EVALSHA again by itself (redis-rs
//! 1.2, `ScriptInvocation::invoke_async`; tested in `tests/faults.rs`).

/// The version of the stored state format of the policy with this script
/// code, part of its state key from version 2 on ([`crate::keys`]).
///
/// Bumped whenever a script changes how it stores a policy's state, so that
/// the new script never reads a state the old one wrote: the sliding-window
/// log is at version 2 (one list element per distinct time,
/// `time:count:end`; version 1 held one element per unit of cost).
pub fn state_format(code: &str) -> u32 {
    match code {
        "s" => 2,
        _ => 1,
    }
}

/// Helpers every policy uses: exact integer parsing, formatting and division.
pub const COMMON: &str = include_str!("scripts/common.lua");
/// The sliding-window log on a Redis list.
pub const SLIDING_WINDOW: &str = include_str!("scripts/sliding_window.lua");
/// The token bucket on a string `anchor:full_at`.
pub const TOKEN_BUCKET: &str = include_str!("scripts/token_bucket.lua");
/// GCRA on a string holding the scaled theoretical arrival time.
pub const GCRA: &str = include_str!("scripts/gcra.lua");
/// The plan driver: decides all limits, then consumes from all or none.
pub const PLAN_DRIVER: &str = include_str!("scripts/plan.lua");

/// The whole script run for every decision: the chunks above in order.
pub const PLAN: &str = concat!(
    include_str!("scripts/common.lua"),
    include_str!("scripts/sliding_window.lua"),
    include_str!("scripts/token_bucket.lua"),
    include_str!("scripts/gcra.lua"),
    include_str!("scripts/plan.lua"),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_script_is_its_parts_in_order() {
        assert_eq!(
            PLAN,
            [COMMON, SLIDING_WINDOW, TOKEN_BUCKET, GCRA, PLAN_DRIVER].concat()
        );
    }
}
