//! Credentials that stop working, and start working again, against real
//! `redis-server` processes the tests spawn: a one-node store whose
//! reconnection was refused at login connects again once the credentials
//! are good again (without charging any call twice), and a cluster's seeds
//! that refuse the credentials at start-up say so, as one node does.

use std::time::Duration;

use tollgate::{AnyPolicy, Plan, PlanDecision};
use tollgate_redis::testing::{current_thread_runtime, ClusterOptions, RedisCluster, RedisServer};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError, RedisTarget};

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("token-bucket", 10, 1_000_000).expect("policy");
    Plan::new(
        "credentials",
        vec![tollgate::Limit::new("l", policy, false)],
    )
    .expect("plan")
}

/// The ACL user alice, password `s3cret`, allowed everything.
const ALICE: &[&str] = &[
    "ACL", "SETUSER", "alice", "on", ">s3cret", "~*", "&*", "+@all",
];

/// One call at `now` 0 costing 1: the same call every time, so the tokens
/// left show how many calls were charged.
async fn call(store: &RedisStore) -> Result<PlanDecision, RedisStoreError> {
    store.decide(&plan(), "c", 0, 1).await
}

/// Calls until one fails at login (a permanent authentication error; the
/// first calls may meet the dropped connection, a transient one). Bounded.
async fn until_refused_at_login(store: &RedisStore) -> RedisStoreError {
    for _ in 0..100 {
        match call(store).await {
            Err(e) if !e.is_transient() => {
                assert!(e.to_string().contains("uthentication"), "{e}");
                return e;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    panic!("no call was refused at login");
}

/// Calls until the store decides again (bounded: 100 calls, 20 ms apart;
/// a refused login is tried again at most every quarter of a second).
async fn until_decided(store: &RedisStore) -> PlanDecision {
    let mut last = None;
    for _ in 0..100 {
        match call(store).await {
            Ok(decision) => return decision,
            Err(e) => last = Some(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the store never connected again; the last error: {last:?}");
}

/// A store of alice on `server`'s database `db`, which decided once and
/// was then refused at login: her password changed under it and its
/// connection killed.
async fn refused_store(server: &RedisServer, db: u8) -> RedisStore {
    assert_eq!(server.cli(ALICE).trim(), "OK");
    let url = format!("redis://alice:s3cret@127.0.0.1:{}/{db}", server.port());
    let store = RedisStore::connect(&url, RedisStoreConfig::default())
        .await
        .expect("connect");
    let first = call(&store).await.expect("decided");
    assert_eq!(first.limits[0].decision.remaining, 9);
    server.cli(&["ACL", "SETUSER", "alice", "resetpass", ">new"]);
    server.cli(&["CLIENT", "KILL", "USER", "alice"]);
    until_refused_at_login(&store).await;
    store
}

fn alice_answers_ping(server: &RedisServer) -> bool {
    let auth = ["--user", "alice", "--pass", "s3cret", "--no-auth-warning"];
    server.cli(&[&auth[..], &["PING"]].concat()).trim() == "PONG"
}

/// The audit's case: alice's password changes under a running store, its
/// connection is killed, and the one reconnection fails at login. Once the
/// password is back, a later call connects again and is decided; no call
/// in between was charged.
#[test]
fn a_store_refused_at_login_connects_again_once_the_password_is_back() {
    let Some(server) = RedisServer::spawn("refused_at_login_connects_again") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = refused_store(&server, 1).await;
        // Still refused while the password is wrong: each call fails.
        assert!(call(&store).await.is_err());
        server.cli(&["ACL", "SETUSER", "alice", "resetpass", ">s3cret"]);
        assert!(alice_answers_ping(&server));
        let back = until_decided(&store).await;
        assert_eq!(back.limits[0].decision.remaining, 8, "charged once more");
        assert_ne!(server.cli(&["-n", "1", "DBSIZE"]).trim(), "0");
    });
}

/// Connections Redis has accepted since it started.
fn connections_received(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "stats"]);
    let line = info
        .lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .expect("INFO stats has total_connections_received");
    line.trim().parse().expect("a number")
}

/// While the password stays wrong, calls keep coming (a permanent error
/// opens no circuit), but the store logs in again at most four times a
/// second, not once per call: a refusal that never heals must not turn
/// into a storm of connections, TLS handshakes and ACL log entries.
#[test]
fn a_refused_login_is_tried_again_at_most_four_times_a_second() {
    let Some(server) = RedisServer::spawn("refused_login_tried_again_seldom") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = refused_store(&server, 0).await;
        let before = connections_received(&server);
        let started = std::time::Instant::now();
        for _ in 0..40 {
            assert!(call(&store).await.is_err());
        }
        let quarters = started.elapsed().as_millis() / 250 + 1;
        // Less the one of the `INFO` that counts them.
        let logins = connections_received(&server) - before - 1;
        assert!(
            u128::from(logins) <= quarters,
            "{logins} logins for 40 calls in {:?}",
            started.elapsed()
        );
    });
}

