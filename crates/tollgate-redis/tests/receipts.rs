//! The receipts a consuming call leaves beside the client's last-seen key,
//! and the claim script that takes the call back by its receipt when its
//! reply was lost (`tollgate_redis::call::lost`), against a real `redis-server`:
//! called raw, as their KEYS and ARGV are documented in
//! `tollgate_redis::scripts`.

use redis::aio::MultiplexedConnection;
use redis::Script;
use tollgate_redis::testing::{current_thread_runtime, RedisServer, Relay};

const SEEN: &str = "receipts:{c:r}:seen";
const STATE: &str = "receipts:{c:r}:1";
const RECEIPTS: &str = "receipts:{c:r}:receipts";

/// A deadline far ahead, on Redis's clock (µs).
const FAR_AHEAD: u64 = 9_007_199_254_740_991;

async fn connection(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection")
}

/// One call of the plan script for client `r` under a token bucket of
/// `limit` per day, at `now`, with receipt `id` (`<tag>:<seq>`) and its
/// store's `watermark`: its reply.
async fn decide(
    connection: &mut MultiplexedConnection,
    now: u64,
    cost: u32,
    limit: u32,
    id: &str,
    watermark: u64,
) -> Vec<i64> {
    let script = Script::new(tollgate_redis::scripts::PLAN);
    script
        .load_async(connection)
        .await
        .expect("load the plan script");
    plan_call(now, cost, limit, id, watermark)
        .query_async(connection)
        .await
        .expect("decide")
}

/// The `EVALSHA` of [`decide`]'s call (the script must be loaded).
fn plan_call(now: u64, cost: u32, limit: u32, id: &str, watermark: u64) -> redis::Cmd {
    let script = Script::new(tollgate_redis::scripts::PLAN);
    let mut command = redis::cmd("EVALSHA");
    command
        .arg(script.get_hash())
        .arg(3)
        .arg(SEEN)
        .arg(STATE)
        .arg(RECEIPTS)
        .arg(now)
        .arg(cost)
        .arg(0)
        .arg(FAR_AHEAD)
        .arg("t")
        .arg(limit)
        .arg(u64::from(limit) * 86_400_000)
        .arg(0)
        .arg(id)
        .arg(watermark);
    command
}

/// The claim script's answer for the one call of receipt `id`, of `cost`
/// with `deadline`, under the token bucket of `limit` per day `decide`
/// uses: the call's entry (`[0]`, or `[1, restored]`), or `[-1, time]`.
async fn claim(
    connection: &mut MultiplexedConnection,
    id: &str,
    deadline: u64,
    cost: u32,
    limit: u32,
) -> redis::RedisResult<Vec<i64>> {
    let script = Script::new(tollgate_redis::scripts::CLAIM);
    let reply: redis::Value = claim_invocation(&script, &[(id, deadline, cost)], limit)
        .invoke_async(connection)
        .await?;
    let redis::Value::Array(mut entries) = reply else {
        panic!("{reply:?}");
    };
    if entries.first() == Some(&redis::Value::Int(-1)) {
        return Ok(redis::from_redis_value(redis::Value::Array(entries)).expect("numbers"));
    }
    assert_eq!(entries.len(), 1, "{entries:?}");
    Ok(redis::from_redis_value(entries.remove(0)).expect("numbers"))
}

/// The claim script called for calls `(id, deadline, cost)` of client `r`
/// under the token bucket of `limit` per day.
fn claim_invocation<'a>(
    script: &'a Script,
    calls: &[(&str, u64, u32)],
    limit: u32,
) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.key(SEEN);
    invocation.key(RECEIPTS).key(STATE);
    invocation.arg(calls.len());
    for &(id, deadline, cost) in calls {
        invocation
            .arg(1)
            .arg(SEEN)
            .arg(STATE)
            .arg(id)
            .arg(deadline)
            .arg(cost)
            .arg("t")
            .arg(limit)
            .arg(u64::from(limit) * 86_400_000);
    }
    invocation
}

/// The claim script's error for one call (`a:7`, of cost 1, under a token
/// bucket of 10 a day) whose last-seen key is `seen`, sent with `keys` as
/// its KEYS.
async fn refused_claim(
    connection: &mut MultiplexedConnection,
    keys: &[&str],
    seen: &str,
) -> redis::RedisError {
    let script = Script::new(tollgate_redis::scripts::CLAIM);
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(*key);
    }
    invocation.arg(1).arg(1).arg(seen).arg(STATE);
    invocation.arg("a:7").arg(0).arg(1);
    invocation.arg("t").arg(10).arg(864_000_000);
    invocation
        .invoke_async::<redis::Value>(connection)
        .await
        .expect_err("refused")
}

