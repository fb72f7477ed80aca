//! Every Redis error the store can meet, produced by a real `redis-server`,
//! and classified as the crate README's table says: transient (the failure
//! policy answers) or permanent. Messages never carry Redis's script hash.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tollgate::FailurePolicy;
use tollgate::{AnyPolicy, DecidedBy, Limit, Plan, Store};
use tollgate_guard::GuardedStore;
use tollgate_redis::testing::{
    current_thread_runtime, raw_command, redis_cli, wait_for, RedisCluster, RedisServer,
};
use tollgate_redis::{RedisStore, RedisStoreConfig, RedisStoreError};

fn plan() -> Plan {
    let limits = ["sliding-window", "token-bucket", "gcra"]
        .iter()
        .map(|name| {
            let policy = AnyPolicy::from_name(name, 10, 1_000_000).expect("policy");
            Limit::new(*name, policy, false)
        })
        .collect();
    Plan::new("errors", limits).expect("plan")
}

/// A store with a timeout long enough for the slow cases below.
fn config() -> RedisStoreConfig {
    RedisStoreConfig {
        timeout: Duration::from_secs(5),
        ..RedisStoreConfig::default()
    }
}

/// `error` is Redis's `code`, classified `transient`, fit to log.
fn assert_classified(error: &RedisStoreError, code: &str, transient: bool) {
    let RedisStoreError::Redis(redis_error) = error else {
        panic!("{code}: not a Redis error: {error}");
    };
    assert_eq!(redis_error.code(), Some(code), "{error}");
    assert_eq!(error.is_transient(), transient, "{code}: {error}");
    let text = error.to_string();
    assert!(text.contains(code), "{text}");
    assert!(
        !text.contains("script:") && !text.contains("user_script"),
        "{text}"
    );
    let store_error: tollgate::StoreError = RedisStoreError::Redis(redis_error.clone()).into();
    assert_eq!(store_error.is_transient(), transient);
    let plan_sha = redis::Script::new(tollgate_redis::scripts::PLAN)
        .get_hash()
        .to_owned();
    assert!(!store_error.message.contains(&plan_sha), "{store_error}");
}

/// `store` behind a fail-closed guard: a check is answered by the failure
/// policy, and `server` holds no key. Returns the guard.
async fn answered_by_the_failure_policy(
    store: RedisStore,
    server: &RedisServer,
) -> GuardedStore<RedisStore> {
    let guard = GuardedStore::new(store, Duration::from_secs(5), FailurePolicy::FailClosed);
    let answer = guard.check(&plan(), "c", 0, 1).await.expect("answered");
    assert_eq!(
        answer.decided_by,
        DecidedBy::Failure(FailurePolicy::FailClosed)
    );
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0", "nothing written");
    guard
}

/// Once Redis takes writes again, `guard`'s check is decided and allowed
/// by the store, and written to `server`.
async fn decided_again(guard: &GuardedStore<RedisStore>, server: &RedisServer) {
    let answer = guard.check(&plan(), "c", 0, 1).await.expect("answered");
    assert_eq!(answer.decided_by, DecidedBy::Store);
    assert!(answer.allowed);
    assert_ne!(server.cli(&["DBSIZE"]).trim(), "0", "decided and written");
}

/// Runs `redis-cli -p <port> <args>` in the background (it blocks).
fn background_cli(port: u16, args: &[&str]) -> Child {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run redis-cli")
}

/// Waits (bounded) until PING answers with an error starting with `code`.
fn until_ping_says(port: u16, code: &str) {
    let prefix = format!("-{code}");
    assert!(
        wait_for(250, || raw_command(port, "PING")
            .is_some_and(|r| r.starts_with(&prefix))),
        "Redis never answered {code}"
    );
}

#[test]
fn out_of_memory_is_transient_and_answered_by_the_failure_policy() {
    let Some(server) = RedisServer::spawn("out_of_memory_is_transient") else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config())
            .await
            .expect("connect");
        assert_eq!(
            server
                .cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
                .trim(),
            "OK"
        );
        assert_eq!(
            server.cli(&["CONFIG", "SET", "maxmemory", "1"]).trim(),
            "OK"
        );
        let error = store.decide(&plan(), "c", 0, 1).await.expect_err("OOM");
        assert_classified(&error, "OOM", true);
        assert_eq!(server.cli(&["DBSIZE"]).trim(), "0", "nothing written");
        answered_by_the_failure_policy(store, &server).await;
    });
}

