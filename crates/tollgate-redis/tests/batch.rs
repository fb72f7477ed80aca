//! Batching (`RedisStoreConfig::batch_max`, `src/batch.rs`) on a real
//! `redis-server` spawned by each test: many concurrent callers get the
//! answers of the in-memory limiter for the order in which they queued; a
//! decision that fails in a batch fails alone, with the classification it
//! would have had alone; a whole batch that fails reaches every caller as
//! a transient error.
//!
//! The callers are futures polled in a fixed order by one task
//! ([`in_order`]): each queues its decision at its first poll, so the order
//! they queued in is the order of the list. They all queue before the first
//! call leaves (it leaves once the tasks already ready have had their turn),
//! so they go in batches from the first call on.

mod batching;

use std::time::Duration;

use batching::{
    assert_answers_in_arrival_order, at_once, config, in_order, plan, requests, runtime,
};
use tollgate::{PlanDecision, PlanLimiter};
use tollgate_redis::testing::RedisServer;
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError};

#[test]
fn concurrent_callers_get_the_memory_stores_answers_in_arrival_order() {
    let Some(server) = RedisServer::spawn("concurrent_callers_arrival_order") else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config("order", 1))
            .await
            .expect("connect");
        let plan = plan();
        let requests = requests(600, 7);
        let before = store.call_counts();
        assert_answers_in_arrival_order(&store, &plan, &requests).await;
        let counts = store.call_counts();
        let (decisions, calls) = (
            counts.decisions - before.decisions,
            counts.calls - before.calls,
        );
        assert_eq!(decisions, 600);
        // Batches of 16 from the first call on: ceil(600 / 16) = 38 calls
        // (with the first decision sent alone, as before, 39).
        assert_eq!(calls, 38, "{counts:?}");
        assert_eq!(counts.batches - before.batches, 38);
    });
}

#[test]
fn callers_on_tasks_of_their_own_that_are_ready_together_go_in_one_call() {
    let Some(server) = RedisServer::spawn("callers_on_tasks_of_their_own") else {
        return;
    };
    // As in a server: each caller on a task of its own (a connection), on
    // Tokio's multi-threaded scheduler, which runs a task just spawned
    // next; one worker, so that the ten tasks are ready on the same thread.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = RedisStore::connect(&server.url(), config("tasks", 1))
            .await
            .expect("connect");
        let plan = std::sync::Arc::new(plan());
        let before = store.call_counts();
        // Spawned from a task on the worker, so that all ten are ready on it
        // before any runs (as connections made ready by one poll are).
        let spawner = {
            let (store, plan) = (store.clone(), plan.clone());
            tokio::spawn(async move {
                let callers: Vec<_> = (0..10)
                    .map(|c| {
                        let (store, plan) = (store.clone(), plan.clone());
                        tokio::spawn(async move {
                            store.decide(&plan, &format!("t{c}"), 1_000, 1).await
                        })
                    })
                    .collect();
                let mut answers = Vec::new();
                for caller in callers {
                    answers.push(caller.await.expect("task").expect("decided"));
                }
                answers
            })
        };
        let reference = PlanLimiter::new();
        for (c, answer) in spawner.await.expect("spawner").into_iter().enumerate() {
            assert_eq!(answer, reference.check(&plan, &format!("t{c}"), 1_000, 1));
        }
        let counts = store.call_counts();
        // Not the first alone and the nine others a round trip later.
        assert_eq!(
            (counts.calls - before.calls, counts.batches - before.batches),
            (1, 1),
            "{counts:?}"
        );
    });
}

#[test]
fn with_several_batches_in_flight_each_client_gets_what_some_order_gives() {
    let Some(server) = RedisServer::spawn("several_batches_in_flight") else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config("flight", 4))
            .await
            .expect("connect");
        let plan = plan();
        // All at one time: each client's answers, whatever the order of the
        // batches, are the reference's for its 12 requests of cost 1 (the
        // order among equal requests changes nothing but which caller gets
        // which answer).
        let clients: Vec<String> = (0..40).map(|c| format!("c{c}")).collect();
        let twelve_each: Vec<&String> = (0..12).flat_map(|_| clients.iter()).collect();
        let futures = at_once(&store, &plan, &twelve_each, 50_000);
        let answers = in_order(futures).await;
        let reference = PlanLimiter::new();
        let expected: Vec<PlanDecision> = (0..12)
            .map(|_| reference.check(&plan, "one", 50_000, 1))
            .collect();
        for (c, client) in clients.iter().enumerate() {
            let mut got: Vec<PlanDecision> = answers
                .iter()
                .skip(c)
                .step_by(clients.len())
                .map(|a| a.as_ref().expect("decided").clone())
                .collect();
            got.sort_by_key(|d| std::cmp::Reverse(d.limits[0].decision.remaining));
            assert_eq!(got, expected, "{client}");
        }
        let counts = store.call_counts();
        assert!(counts.batches > 0 && counts.calls < 480, "{counts:?}");
    });
}

