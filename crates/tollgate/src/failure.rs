//! [`FailurePolicy`]: what to answer when the store cannot decide. Defined
//! once here, as plain data with its config names, so that the guarded
//! store (`tollgate-guard`), the server's config, the Envoy service, the
//! tower layer and the proxy all speak of the same four choices.

use std::fmt;
use std::str::FromStr;

/// What to answer when the store fails (an error, a timeout, an open
/// circuit). The guarded store (`tollgate_guard::GuardedStore`) applies it;
/// front ends only translate its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    /// Let requests in, answered as for a client with no history (every
    /// limit at its full quota): a request whose cost exceeds a limit can
    /// never pass and is still rejected. Availability over limits.
    FailOpen,
    /// Reject every request, asking the client to retry after a short wait
    /// (the guard's fail-closed hint, 1 s by default).
    FailClosed,
    /// Decide with a local in-memory limiter, per process: each server then
    /// enforces the limits alone, so the total across servers may exceed
    /// them while the store is down.
    LocalFallback,
    /// Decide nothing: the guard hands the error back, and the front end
    /// answers "service unavailable" (HTTP `503`, gRPC `UNAVAILABLE`, which
    /// leaves the choice to Envoy's `failure_mode_deny`).
    Unavailable,
}

impl FailurePolicy {
    /// Every policy, in the order of [`FailurePolicy::NAMES`].
    pub const ALL: [FailurePolicy; 4] = [
        FailurePolicy::FailOpen,
        FailurePolicy::FailClosed,
        FailurePolicy::LocalFallback,
        FailurePolicy::Unavailable,
    ];

    /// The names accepted in configs and on the wire.
    pub const NAMES: [&'static str; 4] =
        ["fail-open", "fail-closed", "local-fallback", "unavailable"];

    /// The config name (`"fail-open"`, ...), also the `decided_by` string of
    /// a decision this policy answered.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::FailOpen => "fail-open",
            FailurePolicy::FailClosed => "fail-closed",
            FailurePolicy::LocalFallback => "local-fallback",
            FailurePolicy::Unavailable => "unavailable",
        }
    }

    /// The policy with config name `name`, if there is one (case-sensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of [`FailurePolicy::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure policy {name:?}: known ones are {}", FailurePolicy::NAMES.join(", "))]
pub struct UnknownFailurePolicy {
    /// The name that was given.
    pub name: String,
}

impl FromStr for FailurePolicy {
    type Err = UnknownFailurePolicy;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::from_name(name).ok_or_else(|| UnknownFailurePolicy {
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for (policy, name) in FailurePolicy::ALL.into_iter().zip(FailurePolicy::NAMES) {
            assert_eq!(policy.as_str(), name);
            assert_eq!(name.parse::<FailurePolicy>(), Ok(policy));
        }
        let error = "Fail-Open".parse::<FailurePolicy>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown failure policy \"Fail-Open\": known ones are fail-open, fail-closed, local-fallback, unavailable"
        );
    }
}
