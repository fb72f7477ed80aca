//! `[store]` checking: Redis URLs, prefixes, timeouts, the rejection
//! cache, batching, replicas and the clock, each mistake reported at its
//! line and column.

mod common;

use common::{mistake, LIMIT};
use tollgate_config::{Config, Error, Overrides, StoreKind};

#[test]
fn redis_config_is_read_with_its_prefix_and_timeout() {
    let text = format!(
        "{LIMIT}[store]\nurl = \"redis://127.0.0.1:6379/0\"\nfailure_policy = \"local-fallback\"\nprefix = \"edge\"\ntimeout = \"250ms\"\n"
    );
    let config = Config::parse(&text).unwrap();
    assert_eq!(
        config.store.kind,
        StoreKind::Redis {
            url: "redis://127.0.0.1:6379/0".to_owned()
        }
    );
    assert_eq!(config.store.prefix, "edge");
    assert_eq!(config.store.timeout_ms, 250);
    // The Redis connection is built lazily, on a Tokio runtime only.
    let error = tollgate_config::StoreHandle::for_config(&config)
        .err()
        .unwrap();
    assert!(error.to_string().contains("Tokio runtime"), "{error}");
}

#[test]
fn bad_prefix_and_timeout_are_refused_with_their_line() {
    for (store, message, line) in [
        ("prefix = \"a{b}\"\n", "invalid prefix", 2),
        ("prefix = \"\"\n", "invalid prefix", 2),
        (
            "url = \"memory\"\ntimeout = \"0ms\"\n",
            "timeout must be from 1ms to 1h",
            3,
        ),
        // Past it, a Redis script refuses a call's deadline (later than
        // 2^53 µs after 1970 from about 84,000 days on): every decision
        // would be the failure policy's.
        (
            "url = \"redis://127.0.0.1:6379\"\ntimeout = \"84000d\"\n",
            "timeout must be from 1ms to 1h",
            3,
        ),
        (
            "url = \"memory\"\ntimeout = \"3600001ms\"\n",
            "timeout must be from 1ms to 1h",
            3,
        ),
    ] {
        let text = format!("[store]\n{store}{LIMIT}");
        let error = Config::parse(&text).err().unwrap().to_string();
        assert!(error.contains(message), "{error}");
        assert!(error.contains(&format!("line {line},")), "{error}");
    }
}

/// A limit whose numbers leave the Redis store's exact range (Lua numbers
/// are doubles) is refused when the store is Redis, at the line and column
/// of the value to change, as any other mistake; the memory store serves it.
#[test]
fn limits_the_redis_store_cannot_serve_are_refused_with_their_line() {
    let redis = "[store]\nurl = \"redis://127.0.0.1:6379\"\n";
    for (limit, policy, count, window, column) in [
        ("huge", "sliding-window", "10", "\"100000000000d\"", 10),
        ("huge", "token-bucket", "10", "\"100000000000d\"", 10),
        ("fast", "gcra", "4000000000", "\"1d\"", 9),
    ] {
        let plan = format!(
            "[[plans.free]]\nname = \"{limit}\"\npolicy = \"{policy}\"\nlimit = {count}\nwindow = {window}\n"
        );
        assert!(Config::parse(&plan).is_ok(), "memory serves {plan}");
        let (line, col, message) = mistake(&format!("{redis}{plan}"));
        let expected_line = if column == 9 { 6 } else { 7 };
        assert_eq!((line, col), (expected_line, column), "{message}");
        assert!(
            message.contains(&format!("plan \"free\", limit \"{limit}\""))
                && message.contains("the redis store cannot serve"),
            "{message}"
        );
        // `--redis` on a memory config is checked the same way.
        let flag = Overrides {
            redis: Some("redis://127.0.0.1:6379".to_owned()),
            ..Overrides::default()
        };
        match Config::parse_with(&plan, &flag) {
            Err(Error::InvalidConfig { line, .. }) => assert_eq!(line, expected_line - 2),
            other => panic!("expected a config error, got {other:?}"),
        }
    }
    // Everyday limits pass.
    assert!(Config::parse(&format!("{redis}{LIMIT}")).is_ok());
    // A cluster's scripts are the same Lua: the same bounds.
    let cluster = "[store]\ncluster = [\"redis://127.0.0.1:7000\"]\n";
    let huge = "[[plans.free]]\nname = \"huge\"\npolicy = \"gcra\"\nlimit = 10\nwindow = \"100000000000d\"\n";
    let (line, _, message) = mistake(&format!("{cluster}{huge}"));
    assert_eq!(line, 7, "{message}");
    assert!(
        message.contains("the redis store cannot serve"),
        "{message}"
    );
    assert!(Config::parse(&format!("{cluster}{LIMIT}")).is_ok());
}

