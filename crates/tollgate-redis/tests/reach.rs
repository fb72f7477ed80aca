//! Every way to reach Redis, against real `redis-server` processes the
//! tests spawn themselves: TLS with a private CA the test makes (rcgen), an
//! ACL user, a database number, a cluster from seed nodes. The right
//! credentials work; a wrong password, an untrusted certificate or an
//! unreachable node fails at connect time with an error saying which (a
//! scheme whose TLS the port does not speak, asking whether it does); after
//! start-up, failures are answered by the failure policy.

use std::time::Duration;

use tollgate::{AnyPolicy, DecidedBy, FailurePolicy, Limit, Plan, Store};
use tollgate_guard::GuardedStore;
use tollgate_redis::testing::{
    current_thread_runtime, free_port, RedisCluster, RedisServer, TestCerts,
};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError, RedisTarget};

fn plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 2, 60_000).expect("policy");
    Plan::new("reach", vec![Limit::new("l", policy, false)]).expect("plan")
}

/// Connects to `target` and makes two allowed decisions and one rejection
/// (so Redis really holds the client's state).
async fn decides(target: &RedisTarget) {
    let store = RedisStore::connect_to(target, RedisStoreConfig::default())
        .await
        .unwrap_or_else(|e| panic!("connect to {target:?}: {e}"));
    let plan = plan();
    let mut answers = Vec::new();
    for now in [1_000, 1_001, 1_002] {
        let decision = store.check(&plan, "c", now, 1).await.expect("decided");
        assert_eq!(decision.decided_by, DecidedBy::Store);
        answers.push(decision.allowed);
    }
    assert_eq!(answers, [true, true, false], "{target:?}");
}

/// The error of a connection that must fail.
async fn connect_error(target: &RedisTarget) -> String {
    match RedisStore::connect_to(target, RedisStoreConfig::default()).await {
        Ok(_) => panic!("connecting to {target:?} should fail"),
        Err(e) => {
            assert!(matches!(e, RedisStoreError::Connect { .. }), "{e:?}");
            e.to_string()
        }
    }
}

#[test]
fn tls_with_the_private_ca_decides() {
    let Some(server) = RedisServer::spawn_tls("tls_with_the_private_ca_decides", &[]) else {
        return;
    };
    let certs = server.certs().expect("a TLS server");
    assert!(server.url().starts_with("rediss://"));
    let target = RedisTarget::single(server.url()).with_ca_pem(certs.ca_pem());
    current_thread_runtime().block_on(decides(&target));
    // The state is in this Redis.
    assert_ne!(server.cli(&["DBSIZE"]).trim(), "0");
}

#[test]
fn tls_with_another_ca_or_the_system_roots_is_refused_at_connect() {
    let Some(server) = RedisServer::spawn_tls("tls_with_another_ca", &[]) else {
        return;
    };
    let other = tempfile::tempdir().expect("a temporary directory");
    let wrong = TestCerts::generate(other.path());
    current_thread_runtime().block_on(async {
        for target in [
            RedisTarget::single(server.url()).with_ca_pem(wrong.ca_pem()),
            RedisTarget::single(server.url()),
        ] {
            let error = connect_error(&target).await;
            assert!(error.contains("not trusted"), "{error}");
            assert!(error.contains(&server.url()), "{error}");
        }
    });
}

/// An ACL user with a password, on database 3.
const ACL_USER: &[&str] = &["--user", "alice", "on", ">s3cret-pw", "~*", "&*", "+@all"];

#[test]
fn an_acl_user_on_a_database_number_decides() {
    let Some(server) = RedisServer::spawn_with("an_acl_user_decides", ACL_USER) else {
        return;
    };
    let url = format!("redis://alice:s3cret-pw@127.0.0.1:{}/3", server.port());
    current_thread_runtime().block_on(decides(&RedisTarget::single(url)));
    assert_ne!(server.cli(&["-n", "3", "DBSIZE"]).trim(), "0");
    assert_eq!(server.cli(&["-n", "0", "DBSIZE"]).trim(), "0");
}