#[test]
fn a_busy_script_is_transient() {
    let Some(server) = RedisServer::spawn_with(
        "a_busy_script_is_transient",
        &["--busy-reply-threshold", "20"],
    ) else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config())
            .await
            .expect("connect");
        let mut busy = background_cli(server.port(), &["EVAL", "while true do end", "0"]);
        until_ping_says(server.port(), "BUSY");
        let error = store.decide(&plan(), "c", 0, 1).await.expect_err("BUSY");
        assert_classified(&error, "BUSY", true);
        assert!(raw_command(server.port(), "SCRIPT KILL").is_some_and(|r| r.starts_with("+OK")));
        let _ = busy.wait();
        assert!(
            store
                .decide(&plan(), "c", 0, 1)
                .await
                .expect("back")
                .allowed
        );
    });
}

#[test]
fn loading_is_transient() {
    let Some(server) =
        RedisServer::spawn_with("loading_is_transient", &["--enable-debug-command", "yes"])
    else {
        return;
    };
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config())
            .await
            .expect("connect");
        assert_eq!(server.cli(&["DEBUG", "POPULATE", "20000"]).trim(), "OK");
        for (key, value) in [
            ("key-load-delay", "50"),
            ("loading-process-events-interval-bytes", "1024"),
        ] {
            assert_eq!(
                server.cli(&["CONFIG", "SET", key, value]).trim(),
                "OK",
                "{key}"
            );
        }
        let mut reload = background_cli(server.port(), &["DEBUG", "RELOAD"]);
        until_ping_says(server.port(), "LOADING");
        let error = store.decide(&plan(), "c", 0, 1).await.expect_err("LOADING");
        assert_classified(&error, "LOADING", true);
        let _ = reload.wait();
    });
}

#[test]
fn a_replica_answers_readonly_then_masterdown_both_transient() {
    let Some(mut master) = RedisServer::spawn("readonly_then_masterdown") else {
        return;
    };
    let port = master.port().to_string();
    let replica = RedisServer::spawn_with(
        "readonly_then_masterdown",
        &["--replicaof", "127.0.0.1", &port],
    )
    .expect("replica");
    assert!(
        wait_for(250, || replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")),
        "the replica never synced"
    );
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&replica.url(), config())
            .await
            .expect("connect");
        let error = store
            .decide(&plan(), "c", 0, 1)
            .await
            .expect_err("READONLY");
        assert_classified(&error, "READONLY", true);

        master.kill();
        assert_eq!(
            replica
                .cli(&["CONFIG", "SET", "replica-serve-stale-data", "no"])
                .trim(),
            "OK"
        );
        assert!(wait_for(250, || replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:down")));
        let error = store
            .decide(&plan(), "c", 0, 1)
            .await
            .expect_err("MASTERDOWN");
        assert_classified(&error, "MASTERDOWN", true);
    });
}

/// A master told to refuse writes while too few replicas are in sync
/// (`min-replicas-to-write`, what bounds the writes an unplanned failover
/// can lose) answers `NOREPLICAS` at the script's first write: transient,
/// answered by the failure policy, nothing written; and once a replica is
/// in sync the store decides again.
#[test]
fn too_few_replicas_in_sync_is_noreplicas_transient_and_writes_nothing() {
    let Some(master) = RedisServer::spawn("noreplicas") else {
        return;
    };
    let set = |name: &str, value: &str| master.cli(&["CONFIG", "SET", name, value]);
    assert_eq!(set("min-replicas-to-write", "1").trim(), "OK");
    assert_eq!(set("min-replicas-max-lag", "10").trim(), "OK");
    // The replica below syncs at once rather than after the default 5 s.
    assert_eq!(set("repl-diskless-sync-delay", "0").trim(), "OK");
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&master.url(), config())
            .await
            .expect("connect");
        let error = store
            .decide(&plan(), "c", 0, 1)
            .await
            .expect_err("NOREPLICAS");
        assert_classified(&error, "NOREPLICAS", true);
        assert_eq!(master.cli(&["DBSIZE"]).trim(), "0", "nothing written");
        let guard = answered_by_the_failure_policy(store, &master).await;

        let port = master.port().to_string();
        let _replica = RedisServer::spawn_with("noreplicas", &["--replicaof", "127.0.0.1", &port])
            .expect("replica");
        assert!(
            wait_for(250, || master
                .cli(&["INFO", "replication"])
                .contains("min_slaves_good_slaves:1")),
            "the replica never got in sync"
        );
        decided_again(&guard, &master).await;
    });
}