#[test]
fn a_decision_that_fails_in_a_batch_fails_alone_and_writes_nothing() {
    let Some(server) = RedisServer::spawn("a_decision_fails_alone") else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config("alone", 1))
            .await
            .expect("connect");
        let plan = plan();
        // A last-seen time no script wrote ("TOLLGATE ..." before any
        // write), and a state key of the wrong type (Redis's WRONGTYPE, from
        // a command inside the script).
        let garbled = store.keys().seen_key("garbled");
        assert_eq!(server.cli(&["SET", &garbled, "soon"]).trim(), "OK");
        let wrong = store.keys().limit_key("wrong", plan.limits()[0].id(), 2);
        assert_eq!(server.cli(&["HSET", &wrong, "f", "v"]).trim(), "1");
        let clients = [
            "a", "b", "garbled", "c", "a", "wrong", "b", "a", "garbled", "c",
        ];
        let futures = at_once(&store, &plan, &clients, 1_000);
        let answers = in_order(futures).await;
        let reference = PlanLimiter::new();
        for (client, answer) in clients.iter().zip(answers) {
            match *client {
                "garbled" => {
                    let error = answer.expect_err("a garbled state");
                    assert!(
                        matches!(&error, RedisStoreError::Script(m) if m.contains("last-seen")),
                        "{error:?}"
                    );
                    assert!(!error.is_transient());
                }
                "wrong" => {
                    let error = answer.expect_err("a state of the wrong type");
                    let RedisStoreError::Redis(e) = &error else {
                        panic!("{error:?}")
                    };
                    assert_eq!(e.code(), Some("WRONGTYPE"), "{error}");
                    assert!(!error.is_transient());
                }
                _ => assert_eq!(
                    answer.expect("decided"),
                    reference.check(&plan, client, 1_000, 1),
                    "{client}"
                ),
            }
        }
        // All ten in one batch.
        assert_eq!(store.call_counts().batches, 1);
        assert_eq!(server.cli(&["GET", &garbled]).trim(), "soon");
        assert_eq!(server.cli(&["TYPE", &wrong]).trim(), "hash");
        let wrong_seen = store.keys().seen_key("wrong");
        assert_eq!(server.cli(&["EXISTS", &wrong_seen]).trim(), "0");
    });
}

#[test]
fn out_of_memory_in_a_batch_is_transient_for_each_caller() {
    let Some(server) = RedisServer::spawn("out_of_memory_in_a_batch") else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config("oom", 1))
            .await
            .expect("connect");
        server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        assert_eq!(
            server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
            "OK"
        );
        let plan = plan();
        let clients: Vec<String> = (0..10).map(|c| format!("c{c}")).collect();
        let futures = at_once(&store, &plan, &clients, 1_000);
        for answer in in_order(futures).await {
            let error = answer.expect_err("OOM");
            let RedisStoreError::Redis(e) = &error else {
                panic!("{error:?}")
            };
            assert_eq!(e.code(), Some("OOM"), "{error}");
            assert!(error.is_transient());
        }
        assert_eq!(store.call_counts().batches, 1);
        assert_eq!(server.cli(&["DBSIZE"]).trim(), "0", "nothing written");
    });
}

#[test]
fn a_batch_that_fails_whole_is_a_transient_error_for_every_caller() {
    let Some(mut server) = RedisServer::spawn("a_batch_fails_whole") else {
        return;
    };
    runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config("whole", 1))
            .await
            .expect("connect");
        let plan = plan();
        // Redis stopped: the batch is in flight; then Redis dies, and every
        // call fails.
        server.stop_process();
        let clients: Vec<String> = (0..10).map(|c| format!("c{c}")).collect();
        let futures = at_once(&store, &plan, &clients, 1_000);
        let killer = async {
            // Once every caller has queued (the first poll of `in_order`).
            tokio::task::yield_now().await;
            server.kill();
        };
        let (answers, ()) = tokio::join!(in_order(futures), killer);
        for answer in answers {
            let error = answer.expect_err("Redis is gone");
            assert!(error.is_transient(), "{error:?}");
        }
    });
}

#[test]
fn each_decision_of_a_late_batch_is_refused_by_its_own_deadline() {
    let Some(server) = RedisServer::spawn("a_late_batch") else {
        return;
    };
    runtime().block_on(async {
        let config = RedisStoreConfig {
            timeout: Duration::from_millis(200),
            ..config("late", 1)
        };
        let store = RedisStore::connect(&server.url(), config)
            .await
            .expect("connect");
        let plan = plan();
        // Redis stopped for longer than the timeout: the batch waits in
        // flight, and every caller keeps waiting (nothing gives up here:
        // only the deadlines decide).
        server.stop_process();
        let clients: Vec<String> = (0..10).map(|c| format!("c{c}")).collect();
        let futures = at_once(&store, &plan, &clients, 1_000);
        let stall = async {
            // The stall itself, on Redis's clock: no answer depends on
            // how much longer than the timeout it lasts.
            tokio::time::sleep(Duration::from_millis(400)).await;
            server.continue_process();
        };
        let (answers, ()) = tokio::join!(in_order(futures), stall);
        for answer in answers {
            let error = answer.expect_err("late");
            assert!(
                matches!(error, RedisStoreError::DeadlinePassed { .. }),
                "{error:?}"
            );
        }
        assert_eq!(store.call_counts().batches, 1, "the ten went together");
        assert_eq!(server.cli(&["DBSIZE"]).trim(), "0", "nothing written");
        // And the store decides again.
        let answer = store.decide(&plan, "c0", 2_000, 1).await.expect("decided");
        assert_eq!(answer, PlanLimiter::new().check(&plan, "c0", 2_000, 1));
    });
}