#[test]
fn a_wrong_password_is_refused_at_connect_without_showing_it() {
    let Some(server) = RedisServer::spawn_with("a_wrong_password", ACL_USER) else {
        return;
    };
    let url = format!("redis://alice:not-the-pw@127.0.0.1:{}/3", server.port());
    let error = current_thread_runtime().block_on(connect_error(&RedisTarget::single(url)));
    assert!(error.contains("wrong user name or password"), "{error}");
    assert!(error.contains("alice:***@"), "{error}");
    assert!(!error.contains("not-the-pw"), "{error}");
}

#[test]
fn an_unreachable_node_is_refused_at_connect() {
    // Nothing listens on a port that was just free.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let error = current_thread_runtime().block_on(connect_error(&RedisTarget::single(url)));
    assert!(error.contains("nothing accepts connections"), "{error}");
    let seeds = [format!("redis://127.0.0.1:{}", free_port())];
    let error = current_thread_runtime().block_on(connect_error(&RedisTarget::cluster(seeds)));
    assert!(
        error.contains("cannot connect to Redis at cluster"),
        "{error}"
    );
}

/// The error of a connection that must fail, which a service takes for a
/// Redis that may not be up yet (it starts, its failure policy answering).
async fn not_up_yet_error(target: &RedisTarget) -> String {
    match RedisStore::connect_to(target, RedisStoreConfig::default()).await {
        Ok(_) => panic!("connecting to {target:?} should fail"),
        Err(e) => {
            assert!(e.is_not_up_yet(), "{e}");
            e.to_string()
        }
    }
}

/// `rediss://` at a plain port goes unanswered, `redis://` at a TLS port is
/// reset: the error asks whether the port speaks TLS. Both look like a
/// Redis not up yet too (a slow network; a proxy with no server behind it),
/// so a service still starts on them.
#[test]
fn a_url_whose_tls_the_port_does_not_speak_asks_whether_it_does() {
    let Some(plain) = RedisServer::spawn("tls_at_a_plain_port") else {
        return;
    };
    let Some(tls) = RedisServer::spawn_tls("plain_at_a_tls_port", &[]) else {
        return;
    };
    let ca = tls.certs().expect("a TLS server").ca_pem();
    current_thread_runtime().block_on(async {
        let tls_at_plain = format!("rediss://127.0.0.1:{}", plain.port());
        for target in [
            RedisTarget::single(&tls_at_plain),
            RedisTarget::cluster([&tls_at_plain]),
        ] {
            let error = not_up_yet_error(&target).await;
            assert!(
                error.contains("does this port speak TLS? rediss:// needs"),
                "{error}"
            );
        }
        let plain_at_tls = format!("redis://127.0.0.1:{}", tls.port());
        let error = not_up_yet_error(&RedisTarget::single(plain_at_tls)).await;
        assert!(error.contains("then use rediss://"), "{error}");
        // The right scheme connects.
        let right = RedisTarget::single(tls.url()).with_ca_pem(ca);
        let store = RedisStore::connect_to(&right, RedisStoreConfig::default()).await;
        assert!(store.is_ok(), "{:?}", store.err());
    });
}