/// A Redis whose snapshot failed (here its directory is gone; in
/// production, a full disk) refuses writes while it keeps snapshots
/// (`stop-writes-on-bgsave-error`, on by default) with `MISCONF`, at the
/// script's first write: transient, answered by the failure policy,
/// nothing written; and once writes are allowed again the store decides.
#[test]
fn a_redis_that_cannot_save_answers_misconf_transient_and_writes_nothing() {
    let dir = std::env::temp_dir().join(format!("tollgate-misconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the directory");
    let dir_arg = dir.to_str().expect("a UTF-8 path").to_owned();
    let Some(server) = RedisServer::spawn_with("misconf", &["--dir", &dir_arg]) else {
        return;
    };
    std::fs::remove_dir_all(&dir).expect("remove the directory");
    assert_eq!(
        server.cli(&["CONFIG", "SET", "save", "3600 1"]).trim(),
        "OK"
    );
    current_thread_runtime().block_on(async {
        let store = RedisStore::connect(&server.url(), config())
            .await
            .expect("connect");
        server.cli(&["BGSAVE"]);
        assert!(
            wait_for(250, || server
                .cli(&["INFO", "persistence"])
                .contains("rdb_last_bgsave_status:err")),
            "the snapshot never failed"
        );
        let error = store.decide(&plan(), "c", 0, 1).await.expect_err("MISCONF");
        assert_classified(&error, "MISCONF", true);
        let guard = answered_by_the_failure_policy(store, &server).await;

        // No snapshots kept: writes are allowed again.
        assert_eq!(server.cli(&["CONFIG", "SET", "save", ""]).trim(), "OK");
        decided_again(&guard, &server).await;
    });
}

#[test]
fn a_cluster_node_without_the_slot_answers_clusterdown_transient() {
    let Some(server) = RedisServer::spawn_with("clusterdown", &["--cluster-enabled", "yes"]) else {
        return;
    };
    current_thread_runtime().block_on(async {
        // A cluster node with no slots assigned: its cluster is down.
        let store = RedisStore::connect(&server.url(), config())
            .await
            .expect("connect");
        let error = store
            .decide(&plan(), "c", 0, 1)
            .await
            .expect_err("CLUSTERDOWN");
        assert_classified(&error, "CLUSTERDOWN", true);
    });
}

#[test]
fn cross_slot_is_permanent_and_trying_again_transient() {
    let Some(cluster) = RedisCluster::spawn("cross_slot_and_try_again") else {
        return;
    };
    let nodes = cluster.nodes();
    current_thread_runtime().block_on(async {
        // CROSSSLOT: a multi-key call across slots, sent to a node directly.
        let client = redis::Client::open(nodes[0].url()).expect("client");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let reply: Result<(), _> = redis::cmd("MSET")
            .arg("a")
            .arg(1)
            .arg("b")
            .arg(2)
            .query_async(&mut connection)
            .await;
        assert_classified(
            &RedisStoreError::from(reply.expect_err("CROSSSLOT")),
            "CROSSSLOT",
            false,
        );

        // TRYAGAIN: the client's slot is migrating and one of its keys has
        // already moved.
        let urls = cluster.urls();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        let store = RedisStore::connect_cluster(&urls, config())
            .await
            .expect("connect");
        let plan = plan();
        let client_id = (0..)
            .map(|i| format!("c{i}"))
            .find(|c| slot_of(nodes[0].port(), &store.keys().seen_key(c)) < 5_461)
            .expect("a client on the first node");
        assert!(
            store
                .decide(&plan, &client_id, 0, 1)
                .await
                .expect("call")
                .allowed
        );
        let seen = store.keys().seen_key(&client_id);
        let slot = slot_of(nodes[0].port(), &seen).to_string();
        let (from, to) = (&nodes[0], &nodes[1]);
        let (from_id, to_id) = (from.node_id(), to.node_id());
        assert_eq!(
            to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])
                .trim(),
            "OK"
        );
        assert_eq!(
            from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])
                .trim(),
            "OK"
        );
        let port = to.port().to_string();
        let moved = from.cli(&[
            "MIGRATE",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "KEYS",
            &seen,
        ]);
        assert_eq!(moved.trim(), "OK");
        let error = store
            .decide(&plan, &client_id, 10, 1)
            .await
            .expect_err("TRYAGAIN");
        assert_classified(&error, "TRYAGAIN", true);
        let error = tollgate::StoreError::from(error);
        assert!(
            error.is_client_only(),
            "the master answered for its slot: {error:?}"
        );
    });
}

