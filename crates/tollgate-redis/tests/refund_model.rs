//! Refunds against a model, for random interleavings (proptest).
//!
//! Two clients; each step is a request answered by the store (through a
//! connection of its own) or a request whose reply is held on its way back
//! (a [`Relay`]) so that its caller, a [`GuardedStore`], gives up and
//! answers it by its failure policy, although Redis ran it. Then the replies
//! pass, and the store refunds what the abandoned requests consumed.
//!
//! The model: while replies are held, every request ran in Redis, so the
//! in-memory limiter fed every request predicts every answered one. After
//! the refunds, an abandoned request that consumed is taken back: under the
//! sliding log always (its units come out of the log), under the token
//! bucket and GCRA exactly when no request of its client that the store
//! answered consumed after it (refunds unwind a client's newest first, and
//! a state another request changed is kept). The client's state is then the in-memory limiter's fed
//! the requests as they came out: each consumed request with its cost, and
//! every other one (refused, refunded) as a request that asks for nothing
//! at its time, since a refused request still records its time.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::Store;
use tollgate::{
    AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan, PlanLimiter, Policy, POLICY_NAMES,
};
use tollgate_guard::{BreakerConfig, GuardedStore};
use tollgate_redis::testing::{counts_until, RedisServer, Relay};
use tollgate_redis::{CallCounts, RedisStore, RedisStoreConfig};

const TIMEOUT: Duration = Duration::from_millis(50);
const CLIENTS: [&str; 2] = ["a", "b"];

/// One request: answered by the store or abandoned, for a client, so many
/// ms after the one before, at a cost.
#[derive(Debug, Clone, Copy)]
struct Step {
    abandoned: bool,
    client: usize,
    after_ms: u64,
    cost: u32,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (any::<bool>(), 0..CLIENTS.len(), 0..400u64, 0..=3u32).prop_map(
            |(abandoned, client, after_ms, cost)| Step {
                abandoned,
                client,
                after_ms,
                cost,
            },
        ),
        1..10,
    )
}

/// A request as it came out: its time, and the units it consumed.
struct Outcome {
    step: Step,
    now: u64,
    consumed: bool,
    refunded: bool,
}

struct Setup {
    runtime: tokio::runtime::Runtime,
    relay: Relay,
    held: RedisStore,
    direct: RedisStore,
}

/// The store whose replies are held: its calls are abandoned at `TIMEOUT`.
fn config(prefix: String) -> RedisStoreConfig {
    RedisStoreConfig {
        timeout: TIMEOUT,
        ..direct_config(prefix)
    }
}

/// The store that answers at once, with the default timeout: a loaded
/// machine may take longer than `TIMEOUT` to run a call that is not held.
fn direct_config(prefix: String) -> RedisStoreConfig {
    RedisStoreConfig {
        prefix,
        // Each abandoned request goes alone, so that it runs at once
        // rather than wait behind the held batch before it.
        batch_max: 1,
        ..RedisStoreConfig::default()
    }
}

impl Setup {
    fn new(server: &RedisServer) -> Setup {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let relay = Relay::start(server.port());
        let (held, direct) = runtime.block_on(async {
            let held = RedisStore::connect(&relay.url(), config("m".into()))
                .await
                .expect("connect");
            let direct = RedisStore::connect(&server.url(), direct_config("m".into()))
                .await
                .expect("connect");
            (held, direct)
        });
        Setup {
            runtime,
            relay,
            held,
            direct,
        }
    }

    fn run(&self, policy: &str, case: usize, steps: &[Step]) -> Result<(), TestCaseError> {
        let prefix = format!("model-{policy}-{case}");
        let held = self
            .held
            .with_config(config(prefix.clone()))
            .expect("config");
        let direct = self
            .direct
            .with_config(direct_config(prefix))
            .expect("config");
        let core = AnyPolicy::from_name(policy, 5, 1_000).expect("policy");
        let plan = Plan::new("p", vec![Limit::new("l", core, false)]).expect("plan");
        self.runtime.block_on(async {
            // Loads the scripts (a request held on its first use would meet
            // NOSCRIPT late, and never run in time).
            // A loaded machine may not answer within `TIMEOUT` at once.
            let mut warm_up = held.decide(&plan, "warm-up", 0, 0).await;
            for _ in 0..20 {
                if warm_up.is_ok() {
                    break;
                }
                warm_up = held.decide(&plan, "warm-up", 0, 0).await;
            }
            warm_up.expect("warm up");
            let before = held.call_counts();
            let outcomes = self.steps(&held, &direct, &plan, steps).await?;
            self.check_refunds(&held, &direct, &plan, &outcomes, before)
                .await
        })
    }

