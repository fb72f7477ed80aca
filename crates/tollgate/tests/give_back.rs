//! The memory store's receipts against a model (proptest): a check given
//! back leaves the client as a limiter that refused it would, and a use
//! that another request followed is taken out of a sliding log and kept by
//! the token bucket and GCRA.
//!
//! The model is a second limiter fed the requests as they came out: each
//! consumed request with its cost, and every other one (refused, or given
//! back) as a request that asks for nothing at its time, since a refused
//! request still records its time.

use proptest::prelude::*;
use tollgate::{AnyPolicy, GivenBack, Limit, Plan, PlanLimiter, Receipt, POLICY_NAMES};

const CLIENTS: [&str; 2] = ["a", "b"];

/// One request: for a client, so many ms after the one before, at a cost;
/// given back or kept, and, when given back, maybe after another request
/// of the same client (so many ms later, at its own cost) was decided.
#[derive(Debug, Clone, Copy)]
struct Step {
    client: usize,
    after_ms: u64,
    cost: u32,
    given_back: bool,
    between: Option<(u64, u32)>,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = (
        0..CLIENTS.len(),
        0..400u64,
        0..=3u32,
        any::<bool>(),
        prop::option::of((0..400u64, 0..=3u32)),
    );
    let step = step.prop_map(|(client, after_ms, cost, given_back, between)| Step {
        client,
        after_ms,
        cost,
        given_back,
        between,
    });
    prop::collection::vec(step, 1..24)
}

/// Two limits of `policy`, so that a give-back restores every limit of
/// the plan.
fn plan(policy: &str) -> Plan {
    let limit = |name: &str, limit, window| {
        Limit::new(
            name,
            AnyPolicy::from_name(policy, limit, window).unwrap(),
            false,
        )
    };
    Plan::new("p", vec![limit("short", 3, 900), limit("long", 5, 3_000)]).unwrap()
}

/// The tested limiter and the model, fed the same requests.
struct Pair<'a> {
    policy: &'a str,
    plan: &'a Plan,
    tested: PlanLimiter,
    model: PlanLimiter,
}

impl Pair<'_> {
    /// A request both answer alike and both keep.
    fn kept(&self, client: &str, now: u64, cost: u32) -> Result<bool, TestCaseError> {
        let tested = self.tested.check(self.plan, client, now, cost);
        let model = self.model.check(self.plan, client, now, cost);
        prop_assert_eq!(&tested, &model, "{} at {}, cost {}", client, now, cost);
        Ok(tested.allowed)
    }

    /// A request of `step`, then its give-back.
    fn given_back(&self, step: &Step, now: u64) -> Result<u64, TestCaseError> {
        let client = CLIENTS[step.client];
        let answer = self
            .tested
            .check_returnable(self.plan, client, now, step.cost);
        // The model answers the request without keeping it.
        let mut states = self
            .model
            .store()
            .get(client)
            .map(|e| e.state)
            .unwrap_or_default();
        let at = self
            .model
            .store()
            .get(client)
            .map_or(now, |e| e.last_seen.max(now));
        let model = tollgate::check_plan(self.plan, &mut states, at, step.cost);
        prop_assert_eq!(
            &answer.decision,
            &model,
            "{} at {}, cost {}",
            client,
            now,
            step.cost
        );
        let Some(receipt) = answer.receipt else {
            prop_assert!(
                !answer.decision.allowed || step.cost == 0,
                "no receipt for a use"
            );
            self.model.check(self.plan, client, now, 0);
            return self.between(step, now).map(|(at, _)| at);
        };
        prop_assert!(answer.decision.allowed && step.cost > 0);
        let Some((between_at, used_between)) = self.between_tested_only(step, now) else {
            prop_assert_eq!(self.tested.give_back(receipt), GivenBack::Restored);
            self.model.check(self.plan, client, now, 0);
            return Ok(now);
        };
        self.give_back_after(step, now, receipt, between_at, used_between)
    }

    /// The give-back of a use that another request followed.
    fn give_back_after(
        &self,
        step: &Step,
        now: u64,
        receipt: Receipt,
        between_at: u64,
        used_between: u32,
    ) -> Result<u64, TestCaseError> {
        let client = CLIENTS[step.client];
        // The sliding log takes a use out whatever followed it; the others
        // keep a use that another one followed.
        let kept = used_between > 0 && self.policy != "sliding-window";
        let want = if kept {
            GivenBack::Kept
        } else {
            GivenBack::Restored
        };
        prop_assert_eq!(
            self.tested.give_back(receipt),
            want,
            "{} at {}",
            client,
            now
        );
        self.model
            .check(self.plan, client, now, if kept { step.cost } else { 0 });
        let model = self
            .model
            .check(self.plan, client, between_at, used_between);
        prop_assert!(model.allowed || used_between == 0);
        Ok(between_at)
    }

    /// The request between the use and its give-back, on the tested
    /// limiter only: its time, and what it consumed.
    fn between_tested_only(&self, step: &Step, now: u64) -> Option<(u64, u32)> {
        let (after, cost) = step.between?;
        let at = now + after;
        let allowed = self
            .tested
            .check(self.plan, CLIENTS[step.client], at, cost)
            .allowed;
        Some((at, if allowed { cost } else { 0 }))
    }

    /// The request between, when nothing was used: kept by both.
    fn between(&self, step: &Step, now: u64) -> Result<(u64, u32), TestCaseError> {
        match step.between {
            Some((after, cost)) => {
                self.kept(CLIENTS[step.client], now + after, cost)?;
                Ok((now + after, cost))
            }
            None => Ok((now, 0)),
        }
    }
}