/// What is left of the bucket of `limit` per day at `now` (a look).
async fn remaining(connection: &mut MultiplexedConnection, now: u64, limit: u32) -> i64 {
    decide(connection, now, 0, limit, "f:1", 1).await[4]
}

#[test]
fn a_call_is_taken_back_once_and_only_after_its_deadline() {
    let Some(server) = RedisServer::spawn("a_call_is_taken_back_once") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let mut c = connection(&server).await;
        // Two calls use 2 and 3 of 10; the first is still open when the
        // second is decided (the watermark is its number).
        decide(&mut c, 1_000, 2, 10, "a:41", 41).await;
        decide(&mut c, 2_000, 3, 10, "a:42", 41).await;
        // Refused and asking calls leave no receipt.
        decide(&mut c, 3_000, 50, 10, "a:43", 41).await;
        decide(&mut c, 3_001, 0, 10, "a:44", 41).await;
        assert_eq!(remaining(&mut c, 3_002, 10).await, 5);

        let early = claim(&mut c, "a:42", FAR_AHEAD, 3, 10)
            .await
            .expect("claim");
        assert_eq!((early.len(), early[0]), (2, -1), "{early:?}");
        assert_eq!(
            remaining(&mut c, 3_002, 10).await,
            5,
            "nothing before the deadline"
        );
        assert_eq!(
            claim(&mut c, "a:42", 0, 3, 10).await.expect("claim"),
            vec![1, 1]
        );
        assert_eq!(remaining(&mut c, 3_002, 10).await, 8);
        assert_eq!(
            claim(&mut c, "a:42", 0, 3, 10).await.expect("claim"),
            vec![0],
            "claimed twice"
        );
        for id in ["a:43", "a:44", "a:4", "b:41", "a:2"] {
            assert_eq!(
                claim(&mut c, id, 0, 1, 10).await.expect("claim"),
                vec![0],
                "{id}"
            );
        }
        assert_eq!(
            remaining(&mut c, 3_002, 10).await,
            8,
            "nothing taken back twice"
        );
        assert_eq!(
            claim(&mut c, "a:41", 0, 2, 10).await.expect("claim"),
            vec![1, 1]
        );
        assert_eq!(remaining(&mut c, 3_002, 10).await, 10);
        // The last-seen time stays; the receipts, all claimed, are gone.
        assert_eq!(server.cli(&["GET", SEEN]).trim(), "3002");
        assert_eq!(server.cli(&["EXISTS", RECEIPTS]).trim(), "0");
    });
}

/// A call sent again (redis-rs's cluster client resends a command whose
/// connection dropped, though it may have run) runs once: it answers as it
/// did, with the same undo numbers, and consumes nothing more; its claim
/// then takes back the one consumption.
#[test]
fn a_call_sent_again_answers_as_it_did_and_consumes_once() {
    let Some(server) = RedisServer::spawn("a_call_sent_again_runs_once") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let mut c = connection(&server).await;
        decide(&mut c, 1_000, 2, 10, "a:1", 1).await;
        let first = decide(&mut c, 1_000, 3, 10, "a:2", 1).await;
        let again = decide(&mut c, 1_000, 3, 10, "a:2", 1).await;
        assert_eq!(first[2], 1, "allowed: {first:?}");
        assert_eq!(&again[1..], &first[1..], "answered as it was");
        assert_eq!(remaining(&mut c, 1_000, 10).await, 5);
        // Sent again once another call has consumed after it, it still
        // answers allowed (it was), counting both once.
        decide(&mut c, 1_000, 4, 10, "b:1", 1).await;
        let late = decide(&mut c, 1_000, 3, 10, "a:2", 1).await;
        assert_eq!((late[2], late[4]), (1, 1), "allowed: {late:?}");
        assert_eq!(&late[7..], &first[7..], "its undo numbers");
        assert_eq!(remaining(&mut c, 1_000, 10).await, 1);
        // A call that asks (cost 0) or is refused leaves no receipt, so it
        // is simply decided again.
        let refused = decide(&mut c, 1_000, 5, 10, "a:3", 1).await;
        assert_eq!(refused[2], 0, "{refused:?}");
        let refused_again = decide(&mut c, 1_000, 5, 10, "a:3", 1).await;
        assert_eq!(&refused_again[1..], &refused[1..]);
        assert_eq!(
            claim(&mut c, "a:2", 0, 3, 10).await.expect("claim"),
            vec![1, 0],
            "a token bucket changed since is kept as it is"
        );
    });
}

