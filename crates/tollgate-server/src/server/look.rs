//! A look at a client's quota (`GET /v1/remaining`): a decision of cost 0,
//! told with the waits of a request of cost 1.
//!
//! The HTTP API reads a look's `allowed` as "would a request of cost 1 pass
//! now". A decision of cost 0 always passes, so its own waits are all 0,
//! which beside a limit with nothing left would say "not allowed, retry
//! now". So when some limit has nothing left, every limit's numbers are
//! read again from an inspection at the same time, where the look was
//! decided: the store ([`tollgate::Store::inspect`], the numbers of
//! `GET /v1/clients`), or the local fallback's limiter when that failure
//! policy answered. One reading of the client's state, whose remaining
//! units, resets and waits for a request of cost 1 agree with each other.
//! A look that `fail-open` or `fail-closed` answered is left as it is: no
//! limit decided it.

use tollgate::{DecidedBy, FailurePolicy, Inspection, PlanDecision, Store};

use super::{Decided, Server};
use crate::Error;

impl Server {
    /// Looks at `client`'s quota on its plan (or on the plan named `plan`),
    /// using nothing: [`Self::decide`] with cost 0 (counted as a look, and
    /// answered by the failure policy when the store fails), whose waits,
    /// overall and per limit, are those of a request of cost 1 (see the
    /// module's docs). Should the inspection fail after the look succeeded,
    /// the look is answered as it was decided.
    ///
    /// # Errors
    /// As [`Self::decide`].
    pub async fn look(&self, client: &str, plan: Option<&str>) -> Result<Decided, Error> {
        let now = self.inner.clock.now_ms();
        let mut decided = self.decide_at(client, plan, 0, Some(now)).await?;
        let decision = &decided.decision;
        if decision.limits.iter().all(|l| l.decision.remaining > 0) {
            return Ok(decided);
        }
        // Read again where the look was decided: the store, or the local
        // fallback's own limiter while the store fails.
        let inspected = match (decision.decided_by, &self.inner.guarded) {
            (DecidedBy::Store, _) => self.inner.store.inspect(decided.plan(), client, now).await,
            (DecidedBy::Failure(FailurePolicy::LocalFallback), Some(guarded)) => {
                guarded
                    .fallback()
                    .inspect(decided.plan(), client, now)
                    .await
            }
            _ => return Ok(decided),
        };
        match inspected {
            Ok(inspection) => take_waits(&mut decided.decision, &inspection),
            Err(error) => tracing::warn!(client, %error, "a look's inspection failed"),
        }
        Ok(decided)
    }
}

/// Every limit's remaining units, reset and wait (for a request of cost 1)
/// from `inspection`, and the plan's wait; unchanged when the two do not
/// name the same limits (a reload between them).
fn take_waits(look: &mut PlanDecision, inspection: &Inspection) {
    let same_limits = look.limits.len() == inspection.limits.len()
        && look
            .limits
            .iter()
            .zip(&inspection.limits)
            .all(|(l, s)| l.name == s.name);
    if !same_limits {
        return;
    }
    // A limit is at least 1, so a request of cost 1 always has a wait: one
    // of u64::MAX is a wait that saturated (a window of u64::MAX ms), not
    // "never" (an audit: null, where the check said 18446744073709551615).
    for (limit, state) in look.limits.iter_mut().zip(&inspection.limits) {
        limit.decision.remaining = state.remaining;
        limit.decision.reset_after_ms = state.reset_after_ms;
        limit.decision.retry_after_ms = Some(state.retry_after_ms);
    }
    look.retry_after_ms = Some(inspection.retry_after_ms);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::{AnyPolicy, Limit, LimitState, Plan, PlanLimiter};

    /// A look at a client whose one request filled a window of u64::MAX
    /// ms, told the waits an inspection at the same time read: the
    /// largest wait there is, not "never".
    #[test]
    fn a_saturated_wait_is_told_as_a_wait() {
        let policy = AnyPolicy::from_name("sliding-window", 1, u64::MAX).unwrap();
        let plan = Plan::new("p", vec![Limit::new("a", policy, false)]).unwrap();
        let limiter = PlanLimiter::new();
        assert!(limiter.check(&plan, "n", 0, 1).allowed);
        let mut look = limiter.check(&plan, "n", 0, 0);
        let inspection = Inspection {
            now_ms: 0,
            allowed: false,
            retry_after_ms: u64::MAX,
            limits: vec![LimitState {
                name: "a".into(),
                policy: "sliding-window",
                limit: 1,
                window_ms: u64::MAX,
                shadow: false,
                remaining: 0,
                reset_after_ms: u64::MAX,
                retry_after_ms: u64::MAX,
                log: None,
            }],
        };
        take_waits(&mut look, &inspection);
        assert_eq!(look.retry_after_ms, Some(u64::MAX));
        assert_eq!(look.limits[0].decision.retry_after_ms, Some(u64::MAX));
        assert_eq!(look.limits[0].decision.remaining, 0);
    }
}