fn run(policy: &str, steps: &[Step]) -> Result<(), TestCaseError> {
    let plan = plan(policy);
    let pair = Pair {
        policy,
        plan: &plan,
        tested: PlanLimiter::new(),
        model: PlanLimiter::new(),
    };
    let mut now = 0;
    for step in steps {
        now += step.after_ms;
        if step.given_back {
            now = pair.given_back(step, now)?;
        } else {
            pair.kept(CLIENTS[step.client], now, step.cost)?;
            now = pair.between(step, now)?.0;
        }
    }
    // Afterwards both answer every client alike, as time goes on.
    for later in [0, 250, 1_000, 2_999, 3_000] {
        for client in CLIENTS {
            for cost in [3, 1] {
                pair.kept(client, now + later, cost)?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn a_given_back_check_leaves_what_a_refused_one_would(steps in steps()) {
        for policy in POLICY_NAMES {
            run(policy, &steps)?;
        }
    }
}

#[test]
fn a_receipt_of_another_store_is_kept() {
    let plan = plan("gcra");
    let limiter = PlanLimiter::new();
    assert!(limiter.check(&plan, "a", 0, 3).allowed);
    assert_eq!(
        limiter.give_back(Receipt::new("not a memory receipt")),
        GivenBack::Kept
    );
    assert!(
        !limiter.check(&plan, "a", 0, 1).allowed,
        "nothing given back"
    );
}

#[test]
fn a_client_gone_since_has_nothing_left_to_take_back() {
    let plan = plan("token-bucket");
    let limiter = PlanLimiter::new();
    let answer = limiter.check_returnable(&plan, "a", 0, 2);
    let receipt = answer.receipt.expect("a use");
    // Swept once every limit's state stopped mattering.
    assert_eq!(limiter.sweep(std::slice::from_ref(&plan), 10_000, true), 1);
    assert_eq!(limiter.give_back(receipt), GivenBack::Restored);
    assert_eq!(limiter.clients(), 0, "nothing stored for it");
}

/// A client evicted after its check and stored anew in the same
/// millisecond holds another request's use, even one equal to the check's:
/// giving the check back must take none of it (every policy; the new
/// request's cost equal to the check's, then larger).
#[test]
fn a_client_evicted_and_stored_anew_keeps_the_new_requests_use() {
    for policy in POLICY_NAMES {
        for cost in [1, 2] {
            let plan = plan(policy);
            // Two clients per shard, the newcomers using more than a: a
            // newcomer in a's shard evicts a, which gives back the least.
            let limiter = PlanLimiter::with_max_clients(128);
            let answer = limiter.check_returnable(&plan, "a", 1_000, 1);
            let receipt = answer.receipt.expect("a use");
            let mut newcomers = 0;
            while limiter.store().get("a").is_some() {
                newcomers += 1;
                assert!(newcomers < 10_000, "a was never evicted");
                limiter.check(&plan, &format!("n{newcomers}"), 1_000, 3);
            }
            assert!(limiter.check(&plan, "a", 1_000, cost).allowed);
            let expected = limiter.peek(&plan, "a", 1_000);
            assert_eq!(
                limiter.give_back(receipt),
                GivenBack::Kept,
                "{policy}, cost {cost}"
            );
            assert_eq!(
                limiter.peek(&plan, "a", 1_000),
                expected,
                "{policy}, cost {cost}: the new use stays"
            );
        }
    }
}

/// Giving back still restores when other clients of the store, but none
/// removed, came and went in between.
#[test]
fn a_check_given_back_in_a_busy_capped_store_is_restored() {
    let plan = plan("sliding-window");
    let limiter = PlanLimiter::with_max_clients(6_400);
    let answer = limiter.check_returnable(&plan, "a", 1_000, 2);
    for i in 0..50 {
        limiter.check(&plan, &format!("n{i}"), 1_000, 1);
    }
    assert_eq!(limiter.store().evicted(), 0);
    assert_eq!(
        limiter.give_back(answer.receipt.expect("a use")),
        GivenBack::Restored
    );
    assert!(limiter.check(&plan, "a", 1_000, 3).allowed, "all 3 back");
}
