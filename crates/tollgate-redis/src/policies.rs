//! One descriptor per policy the Redis store serves, and everything derived
//! from the list: the Redis dispatch (policy name to script code and key
//! format), the bounds check ([`crate::bounds`]) and the table of policies
//! of the plan and batch scripts ([`crate::scripts::PLAN`], [`crate::scripts::BATCH`]).
//!
//! The list is the Lua files in `src/scripts/policies/`: each file's first
//! line declares its descriptor,
//!
//! ```text
//! -- redis-policy: gcra code=g format=1 bound=SCALED_TIME
//! ```
//!
//! and `build.rs` turns every file into one line of the `redis_policies!`
//! call that builds [`POLICIES`] and the plan script. Adding a policy to the
//! Redis store is therefore adding its Lua file (a chunk that returns a
//! function building its policy table, see `gcra.lua`), once the policy exists in the core
//! (`crates/tollgate/src/policy/<name>.rs` and its `register_policies!`
//! line). A test checks that every policy of [`tollgate::POLICY_NAMES`] has
//! exactly one descriptor.

/// The largest integer a policy's arithmetic reaches, as a function of the
/// decision time, the limit and the window: Lua numbers are doubles, exact
/// only up to [`crate::bounds::MAX_EXACT`].
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// The formula, for error messages and docs (e.g. `now_ms + window_ms`).
    pub formula: &'static str,
    /// The formula's value at `(now_ms, limit, window_ms)`, in `u128` so it
    /// never overflows for `u64` times and windows and `u32` limits.
    pub largest: fn(now_ms: u128, limit: u128, window_ms: u128) -> u128,
}

impl Bound {
    /// Times and windows added once: the sliding-window log (the time an
    /// entry leaves the window) and the token bucket (the latest drip time).
    pub const TIME_PLUS_WINDOW: Bound = Bound {
        formula: "now_ms + window_ms",
        largest: |now, _limit, window| now + window,
    };

    /// Times scaled by the limit, plus two windows: GCRA's theoretical
    /// arrival time for a rejected request of cost `limit`.
    pub const SCALED_TIME: Bound = Bound {
        formula: "(now_ms + 2 * window_ms) * limit",
        largest: |now, limit, window| (now + 2 * window) * limit,
    };
}

/// How the Redis store serves one policy.
#[derive(Debug, Clone, Copy)]
pub struct RedisPolicy {
    /// The core's policy name ([`tollgate::Policy::name`]).
    pub name: &'static str,
    /// The short code the plan script knows the policy by (ARGV of `plan.lua`).
    pub code: &'static str,
    /// The version of the policy's stored state format, part of its state
    /// key from version 2 on ([`crate::keys`]). Bumped whenever the Lua file
    /// changes how it stores the state, so a new script never reads a state
    /// an old one wrote.
    pub format: u32,
    /// The policy's Lua file (`src/scripts/policies/<file>`), one chunk of
    /// the plan script.
    pub lua: &'static str,
    /// The largest integer its arithmetic reaches; the Lua file's `bound_ok`
    /// checks the same formula inside the script.
    pub bound: Bound,
}

/// Declares the policies the Redis store serves, one line each, and builds
/// [`POLICIES`], the plan script and the inspection script from them.
macro_rules! redis_policies {
    ($($name:literal => { code: $code:literal, format: $format:literal, lua: $lua:expr, bound: $bound:expr $(,)? }),+ $(,)?) => {
        /// Every policy the Redis store serves.
        pub const POLICIES: &[RedisPolicy] = &[$(RedisPolicy {
            name: $name,
            code: $code,
            format: $format,
            lua: $lua,
            bound: $bound,
        }),+];

        /// The plan script: `common.lua`, each policy's file registered
        /// under its code, `decide.lua`, then `plan.lua`.
        pub(crate) const PLAN: &str = concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/common.lua")),
            $("policies['", $code, "'] = (function()\n", $lua, "end)()\n",)+
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/decide.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/plan.lua")),
        );

        /// The batch script: the plan script with `batch.lua` as its
        /// driver in place of `plan.lua`.
        pub(crate) const BATCH: &str = concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/common.lua")),
            $("policies['", $code, "'] = (function()\n", $lua, "end)()\n",)+
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/decide.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/batch.lua")),
        );

        /// The refund script: `common.lua`, each policy's file registered
        /// under its code, then `refund.lua`.
        pub(crate) const REFUND: &str = concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/common.lua")),
            $("policies['", $code, "'] = (function()\n", $lua, "end)()\n",)+
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/refund.lua")),
        );

        /// The claim script: `common.lua`, each policy's file registered
        /// under its code, then `claim.lua`.
        pub(crate) const CLAIM: &str = concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/common.lua")),
            $("policies['", $code, "'] = (function()\n", $lua, "end)()\n",)+
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/claim.lua")),
        );

        /// The inspection script: `common.lua`, each policy's file
        /// registered under its code, then `inspect.lua`.
        pub(crate) const INSPECT: &str = concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/common.lua")),
            $("policies['", $code, "'] = (function()\n", $lua, "end)()\n",)+
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/inspect.lua")),
        );
    };
}