/// A call sent again on a new connection, and answered from its receipt:
/// a `WAIT` behind it there (`replicas_to_ack`: `src/replicas.rs`) waits
/// until the replicas hold everything written so far, the first run's
/// writes among it, although the answer consumed nothing. A `WAIT` on a
/// connection that has run nothing is acknowledged at once by any replica
/// connected, whatever it lacks (seen here too). Redis 7.0, installed here,
/// moves a connection's offset to the server's after any command, so the
/// answer's own write (the receipts' expiry, set again) is not what the
/// test turns on here; it keeps the guarantee on a Redis that moves it only
/// for commands that write. Here the replica replicates through a relay
/// that holds what it would hear from the first run on.
#[test]
fn a_wait_behind_a_call_sent_again_waits_for_its_first_runs_writes() {
    let Some(master) = RedisServer::spawn("a_call_sent_again_writes") else {
        return;
    };
    let relay = Relay::start(master.port());
    let _replica =
        RedisServer::spawn_replica_of("a_call_sent_again_writes", relay.port()).expect("replica");
    current_thread_runtime().block_on(async {
        relay.hold_replies();
        let mut c = connection(&master).await;
        let first = decide(&mut c, 1_000, 3, 10, "a:1", 1).await;
        assert_eq!(first[2], 1, "allowed: {first:?}");

        let mut again = connection(&master).await;
        let fresh: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(200)
            .query_async(&mut again)
            .await
            .expect("WAIT");
        assert_eq!(
            fresh, 1,
            "a connection that ran nothing: acknowledged at once"
        );
        let mut again = connection(&master).await;
        let (answer, acknowledged): (Vec<i64>, i64) = redis::pipe()
            .add_command(plan_call(1_000, 3, 10, "a:1", 1))
            .cmd("WAIT")
            .arg(1)
            .arg(200)
            .query_async(&mut again)
            .await
            .expect("sent again, then WAIT");
        assert_eq!(&answer[1..], &first[1..], "answered as it was");
        assert_eq!(acknowledged, 0, "the replica never heard the first run");
    });
}

/// One claim of a client's lost calls takes them all back, newest first:
/// under the token bucket each one's state is then still the one it stored
/// (oldest first, the oldest would find the newest's state and be kept).
#[test]
fn one_claim_takes_a_clients_calls_back_newest_first() {
    let Some(server) = RedisServer::spawn("one_claim_takes_a_clients_calls_back") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let mut c = connection(&server).await;
        decide(&mut c, 1_000, 2, 10, "a:1", 1).await;
        decide(&mut c, 1_000, 3, 10, "a:2", 1).await;
        decide(&mut c, 1_001, 1, 10, "a:3", 1).await;
        assert_eq!(remaining(&mut c, 1_002, 10).await, 4);
        let script = Script::new(tollgate_redis::scripts::CLAIM);
        let lost = [("a:1", 0, 2), ("a:2", 0, 3), ("a:9", 0, 1), ("a:3", 0, 1)];
        let reply: Vec<Vec<i64>> = claim_invocation(&script, &lost, 10)
            .invoke_async(&mut c)
            .await
            .expect("claim");
        assert_eq!(reply, vec![vec![1, 1], vec![1, 1], vec![0], vec![1, 1]]);
        assert_eq!(remaining(&mut c, 1_002, 10).await, 10);
        assert_eq!(server.cli(&["EXISTS", RECEIPTS]).trim(), "0");
    });
}

/// A store's consuming call drops its own closed receipts (below its
/// watermark), and no other store's.
#[test]
fn closed_receipts_are_dropped_by_their_own_store() {
    let Some(server) = RedisServer::spawn("closed_receipts_are_dropped") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let mut c = connection(&server).await;
        decide(&mut c, 1_000, 1, 1_000, "b:7", 7).await;
        for seq in 1..=200u64 {
            let reply = decide(&mut c, 1_000 + seq, 1, 1_000, &format!("a:{seq}"), seq).await;
            assert_eq!(reply[2], 1, "call {seq} allowed");
        }
        let value = server.cli(&["GET", RECEIPTS]);
        assert_eq!(value.trim().matches('|').count(), 2, "{value}");
        assert_eq!(
            claim(&mut c, "a:199", 0, 1, 1_000).await.expect("claim"),
            vec![0],
            "closed"
        );
        assert_eq!(
            claim(&mut c, "a:200", 0, 1, 1_000).await.expect("claim"),
            vec![1, 1]
        );
        // b's use, from before a's 200, no longer stored as it was: kept.
        assert_eq!(
            claim(&mut c, "b:7", 0, 1, 1_000).await.expect("claim"),
            vec![1, 0]
        );
    });
}

