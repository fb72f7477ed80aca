//! `StoreHandle::connect` at start-up, against real `redis-server`s the
//! test starts itself: a Redis that is not ready yet (still loading its data
//! set, as after a restart; a cluster whose nodes are not joined yet) lets
//! the service start, its failure policy answering until Redis is up, as
//! one that does not answer at all does; the store then decides once Redis
//! is ready.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tollgate::{AnyPolicy, Limit, Plan};
use tollgate_config::{Config, StoreHandle};
use tollgate_redis::testing::{
    current_thread_runtime, raw_command, redis_cli, wait_for, RedisServer, Relay,
};
use tollgate_redis::RedisStore;

#[test]
fn a_redis_still_loading_at_start_up_lets_the_service_start() {
    let debug = ["--enable-debug-command", "yes"];
    let Some(server) = RedisServer::spawn_with("start_up_loading", &debug) else {
        return;
    };
    // About a second of loading: 20,000 keys at 50 µs each.
    assert_eq!(server.cli(&["DEBUG", "POPULATE", "20000"]).trim(), "OK");
    for (key, value) in [
        ("key-load-delay", "50"),
        ("loading-process-events-interval-bytes", "1024"),
    ] {
        assert_eq!(server.cli(&["CONFIG", "SET", key, value]).trim(), "OK");
    }
    let mut reload = Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "DEBUG", "RELOAD"])
        .stdout(Stdio::null())
        .spawn()
        .expect("run redis-cli");
    let loading = wait_for(250, || {
        raw_command(server.port(), "PING").is_some_and(|r| r.starts_with("-LOADING"))
    });
    assert!(loading, "Redis never said LOADING");

    let config = config_with_store(&format!("url = \"{}\"", server.url()));
    current_thread_runtime().block_on(async {
        let store = started(&config).await;
        let _ = reload.wait();
        // Loaded: the store decides (after a reconnect at most).
        assert_decides(&store).await;
    });
}

/// Three cluster nodes, up but not joined (no slot served): the service
/// starts; once `redis-cli --cluster create` has joined them, the store
/// decides.
#[test]
fn a_cluster_not_formed_yet_at_start_up_lets_the_service_start() {
    let enabled = ["--cluster-enabled", "yes"];
    let nodes: Vec<RedisServer> = (0..3)
        .map_while(|_| RedisServer::spawn_with("start_up_cluster", &enabled))
        .collect();
    if nodes.len() < 3 {
        return;
    }
    let seeds: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let config = config_with_store(&format!("cluster = {seeds:?}"));
    current_thread_runtime().block_on(async {
        let store = started(&config).await;
        let mut create: Vec<String> = vec!["--cluster".into(), "create".into()];
        create.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        create.push("--cluster-yes".into());
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        redis_cli(nodes[0].port(), &create);
        let formed = wait_for(250, || {
            nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        });
        assert!(formed, "the cluster never formed");
        // Formed: the store decides (once it has read the slots).
        assert_decides(&store).await;
    });
}

/// A config of one plan (5 an hour) with `store_line` in `[store]`.
fn config_with_store(store_line: &str) -> Config {
    let text = format!(
        "[[plans.default]]\nname = \"s\"\npolicy = \"sliding-window\"\nlimit = 5\nwindow = \"1h\"\n\
         [store]\n{store_line}\n"
    );
    Config::parse(&text).expect("config")
}

/// The Redis store `StoreHandle::connect` starts with: it must not stop
/// start-up.
async fn started(config: &Config) -> Arc<RedisStore> {
    match StoreHandle::connect(config).await {
        Ok(StoreHandle::Redis(store)) => store,
        Ok(_) => panic!("not the Redis store"),
        Err(error) => panic!("start-up stopped: {error}"),
    }
}