// One line per file of `src/scripts/policies/`, written by build.rs.
include!(concat!(env!("OUT_DIR"), "/policies.rs"));

/// The descriptor of the policy named `name`, or `None` when the Redis store
/// does not serve it.
pub fn by_name(name: &str) -> Option<&'static RedisPolicy> {
    POLICIES.iter().find(|p| p.name == name)
}

/// The descriptor of the policy with Redis code `code`.
pub fn by_code(code: &str) -> Option<&'static RedisPolicy> {
    POLICIES.iter().find(|p| p.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_policy_has_exactly_one_descriptor() {
        for name in tollgate::POLICY_NAMES {
            let count = POLICIES.iter().filter(|p| p.name == *name).count();
            assert_eq!(count, 1, "{name}: {count} descriptors");
        }
        for policy in POLICIES {
            assert!(
                tollgate::POLICY_NAMES.contains(&policy.name),
                "{} is not a core policy",
                policy.name
            );
        }
    }

    #[test]
    fn codes_are_unique_plain_lua_strings() {
        for (i, policy) in POLICIES.iter().enumerate() {
            assert!(
                !policy.code.is_empty() && policy.code.bytes().all(|b| b.is_ascii_alphanumeric()),
                "{:?}",
                policy.code
            );
            assert!(policy.format >= 1);
            assert!(POLICIES[i + 1..].iter().all(|p| p.code != policy.code));
            assert_eq!(by_code(policy.code).map(|p| p.name), Some(policy.name));
            assert_eq!(by_name(policy.name).map(|p| p.code), Some(policy.code));
        }
        assert!(by_name("leaky-bucket").is_none());
    }

    #[test]
    fn the_plan_script_registers_every_policy_file_under_its_code() {
        let mut expected = String::from(include_str!("scripts/common.lua"));
        for policy in POLICIES {
            assert!(policy.lua.trim_end().ends_with("return") || policy.lua.contains("\nreturn "));
            expected.push_str(&format!(
                "policies['{}'] = (function()\n{}end)()\n",
                policy.code, policy.lua
            ));
        }
        let registered = expected.clone();
        let decide = registered.clone() + include_str!("scripts/decide.lua");
        expected = decide.clone() + include_str!("scripts/plan.lua");
        assert_eq!(PLAN, expected);
        assert_eq!(
            BATCH,
            decide + include_str!("scripts/batch.lua"),
            "the batch script shares the plan script's per-call function"
        );
        assert_eq!(
            INSPECT,
            registered.clone() + include_str!("scripts/inspect.lua"),
            "the inspection script shares the helpers and the policy files"
        );
        assert_eq!(
            REFUND,
            registered.clone() + include_str!("scripts/refund.lua"),
            "the refund script shares the helpers and the policy files"
        );
        assert_eq!(
            CLAIM,
            registered + include_str!("scripts/claim.lua"),
            "the claim script shares the helpers and the policy files"
        );
        for driver in [
            include_str!("scripts/plan.lua"),
            include_str!("scripts/batch.lua"),
        ] {
            assert!(!driver.contains("local policies") && driver.contains("decide_call"));
        }
    }
}