/// Open receipts are kept up to 1 MiB per client, newest first: a client
/// whose receipts reached it (as after a long storm of dropped
/// connections) loses the oldest at its next consuming call.
#[test]
fn a_clients_open_receipts_are_bounded_newest_kept() {
    let Some(server) = RedisServer::spawn("a_clients_open_receipts_are_bounded") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let mut c = connection(&server).await;
        decide(&mut c, 1_000, 1, 10_000, "a:1", 1).await;
        // 70,000 more open receipts of other calls (about 1.3 MiB) after it.
        let stored = server.cli(&["GET", RECEIPTS]);
        let newer: String = (2..70_002u64)
            .rev()
            .map(|seq| format!("|a:{seq},1000,-1,0"))
            .collect();
        let _: () = redis::cmd("SET")
            .arg(RECEIPTS)
            .arg(format!("{newer}{}", stored.trim()))
            .arg("PX")
            .arg(180_000)
            .query_async(&mut c)
            .await
            .expect("SET");
        decide(&mut c, 1_001, 1, 10_000, "a:70002", 1).await;
        let value = server.cli(&["GET", RECEIPTS]);
        let length = value.trim().len();
        assert!((1_048_576..1_048_700).contains(&length), "{length} bytes");
        assert!(value.starts_with("|a:70002,1001,"), "the newest first");
        assert_eq!(
            claim(&mut c, "a:1", 0, 1, 10_000).await.expect("claim"),
            vec![0],
            "pushed out"
        );
        assert_eq!(
            claim(&mut c, "a:70002", 0, 1, 10_000).await.expect("claim"),
            vec![1, 1]
        );
    });
}

#[test]
fn bad_claims_are_refused_before_any_write() {
    let Some(server) = RedisServer::spawn("bad_claims_are_refused") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let mut c = connection(&server).await;
        decide(&mut c, 1_000, 1, 10, "a:7", 7).await;
        let before = (server.cli(&["GET", RECEIPTS]), server.cli(&["GET", STATE]));
        for id in ["x7", "", "7", "g:7", "12345678901234567:7"] {
            let error = claim(&mut c, id, 0, 1, 10).await.expect_err("refused");
            assert_eq!(error.code(), Some("TOLLGATE"), "{id:?}: {error}");
        }
        for (cost, limit) in [(0, 10), (1, 0)] {
            let error = claim(&mut c, "a:7", 0, cost, limit)
                .await
                .expect_err("refused");
            assert_eq!(error.code(), Some("TOLLGATE"), "{cost} {limit}: {error}");
        }
        // A receipt that does not fit the call (a call of two limits).
        let script = Script::new(tollgate_redis::scripts::CLAIM);
        let mut invocation = script.key(SEEN);
        invocation.key(RECEIPTS).key(STATE).key("receipts:{c:r}:2");
        invocation
            .arg(1)
            .arg(2)
            .arg(SEEN)
            .arg(STATE)
            .arg("receipts:{c:r}:2");
        invocation.arg("a:7").arg(0).arg(1);
        for _ in 0..2 {
            invocation.arg("t").arg(10).arg(864_000_000);
        }
        let error = invocation
            .invoke_async::<redis::Value>(&mut c)
            .await
            .expect_err("refused");
        assert!(error.to_string().contains("undo numbers"), "{error}");
        // A call of another client.
        let other = "receipts:{c:r}:other";
        let error = refused_claim(&mut c, &[SEEN, RECEIPTS, STATE], other).await;
        assert!(error.to_string().contains("not of the client"), "{error}");
        // Keys it would touch undeclared: Redis could not check, while the
        // client's slot moves, that the node holds them.
        for keys in [&[SEEN, STATE][..], &[SEEN, RECEIPTS], &[SEEN, STATE, STATE]] {
            let error = refused_claim(&mut c, keys, SEEN).await;
            assert_eq!(error.code(), Some("TOLLGATE"), "{keys:?}: {error}");
        }
        let after = (server.cli(&["GET", RECEIPTS]), server.cli(&["GET", STATE]));
        assert_eq!(after, before, "nothing written");
    });
}