/// The store decides a first request of client "c" (4 of 5 left), within
/// 100 tries 50 ms apart.
async fn assert_decides(store: &RedisStore) {
    let policy = AnyPolicy::from_name("sliding-window", 5, 3_600_000).expect("policy");
    let plan = Plan::new("s", vec![Limit::new("1h", policy, false)]).expect("plan");
    for _ in 0..100 {
        if let Ok(decision) = store.decide(&plan, "c", 0, 1).await {
            assert_eq!(decision.limits[0].decision.remaining, 4);
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the store never decided once Redis was ready");
}

/// An ACL user that logs in but cannot run what every decision needs stops
/// start-up with an error naming what is missing, as a user without `TIME`
/// does: without `EVALSHA`, without `SCRIPT LOAD`, without access to the
/// keys under the prefix (`~other:*`), or with read-only access to them.
/// A user granted all of it starts.
#[test]
fn a_redis_user_without_what_decisions_need_stops_start_up() {
    let users = [
        ("complete", "~tollgate:*", "+@all"),
        ("noevalsha", "~tollgate:*", "-evalsha"),
        ("noscript", "~tollgate:*", "-script"),
        ("otherkeys", "~other:*", "+@all"),
        ("readonly", "%R~tollgate:*", "+@all"),
    ];
    let mut args = Vec::new();
    for (user, keys, commands) in users {
        args.extend(["--user", user, "on", ">pw", keys, "+@all", commands]);
    }
    let Some(server) = RedisServer::spawn_with("start_up_acl", &args) else {
        return;
    };
    let port = server.port();
    let url = |user: &str| format!("url = \"redis://{user}:pw@127.0.0.1:{port}\"");
    current_thread_runtime().block_on(async {
        let complete = started(&config_with_store(&url("complete"))).await;
        assert_decides(&complete).await;
        for (user, missing) in [
            ("noevalsha", "cannot run EVALSHA: grant it +evalsha"),
            ("noscript", "cannot load tollgate's scripts (SCRIPT LOAD): grant it +script|load"),
            ("otherkeys", "cannot read and write the keys under the prefix \"tollgate\": grant it ~tollgate:*"),
            ("readonly", "cannot read and write the keys under the prefix \"tollgate\": grant it ~tollgate:*"),
        ] {
            // A Redis that holds no script yet (the complete user's
            // check loaded one): loading it is what a user may not do.
            assert_eq!(server.cli(&["SCRIPT", "FLUSH"]).trim(), "OK");
            let refused = StoreHandle::connect(&config_with_store(&url(user))).await;
            let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(error.contains(missing), "{user}: {error:?}");
            assert!(!error.contains(":pw@"), "{user}: the password shown: {error}");
        }
    });
}

/// A Redis whose `EVALSHA` or `SCRIPT` is renamed away (`rename-command`, as
/// managed services do with some commands) stops start-up naming the
/// command, as a user without the permission does. It started, and every
/// decision failed with "unknown command", answered by the failure policy.
#[test]
fn a_redis_without_a_command_decisions_need_stops_start_up() {
    for command in ["EVALSHA", "SCRIPT"] {
        let renamed = ["--rename-command", command, "\"\""];
        let Some(server) = RedisServer::spawn_with("start_up_renamed", &renamed) else {
            return;
        };
        let url = format!("url = \"redis://127.0.0.1:{}\"", server.port());
        current_thread_runtime().block_on(async {
            let refused = StoreHandle::connect(&config_with_store(&url)).await;
            let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
            let named = format!("Redis has no command {command} (disabled or renamed");
            assert!(error.contains(&named), "{command}: {error:?}");
            assert!(
                !error.contains("with args"),
                "{command}: arguments quoted: {error}"
            );
        });
    }
}

/// Behind a slow link (each connection's first reply 0.8 s late), the
/// start-up check waits for Redis up to its 5 s, and the service starts
/// connected: it decides at once.
#[test]
fn a_redis_slow_to_answer_a_new_connection_is_waited_for_at_start_up() {
    let Some(server) = RedisServer::spawn("start_up_slow_link") else {
        return;
    };
    let relay = Relay::start(server.port());
    relay.delay_first_reply(Duration::from_millis(800));
    let config = config_with_store(&format!("url = \"{}\"", relay.url()));
    current_thread_runtime().block_on(async {
        let store = started(&config).await;
        let policy = AnyPolicy::from_name("sliding-window", 5, 3_600_000).expect("policy");
        let plan = Plan::new("s", vec![Limit::new("1h", policy, false)]).expect("plan");
        let decision = store.decide(&plan, "c", 0, 1).await;
        assert!(decision.is_ok(), "not connected: {decision:?}");
    });
}