#[test]
fn the_rejection_cache_is_on_for_shared_stores_and_off_for_memory() {
    let redis = "url = \"redis://127.0.0.1:6379/0\"\n";
    let cluster = "cluster = [\"redis://127.0.0.1:7000\"]\n";
    for (store, expected) in [
        (redis.to_owned(), Some(100_000)),
        (cluster.to_owned(), Some(100_000)),
        (format!("{redis}rejection_cache_max_clients = 5\n"), Some(5)),
        (format!("{redis}rejection_cache = false\n"), None),
        ("url = \"memory\"\n".to_owned(), None),
        // Ignored for memory: it decides locally, a cache would gain nothing.
        ("rejection_cache = true\n".to_owned(), None),
    ] {
        let config = Config::parse(&format!("[store]\n{store}{LIMIT}")).unwrap();
        assert_eq!(config.store.shared_rejection_cache(), expected, "{store}");
        if let Some(max) = expected {
            // The cap is kept per shard of 1/16: 5 holds up to 16.
            let most = if max == 5 { 16 } else { max };
            let shown = format!("(rejection cache of at most {most} clients)");
            assert!(config.summary().contains(&shown), "{}", config.summary());
        }
    }
}

#[test]
fn batching_is_on_by_default_and_bounded() {
    let redis = "url = \"redis://127.0.0.1:6379/0\"\n";
    let config = Config::parse(&format!("[store]\n{redis}{LIMIT}")).unwrap();
    assert_eq!(
        config.store.batching,
        tollgate_config::config::Batching {
            batch_max: tollgate_redis::DEFAULT_BATCH_MAX,
            batches_in_flight: tollgate_redis::DEFAULT_BATCHES_IN_FLIGHT,
        }
    );
    let set = format!("[store]\n{redis}batch_max = 1\nbatches_in_flight = 4\n{LIMIT}");
    let config = Config::parse(&set).unwrap();
    assert_eq!(config.store.batching.batch_max, 1);
    assert_eq!(config.store.batching.batches_in_flight, 4);
    for bad in [
        "batch_max = 0",
        "batch_max = 1025",
        "batches_in_flight = 0",
        "batches_in_flight = 65",
    ] {
        match Config::parse(&format!("[store]\n{redis}{bad}\n{LIMIT}")) {
            Err(Error::InvalidConfig { line, message, .. }) => {
                assert_eq!(line, 3, "{bad}");
                assert!(message.contains("must be from 1 to"), "{bad}: {message}");
            }
            other => panic!("{bad}: expected a config error, got {other:?}"),
        }
    }
}