/// Redis restarts without alice (no persistence: its ACL users are gone),
/// and she is added back a moment later: the store decides again.
#[test]
fn a_store_connects_again_once_its_user_is_added_after_a_restart() {
    let Some(mut server) = RedisServer::spawn("connects_again_once_its_user_is_added") else {
        return;
    };
    assert_eq!(server.cli(ALICE).trim(), "OK");
    let url = format!("redis://alice:s3cret@127.0.0.1:{}", server.port());
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&url, RedisStoreConfig::default())
            .await
            .expect("connect");
        call(&store).await.expect("decided");
        server.restart();
        until_refused_at_login(&store).await;
        assert_eq!(server.cli(ALICE).trim(), "OK");
        let back = until_decided(&store).await;
        // A fresh data set: this is the only call charged since the restart.
        assert_eq!(back.limits[0].decision.remaining, 9);
    });
}

/// A cluster whose every node knows carol (password `good`).
fn cluster_with_carol(test: &str) -> Option<RedisCluster> {
    let carol = ["--user", "carol", "on", ">good", "~*", "&*", "+@all"];
    let options = ClusterOptions {
        extra: carol.map(String::from).to_vec(),
        ..ClusterOptions::default()
    };
    RedisCluster::spawn_with(test, &options)
}

/// A wrong password, or a user the cluster does not know, stops start-up
/// on a cluster as on one node: the error says so, without the password,
/// and is not taken for a cluster that is not up yet.
#[test]
fn a_cluster_refusing_the_credentials_is_refused_at_connect() {
    let Some(cluster) = cluster_with_carol("a_cluster_refusing_the_credentials") else {
        return;
    };
    let port = cluster.nodes()[0].port();
    current_thread_runtime().block_on(async {
        let good = RedisTarget::cluster([format!("redis://carol:good@127.0.0.1:{port}")]);
        let store = RedisStore::connect_to(&good, RedisStoreConfig::default()).await;
        assert!(store.is_ok(), "{:?}", store.err());
        for (user, password) in [("carol", "bad-pw"), ("nobody", "some-pw")] {
            let url = format!("redis://{user}:{password}@127.0.0.1:{port}");
            let target = RedisTarget::cluster([url]);
            let Err(error) = RedisStore::connect_to(&target, RedisStoreConfig::default()).await
            else {
                panic!("{user}:{password} connected");
            };
            let text = error.to_string();
            assert!(text.contains("wrong user name or password"), "{text}");
            assert!(!text.contains(password), "{text}");
            assert!(!error.is_not_up_yet(), "{text}");
        }
    });
}

/// A call whose reply was lost (its connection dropped while the relay
/// held it) is claimed by its receipt; when the claim is refused at login
/// (alice's password changed meanwhile), it is tried again until the
/// password is back, and then takes the call's use back. It was given up
/// on at the first refusal (a permanent error), so the call stayed
/// counted (an audit: 1 to 3 units a run).
#[test]
fn a_lost_reply_is_claimed_once_a_refused_login_works_again() {
    use tollgate::{DecidedBy, FailurePolicy, Store};
    use tollgate_guard::GuardedStore;
    use tollgate_redis::testing::{counts_until, load_scripts, wait_until, Relay};

    let Some(server) = RedisServer::spawn("lost_reply_claimed_after_login") else {
        return;
    };
    current_thread_runtime().block_on(async {
        assert_eq!(server.cli(ALICE).trim(), "OK");
        load_scripts(&server.url()).await;
        let relay = Relay::start(server.port());
        let url = format!("redis://alice:s3cret@127.0.0.1:{}", relay.port());
        let timeout = Duration::from_millis(50);
        let config = RedisStoreConfig {
            timeout,
            ..RedisStoreConfig::default()
        };
        let store = RedisStore::connect(&url, config).await.expect("connect");
        let guard = GuardedStore::new(store.clone(), timeout, FailurePolicy::FailClosed);
        relay.hold_replies();
        let answer = guard.check(&plan(), "c", 0, 1).await.expect("answered");
        assert_ne!(answer.decided_by, DecidedBy::Store);
        server.cli(&["ACL", "SETUSER", "alice", "resetpass", ">new"]);
        relay.cut();
        // Polled every 10 ms for up to 5 s: the call is found lost.
        let lost = wait_until(500, || store.call_counts().replies_lost == 1).await;
        assert!(lost, "never found lost: {:?}", store.call_counts());
        // Refused at login for a while (a claim tries again at most every
        // few hundred ms), then the password is back.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            store.call_counts().refunds_failed,
            0,
            "given up while refused"
        );
        server.cli(&["ACL", "SETUSER", "alice", "resetpass", ">s3cret"]);
        let counts = counts_until(&store, |c| c.refunded >= 1).await;
        assert_eq!(
            (counts.refunded, counts.refunds_failed),
            (1, 0),
            "{counts:?}"
        );
        let direct = RedisStore::connect(&server.url(), RedisStoreConfig::default())
            .await
            .expect("connect");
        let peek = direct.decide(&plan(), "c", 0, 0).await.expect("peek");
        assert_eq!(peek.limits[0].decision.remaining, 10, "nothing consumed");
    });
}