fn slot_of(port: u16, key: &str) -> u32 {
    redis_cli(port, &["CLUSTER", "KEYSLOT", key])
        .trim()
        .parse()
        .expect("a slot")
}

/// Redis's password changed under a running store: every reconnection is
/// refused, which no retry fixes (the README's table: authentication
/// errors are permanent), whatever form the refusal takes.
#[test]
fn a_password_changed_after_start_up_is_a_permanent_error() {
    // Started open (the harness waits for PING), then given a password.
    let Some(server) = RedisServer::spawn("a_password_changed_after_start_up") else {
        return;
    };
    assert_eq!(
        server.cli(&["CONFIG", "SET", "requirepass", "old"]).trim(),
        "OK"
    );
    let port = server.port();
    current_thread_runtime().block_on(async {
        let url = format!("redis://:old@127.0.0.1:{port}");
        let store = RedisStore::connect(&url, config()).await.expect("connect");
        store.decide(&plan(), "c", 0, 1).await.expect("decided");
        let auth = ["-a", "old", "--no-auth-warning"];
        let said = |args: &[&str]| redis_cli(port, &[&auth[..], args].concat());
        assert_eq!(said(&["CONFIG", "SET", "requirepass", "new"]).trim(), "OK");
        // The store's connection was authenticated before: drop it.
        let new_auth = [
            "-a",
            "new",
            "--no-auth-warning",
            "CLIENT",
            "KILL",
            "TYPE",
            "normal",
        ];
        redis_cli(port, &new_auth);
        // The first calls may meet the dropped connection (transient); the
        // reconnection's refusal follows.
        let mut errors = Vec::new();
        for _ in 0..50 {
            let error = store.decide(&plan(), "c", 0, 1).await.expect_err("refused");
            let transient = error.is_transient();
            errors.push(error.to_string());
            if !transient {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let last = errors.last().expect("an error");
        assert!(
            errors.len() < 50 && last.to_lowercase().contains("auth"),
            "no permanent authentication error in {errors:#?}"
        );
    });
}

/// A Redis at its `maxclients` refuses every new connection (it writes `ERR
/// max number of clients reached` and closes it, which redis-rs reports as
/// the connection dropping) until one closes: transient, and at start-up a
/// Redis not up yet rather than a mistake in the configuration.
#[test]
fn a_redis_at_its_client_limit_is_transient_and_not_up_yet() {
    let Some(server) = RedisServer::spawn("client_limit") else {
        return;
    };
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxclients", "1"]).trim(),
        "OK"
    );
    // The one connection allowed, held by someone else.
    let held = std::net::TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    current_thread_runtime().block_on(async {
        let Err(error) = RedisStore::connect(&server.url(), config()).await else {
            panic!("connected past maxclients");
        };
        let RedisStoreError::Connect { source, .. } = &error else {
            panic!("not a connection error: {error:?}");
        };
        assert!(error.is_not_up_yet(), "{error}");
        assert!(
            RedisStoreError::Redis(source.clone()).is_transient(),
            "{error}"
        );
        drop(held);
        assert!(
            wait_for(100, || raw_command(server.port(), "PING").as_deref()
                == Some("+PONG\r\n")),
            "the connection never freed up"
        );
        let store = RedisStore::connect(&server.url(), config()).await;
        assert!(store.is_ok(), "{:?}", store.err());
    });
}
