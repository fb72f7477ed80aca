//! A cluster grown by a node while the store decides: a client's slot
//! moving to a master just added, which has never loaded tollgate's
//! scripts and which the cluster client's `SCRIPT LOAD` (sent to the masters
//! that own slots) does not reach until the move is done. Against real
//! `redis-server` clusters each test starts.

use std::time::Duration;

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_redis::testing::{runtime, RedisCluster};
use tollgate_redis::{RedisStore, RedisStoreConfig};

/// A limit of 5 over a window far longer than the test.
fn plan() -> Plan {
    let policy = AnyPolicy::from_name("token-bucket", 5, 1_000_000).expect("policy");
    Plan::new("new-node", vec![Limit::new("5", policy, false)]).expect("plan")
}

/// The client whose slot moves.
const CLIENT: &str = "grown";

async fn connect(cluster: &RedisCluster, batch_max: usize) -> RedisStore {
    let urls = cluster.urls();
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let config = RedisStoreConfig {
        timeout: Duration::from_secs(3),
        batch_max,
        ..RedisStoreConfig::default()
    };
    RedisStore::connect_cluster(&seeds, config)
        .await
        .expect("connect")
}

/// One unit for the client at `at`: how many are left, or the error.
async fn take_one(store: &RedisStore, at: u64) -> Result<u64, String> {
    store
        .decide(&plan(), CLIENT, at, 1)
        .await
        .map(|decision| {
            assert!(decision.allowed, "{decision:?}");
            u64::from(decision.limits[0].decision.remaining)
        })
        .map_err(|e| e.to_string())
}

/// The client has used 2 of 5; a master is added and the client's slot
/// starts moving to it with all its keys, so the old master sends its
/// calls on (`ASK`); then the move is finished (`MOVED`). Every decision
/// on the way is the store's, from the whole state. Before the script's
/// text was sent where loading it cannot reach, the call sent on was
/// refused with `NOSCRIPT` until the move was done: the slot's clients
/// got the failure policy.
#[test]
fn a_slot_moving_to_a_master_just_added_is_decided_throughout() {
    for batch_max in [64, 1] {
        let Some(mut cluster) = RedisCluster::spawn("cluster-new-node") else {
            return;
        };
        let added = cluster.add_empty_master("cluster-new-node");
        runtime().block_on(async {
            let store = connect(&cluster, batch_max).await;
            assert_eq!(take_one(&store, 0).await, Ok(4), "batch_max {batch_max}");
            assert_eq!(take_one(&store, 1).await, Ok(3), "batch_max {batch_max}");
            let moving = cluster.start_moving_slot_of(CLIENT, added);
            let keys = moving.keys_left();
            moving.migrate(&keys.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(
                take_one(&store, 2).await,
                Ok(2),
                "batch_max {batch_max}: sent on"
            );
            moving.finish();
            assert_eq!(
                take_one(&store, 3).await,
                Ok(1),
                "batch_max {batch_max}: moved"
            );
            assert_eq!(
                cluster.master_holding(CLIENT),
                added,
                "batch_max {batch_max}"
            );
        });
    }
}