#[test]
fn replicas_to_ack_is_off_by_default_and_bounded() {
    let redis = "url = \"redis://127.0.0.1:6379/0\"\n";
    let config = Config::parse(&format!("[store]\n{redis}{LIMIT}")).unwrap();
    assert_eq!(config.store.replicas_to_ack, 0);
    assert!(
        !config.summary().contains("acknowledged"),
        "{}",
        config.summary()
    );
    let set = format!("[store]\n{redis}replicas_to_ack = 2\n{LIMIT}");
    let config = Config::parse(&set).unwrap();
    assert_eq!(config.store.replicas_to_ack, 2);
    let shown = "; each decision acknowledged by 2 replicas)";
    assert!(config.summary().contains(shown), "{}", config.summary());
    for bad in ["replicas_to_ack = 17", "replicas_to_ack = -1"] {
        match Config::parse(&format!("[store]\n{redis}{bad}\n{LIMIT}")) {
            Err(Error::InvalidConfig { line, message, .. }) => {
                assert_eq!(line, 3, "{bad}");
                assert!(
                    message.contains("replicas_to_ack") || message.contains("invalid value"),
                    "{bad}: {message}"
                );
            }
            other => panic!("{bad}: expected a config error, got {other:?}"),
        }
    }
}

/// `--redis` (or `--redis-cluster`) on a config whose `[store]` is memory
/// makes a shared store: the cache is on there too, as the file asked.
#[test]
fn the_rejection_cache_is_on_when_a_flag_makes_the_store_shared() {
    let flag = Overrides {
        redis: Some("redis://127.0.0.1:6379/0".to_owned()),
        ..Overrides::default()
    };
    let on = Config::parse_with(LIMIT, &flag).unwrap();
    assert_eq!(on.store.shared_rejection_cache(), Some(100_000));
    let off = Config::parse_with(&format!("[store]\nrejection_cache = false\n{LIMIT}"), &flag);
    assert_eq!(off.unwrap().store.shared_rejection_cache(), None);
}

#[test]
fn a_rejection_cache_cap_out_of_bounds_is_refused_with_its_line() {
    for cap in ["0", "10000001", "-1"] {
        let text = format!(
            "[store]\nurl = \"redis://127.0.0.1:6379/0\"\nrejection_cache_max_clients = {cap}\n{LIMIT}"
        );
        let error = Config::parse(&text).err().unwrap().to_string();
        if cap != "-1" {
            assert!(
                error.contains(&format!(
                    "rejection_cache_max_clients must be from 1 to 10000000 (got {cap})"
                )),
                "{error}"
            );
        }
        assert!(error.contains("line 3,"), "{error}");
    }
    let typo = "[store]\nrejection_cache = \"yes\"\n".to_owned() + LIMIT;
    assert!(Config::parse(&typo).is_err());
}

#[test]
fn clock_is_the_callers_by_default_or_redis_for_a_redis_store() {
    let redis = "url = \"redis://127.0.0.1:6379/0\"\n";
    let config = Config::parse(&format!("[store]\n{redis}{LIMIT}")).unwrap();
    assert_eq!(config.store.clock, tollgate_redis::TimeSource::Caller);
    let cache = tollgate_config::store::rejection_cache(&config.store).expect("cache");
    assert_eq!(cache.own_now_ms(), None, "the callers' times");
    let set = format!("[store]\n{redis}clock = \"redis\"\n{LIMIT}");
    let config = Config::parse(&set).unwrap();
    assert_eq!(config.store.clock, tollgate_redis::TimeSource::Redis);
    // Redis's clock times the decisions, a monotonic clock the cache's waits.
    let cache = tollgate_config::store::rejection_cache(&config.store).expect("cache");
    assert!(cache.own_now_ms().is_some(), "a clock of its own");
    assert!(
        config.summary().contains("timed by Redis's clock"),
        "{}",
        config.summary()
    );
    let refusals = [
        (
            format!("[store]\n{redis}clock = \"ntp\"\n{LIMIT}"),
            "unknown clock \"ntp\"",
        ),
        (
            format!("[store]\nclock = \"redis\"\n{LIMIT}"),
            "the store is memory",
        ),
    ];
    for (bad, says) in refusals {
        match Config::parse(&bad) {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(says), "{bad}: {message}");
            }
            other => panic!("{bad}: expected a config error, got {other:?}"),
        }
    }
}
