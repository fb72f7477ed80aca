//! The receipts a consuming call leaves beside the client's last-seen time,
//! and the claim script that finds one when the call's reply was lost
//! (`tollgate_redis::lost`), against a real `redis-server`: called raw, as
//! their KEYS and ARGV are documented in `tollgate_redis::scripts`.

use redis::aio::MultiplexedConnection;
use redis::Script;
use tollgate_redis::testing::RedisServer;

const SEEN: &str = "receipts:{c:r}:seen";
const STATE: &str = "receipts:{c:r}:1";
const RECEIPTS: &str = "receipts:{c:r}:receipts";

/// A deadline far ahead, on Redis's clock (µs).
const FAR_AHEAD: u64 = 9_007_199_254_740_991;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

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
    let mut invocation = script.key(SEEN);
    invocation.key(STATE);
    invocation
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
    invocation.invoke_async(connection).await.expect("decide")
}

/// The claim script's reply for receipt `id` of a call with `deadline`.
async fn claim(
    connection: &mut MultiplexedConnection,
    id: &str,
    deadline: u64,
) -> redis::RedisResult<Vec<i64>> {
    Script::new(tollgate_redis::scripts::CLAIM)
        .key(SEEN)
        .arg(id)
        .arg(deadline)
        .arg(1)
        .invoke_async(connection)
        .await
}

#[test]
fn a_receipt_is_claimed_once_and_only_after_its_calls_deadline() {
    let Some(server) = RedisServer::spawn("a_receipt_is_claimed_once") else {
        return;
    };
    runtime().block_on(async {
        let mut c = connection(&server).await;
        // A first call anchors the bucket; the second consumes from it,
        // the first still open (the watermark is its number).
        let first = decide(&mut c, 1_000, 2, 10, "a:41", 41).await;
        let second = decide(&mut c, 2_000, 3, 10, "a:42", 41).await;
        // Refused and asking calls leave no receipt.
        decide(&mut c, 3_000, 50, 10, "a:43", 41).await;
        decide(&mut c, 3_001, 0, 10, "a:44", 41).await;

        let early = claim(&mut c, "a:42", FAR_AHEAD).await.expect("claim");
        assert_eq!((early.len(), early[0]), (2, -1), "{early:?}");
        let found = claim(&mut c, "a:42", 0).await.expect("claim");
        // now_used, consumed, then the undo numbers the call's reply held.
        assert_eq!(found, vec![1, 2_000, 1, second[7], second[8]]);
        assert_eq!(
            claim(&mut c, "a:42", 0).await.expect("claim"),
            vec![0],
            "claimed twice"
        );
        for id in ["a:43", "a:44", "a:4", "b:41", "a:2"] {
            assert_eq!(claim(&mut c, id, 0).await.expect("claim"), vec![0], "{id}");
        }
        let older = claim(&mut c, "a:41", 0).await.expect("claim");
        assert_eq!(older, vec![1, 1_000, 1, first[7], first[8]]);
        // The last-seen time stays; the receipts, all claimed, are gone.
        assert_eq!(server.cli(&["GET", SEEN]).trim(), "3001");
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
    runtime().block_on(async {
        let mut c = connection(&server).await;
        decide(&mut c, 1_000, 1, 1_000, "b:7", 7).await;
        for seq in 1..=200u64 {
            let reply = decide(&mut c, 1_000 + seq, 1, 1_000, &format!("a:{seq}"), seq).await;
            assert_eq!(reply[2], 1, "call {seq} allowed");
        }
        let value = server.cli(&["GET", RECEIPTS]);
        assert_eq!(value.trim().matches('|').count(), 2, "{value}");
        assert_eq!(
            claim(&mut c, "a:199", 0).await.expect("claim"),
            vec![0],
            "closed"
        );
        assert_eq!(
            claim(&mut c, "a:200", 0).await.expect("claim")[..2],
            [1, 1_200]
        );
        assert_eq!(
            claim(&mut c, "b:7", 0).await.expect("claim")[..2],
            [1, 1_000]
        );
    });
}

/// Open receipts are kept up to about 4 KiB per client, newest first.
#[test]
fn a_clients_open_receipts_are_bounded_newest_kept() {
    let Some(server) = RedisServer::spawn("a_clients_open_receipts_are_bounded") else {
        return;
    };
    runtime().block_on(async {
        let mut c = connection(&server).await;
        for seq in 1..=400u64 {
            let reply = decide(&mut c, 1_000 + seq, 1, 1_000, &format!("a:{seq}"), 1).await;
            assert_eq!(reply[2], 1, "call {seq} allowed");
        }
        let value = server.cli(&["GET", RECEIPTS]);
        let length = value.trim().len();
        assert!((4_000..4_200).contains(&length), "{length} bytes");
        assert_eq!(
            claim(&mut c, "a:400", 0).await.expect("claim")[..2],
            [1, 1_400]
        );
        assert_eq!(
            claim(&mut c, "a:300", 0).await.expect("claim")[..2],
            [1, 1_300]
        );
        assert_eq!(
            claim(&mut c, "a:1", 0).await.expect("claim"),
            vec![0],
            "pushed out"
        );
    });
}

#[test]
fn bad_claims_are_refused_before_any_write() {
    let Some(server) = RedisServer::spawn("bad_claims_are_refused") else {
        return;
    };
    runtime().block_on(async {
        let mut c = connection(&server).await;
        decide(&mut c, 1_000, 1, 10, "a:7", 7).await;
        let before = server.cli(&["GET", RECEIPTS]);
        for (id, deadline) in [
            ("x7", 0),
            ("", 0),
            ("7", 0),
            ("g:7", 0),
            ("12345678901234567:7", 0),
        ] {
            let error = claim(&mut c, id, deadline).await.expect_err("refused");
            assert_eq!(error.code(), Some("TOLLGATE"), "{id:?}: {error}");
        }
        // A receipt that does not fit the call (two limits claimed of one).
        let error = Script::new(tollgate_redis::scripts::CLAIM)
            .key(SEEN)
            .arg("a:7")
            .arg(0)
            .arg(2)
            .invoke_async::<Vec<i64>>(&mut c)
            .await
            .expect_err("refused");
        assert!(error.to_string().contains("undo numbers"), "{error}");
        assert_eq!(server.cli(&["GET", RECEIPTS]), before, "nothing written");
    });
}