#[test]
fn after_start_up_a_tls_outage_meets_the_failure_policy() {
    let Some(mut server) = RedisServer::spawn_tls("after_start_up_a_tls_outage", &[]) else {
        return;
    };
    let ca = server.certs().expect("TLS").ca_pem();
    let target = RedisTarget::single(server.url()).with_ca_pem(ca);
    current_thread_runtime().block_on(async {
        let redis = RedisStore::connect_to(&target, RedisStoreConfig::default())
            .await
            .expect("connect");
        let store = GuardedStore::new(redis, Duration::from_millis(300), FailurePolicy::FailClosed);
        let plan = plan();
        let first = store.check(&plan, "c", 1_000, 1).await.expect("answered");
        assert_eq!((first.allowed, first.decided_by), (true, DecidedBy::Store));
        server.kill();
        let down = store.check(&plan, "c", 1_001, 1).await.expect("answered");
        assert_eq!(
            (down.allowed, down.decided_by),
            (false, DecidedBy::Failure(FailurePolicy::FailClosed))
        );
        // Back (empty): the store decides again, over TLS, within a bounded wait.
        server.restart();
        let mut back = None;
        for _ in 0..50 {
            let d = store.check(&plan, "c", 1_002, 1).await.expect("answered");
            if d.decided_by == DecidedBy::Store {
                back = Some(d);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let back = back.expect("the store decides again after Redis is back");
        assert!(back.allowed);
    });
}

#[test]
fn a_cluster_from_seed_nodes_decides() {
    let Some(cluster) = RedisCluster::spawn("a_cluster_from_seed_nodes_decides") else {
        return;
    };
    // One seed is enough: the client learns the other masters.
    let seed = cluster.urls().remove(1);
    current_thread_runtime().block_on(decides(&RedisTarget::cluster([seed])));
}

#[test]
fn targets_are_checked_before_connecting() {
    let config = |target: RedisTarget| match target.validate() {
        Err(RedisStoreError::Config(message)) => message,
        other => panic!("{target:?} should be refused, got {other:?}"),
    };
    let ca = |target: RedisTarget| match target.validate() {
        Err(RedisStoreError::Ca(message)) => message,
        other => panic!("{target:?} should be refused for its CA, got {other:?}"),
    };
    let mixed = RedisTarget::cluster(["redis://127.0.0.1:7000", "rediss://127.0.0.1:7001"]);
    assert!(config(mixed).contains("mix"));
    let ca_without_tls = RedisTarget::single("redis://127.0.0.1:6379").with_ca_pem("x");
    assert!(ca(ca_without_tls).contains("not rediss://"));
    let not_pem = RedisTarget::single("rediss://127.0.0.1:6379").with_ca_pem("not a pem");
    assert!(ca(not_pem).contains("no PEM certificate"));
    // PEM armour around what is no certificate: redis-rs refused it only
    // when connecting ("Unable to parse TLS trust anchors"), after
    // `tollgate check` had passed it.
    let not_der = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let not_der = RedisTarget::single("rediss://127.0.0.1:6379").with_ca_pem(not_der);
    assert!(ca(not_der).contains("cannot be read as a CA"));
    let database = RedisTarget::cluster(["redis://127.0.0.1:7000/2"]);
    assert!(config(database).contains("only database 0"));
    assert!(config(RedisTarget::single("http://x")).contains("URL number 1"));
    assert!(config(RedisTarget::cluster(Vec::<String>::new())).contains("no Redis node"));
    let missing = RedisTarget::single("rediss://h:1").with_ca_file("/nonexistent/ca.pem".as_ref());
    assert!(matches!(missing, Err(RedisStoreError::Ca(m)) if m.contains("/nonexistent/ca.pem")));
    // Redacted for logs: no password, the database shown.
    let target = RedisTarget::single("rediss://alice:pw@10.0.0.5:6380/2");
    assert_eq!(target.redacted(), "rediss://alice:***@10.0.0.5:6380/2");
    assert_eq!(format!("{target:?}"), target.redacted());
    target.validate().expect("a good target");
}

#[test]
fn a_lazy_cluster_store_answers_by_the_failure_policy_until_it_connects() {
    let Some(cluster) = RedisCluster::spawn("a_lazy_cluster_store") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let plan = plan();
        // Nothing listens at this seed: every call is a transient failure.
        let nowhere = RedisTarget::cluster([format!("redis://127.0.0.1:{}", free_port())]);
        let redis = RedisStore::connect_lazy_to(&nowhere, RedisStoreConfig::default())
            .expect("lazy: nothing is connected yet");
        let store = GuardedStore::new(redis, Duration::from_secs(3), FailurePolicy::FailOpen);
        let down = store.check(&plan, "c", 1_000, 1).await.expect("answered");
        assert_eq!(down.decided_by, DecidedBy::Failure(FailurePolicy::FailOpen));
        // The real cluster, lazily: the first call connects and decides.
        let real = RedisTarget::cluster(cluster.urls());
        let redis = RedisStore::connect_lazy_to(&real, RedisStoreConfig::default()).expect("lazy");
        let first = redis.check(&plan, "c", 1_000, 1).await.expect("decided");
        assert_eq!((first.allowed, first.decided_by), (true, DecidedBy::Store));
    });
}