    /// Runs `steps` with replies held, checks the answered ones against the
    /// limiter fed every request, and says what each one consumed.
    async fn steps(
        &self,
        held: &RedisStore,
        direct: &RedisStore,
        plan: &Plan,
        steps: &[Step],
    ) -> Result<Vec<Outcome>, TestCaseError> {
        let guard = GuardedStore::new(held.clone(), TIMEOUT, FailurePolicy::FailClosed)
            .with_breaker(BreakerConfig {
                failures: 0,
                ..BreakerConfig::default()
            });
        let every_request = PlanLimiter::new();
        let mut outcomes = Vec::new();
        let mut now = 1_000;
        self.relay.hold_replies();
        for &step in steps {
            now += step.after_ms;
            let client = CLIENTS[step.client];
            let ran = every_request.check(plan, client, now, step.cost);
            if step.abandoned {
                let got = guard
                    .check(plan, client, now, step.cost)
                    .await
                    .expect("check");
                prop_assert_ne!(got.decided_by, DecidedBy::Store);
            } else {
                let got = direct
                    .decide(plan, client, now, step.cost)
                    .await
                    .expect("decide");
                prop_assert_eq!(&got, &ran);
            }
            let consumed = ran.allowed && step.cost > 0;
            outcomes.push(Outcome {
                step,
                now,
                consumed,
                refunded: false,
            });
        }
        self.relay.release_replies();
        refunds_expected(&mut outcomes, plan.limits()[0].policy().name());
        Ok(outcomes)
    }

    /// Waits for the refunds expected, then compares each client's state
    /// with the model's.
    async fn check_refunds(
        &self,
        held: &RedisStore,
        direct: &RedisStore,
        plan: &Plan,
        outcomes: &[Outcome],
        before: CallCounts,
    ) -> Result<(), TestCaseError> {
        let refunded = outcomes.iter().filter(|o| o.refunded).count() as u64;
        let stale = outcomes
            .iter()
            .filter(|o| o.step.abandoned && o.consumed && !o.refunded)
            .count() as u64;
        let counts = counts_until(held, |counts| {
            counts.refunded - before.refunded == refunded
                && counts.refunds_stale - before.refunds_stale == stale
        })
        .await;
        let model = PlanLimiter::new();
        for o in outcomes {
            let cost = if o.consumed && !o.refunded {
                o.step.cost
            } else {
                0
            };
            let replayed = model.check(plan, CLIENTS[o.step.client], o.now, cost);
            prop_assert!(
                replayed.allowed,
                "the model refused what the store consumed"
            );
        }
        let last = outcomes.last().map_or(1_000, |o| o.now);
        for client in CLIENTS {
            for now in [last, last + 300, last + 999, last + 1_000, last + 5_000] {
                let got = direct.decide(plan, client, now, 0).await.expect("peek");
                prop_assert_eq!(
                    got,
                    model.check(plan, client, now, 0),
                    "{} at {}: {:?}",
                    client,
                    now,
                    counts
                );
            }
        }
        prop_assert_eq!(counts.refunded - before.refunded, refunded);
        prop_assert_eq!(counts.refunds_stale - before.refunds_stale, stale);
        prop_assert_eq!(counts.refunds_failed, before.refunds_failed);
        prop_assert_eq!(counts.refunds_pending, 0, "every refund ended");
        Ok(())
    }
}

/// Marks the abandoned requests that the refunds take back: under the
/// sliding log, every one that consumed (a log has no cap, so its units
/// come out whatever came after); under the others, those that no answered
/// request of their client consumed after.
fn refunds_expected(outcomes: &mut [Outcome], policy: &str) {
    for client in 0..CLIENTS.len() {
        for o in outcomes
            .iter_mut()
            .rev()
            .filter(|o| o.step.client == client)
        {
            if o.consumed && !o.step.abandoned && policy != "sliding-window" {
                break;
            }
            o.refunded = o.consumed && o.step.abandoned;
        }
    }
}

#[test]
fn refunds_restore_exactly_what_the_model_says() {
    let Some(server) = RedisServer::spawn("refunds_restore_exactly_what_the_model_says") else {
        return;
    };
    let setup = Setup::new(&server);
    for policy in POLICY_NAMES {
        let mut runner = TestRunner::new(Config {
            cases: 12,
            failure_persistence: None,
            ..Config::default()
        });
        let case = std::cell::Cell::new(0);
        let result = runner.run(&steps(), |steps| {
            case.set(case.get() + 1);
            setup.run(policy, case.get(), &steps)
        });
        if let Err(e) = result {
            panic!("{policy}: {e}");
        }
    }
}
