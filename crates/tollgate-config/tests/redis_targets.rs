//! `[store]`'s ways to reach Redis: `url` (redis:// or rediss://, ACL users,
//! a database number), `cluster` (seed nodes), `tls_ca` (a private CA), and
//! the flags that replace them. Checked without connecting; mistakes are
//! shown at their line and column, and the summary never shows a password.

use std::path::PathBuf;

use tollgate_config::{Config, Overrides, StoreKind};

const LIMIT: &str =
    "[[plans.default]]\nname = \"s\"\npolicy = \"sliding-window\"\nlimit = 1\nwindow = \"1s\"\n";

/// A PEM file holding a real CA certificate (the one a test Redis's TLS
/// certificates are made with).
fn ca_file(dir: &tempfile::TempDir) -> PathBuf {
    tollgate_redis::testing::TestCerts::generate(dir.path()).ca
}

fn error(text: &str) -> String {
    Config::parse(text).expect_err("refused").to_string()
}

#[test]
fn rediss_with_an_acl_user_a_database_and_a_ca_is_read_and_summarised_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(&dir);
    let text = format!(
        "{LIMIT}[store]\nurl = \"rediss://alice:s3cret@10.0.0.5:6380/2\"\ntls_ca = {:?}\n",
        ca.display().to_string()
    );
    let config = Config::parse(&text).unwrap();
    assert_eq!(config.store.tls_ca.as_deref(), Some(ca.as_path()));
    let summary = config.summary();
    assert!(
        summary.contains("rediss://alice:***@10.0.0.5:6380/2 (private CA)"),
        "{summary}"
    );
    assert!(!summary.contains("s3cret"), "{summary}");
}

#[test]
fn a_cluster_is_given_by_its_seeds() {
    let text = format!(
        "{LIMIT}[store]\ncluster = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"]\n"
    );
    let config = Config::parse(&text).unwrap();
    assert_eq!(
        config.store.kind,
        StoreKind::RedisCluster {
            seeds: vec![
                "redis://127.0.0.1:7000".into(),
                "redis://127.0.0.1:7001".into()
            ]
        }
    );
    // The seeds as given, masked (without a password here: unchanged).
    assert!(config
        .summary()
        .contains("cluster [redis://127.0.0.1:7000, redis://127.0.0.1:7001]"));
}

#[test]
fn mistakes_in_the_redis_target_are_shown_at_their_line() {
    let both = error(&format!(
        "{LIMIT}[store]\nurl = \"redis://h:1\"\ncluster = [\"redis://h:2\"]\n"
    ));
    assert!(
        both.contains("line 7") && both.contains("not both"),
        "{both}"
    );
    let mixed = error(&format!(
        "{LIMIT}[store]\ncluster = [\"redis://h:1\", \"rediss://h:2\"]\n"
    ));
    assert!(mixed.contains("line 7") && mixed.contains("mix"), "{mixed}");
    let database = error(&format!("{LIMIT}[store]\ncluster = [\"redis://h:1/3\"]\n"));
    assert!(database.contains("only database 0"), "{database}");
    let dir = tempfile::tempdir().unwrap();
    let ca_without_tls = error(&format!(
        "{LIMIT}[store]\nurl = \"redis://h:1\"\ntls_ca = \"{}\"\n",
        ca_file(&dir).display()
    ));
    assert!(ca_without_tls.contains("not rediss://"), "{ca_without_tls}");
    // With the memory store a CA would be ignored: refused, at its line.
    for store in ["", "url = \"memory\"\n"] {
        let ca_on_memory = error(&format!(
            "{LIMIT}[store]\n{store}tls_ca = \"{}\"\n",
            ca_file(&dir).display()
        ));
        let line = if store.is_empty() { "line 7" } else { "line 8" };
        assert!(
            ca_on_memory.contains(line) && ca_on_memory.contains("but the store is memory"),
            "{ca_on_memory}"
        );
    }
    let negative = error(&format!("{LIMIT}[store]\nurl = \"redis://h:1/-1\"\n"));
    assert!(
        negative.contains("line 7") && negative.contains("database -1 does not exist"),
        "{negative}"
    );
    let not_a_number = error(&format!("{LIMIT}[store]\nurl = \"redis://h:1/abc\"\n"));
    assert!(
        not_a_number.contains("has no valid database number")
            && !not_a_number.contains("is not a redis://"),
        "{not_a_number}"
    );
    // A unix socket's database and path are written otherwise (audit: the
    // hint spoke of host:port).
    let unix_database = error(&format!(
        "{LIMIT}[store]\nurl = \"unix:///tmp/r.sock?db=x\"\n"
    ));
    assert!(
        unix_database.contains("?db= after the socket's path"),
        "{unix_database}"
    );
    let unix_relative = error(&format!("{LIMIT}[store]\nurl = \"unix://relative.sock\"\n"));
    assert!(
        unix_relative
            .contains("is not a unix socket's URL (unix:// then the socket's absolute path"),
        "{unix_relative}"
    );
    let missing = error(&format!(
        "{LIMIT}[store]\nurl = \"rediss://h:1\"\ntls_ca = \"/nonexistent/ca.pem\"\n"
    ));
    assert!(
        missing.contains("line 8") && missing.contains("/nonexistent/ca.pem"),
        "{missing}"
    );
}

#[test]
fn the_flags_replace_the_file_and_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let ca = ca_file(&dir);
    let flags = Overrides {
        redis_cluster: vec![
            "rediss://127.0.0.1:7000".into(),
            "rediss://127.0.0.1:7001".into(),
        ],
        redis_ca: Some(ca.clone()),
        ..Overrides::default()
    };
    let config = Config::parse_with(LIMIT, &flags).unwrap();
    assert!(matches!(config.store.kind, StoreKind::RedisCluster { ref seeds } if seeds.len() == 2));
    assert_eq!(config.store.tls_ca, Some(ca));
    let bad = Overrides {
        redis: Some("redis://127.0.0.1:6379".into()),
        redis_ca: Some("/nonexistent/ca.pem".into()),
        ..Overrides::default()
    };
    let message = Config::parse_with(LIMIT, &bad).err().unwrap().to_string();
    assert!(message.contains("/nonexistent/ca.pem"), "{message}");
    // The file's CA left under a flag's plain URL: the error says whose
    // each is (audit: it read as if the CA were given for that URL).
    let file = format!(
        "[store]\nurl = \"rediss://h:1\"\ntls_ca = \"{}\"\n{LIMIT}",
        ca_file(&dir).display()
    );
    let plain = Overrides {
        redis: Some("redis://127.0.0.1:6379".into()),
        ..Overrides::default()
    };
    let message = Config::parse_with(&file, &plain).err().unwrap().to_string();
    assert!(
        message.contains(
            "not rediss:// (the CA is the config file's [store] tls_ca, the URL --redis's)"
        ),
        "{message}"
    );
}

/// `--redis-replicas-to-ack N` replaces the file's `replicas_to_ack`, on a
/// Redis store only, and within the Redis store's bound; a refused flag
/// leaves the config as it was.
#[test]
fn the_replicas_to_ack_flag_replaces_the_files_on_a_redis_store_only() {
    let flag = |replicas: u32, redis: Option<&str>| Overrides {
        redis: redis.map(str::to_owned),
        redis_replicas_to_ack: Some(replicas),
        ..Overrides::default()
    };
    let url = Some("redis://127.0.0.1:6379/0");
    let file = format!("[store]\nurl = \"redis://127.0.0.1:6379/0\"\nreplicas_to_ack = 2\n{LIMIT}");
    for replicas in [0, 1, tollgate_redis::MAX_REPLICAS_TO_ACK] {
        let config = Config::parse_with(&file, &flag(replicas, None)).unwrap();
        assert_eq!(config.store.replicas_to_ack, replicas);
        let config = Config::parse_with(LIMIT, &flag(replicas, url)).unwrap();
        assert_eq!(config.store.replicas_to_ack, replicas);
    }

    let mut config = Config::parse(&file).unwrap();
    let above = tollgate_redis::MAX_REPLICAS_TO_ACK + 1;
    let message = flag(above, None)
        .apply(&mut config)
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        format!("invalid --redis-replicas-to-ack {above}: must be from 0 to 16")
    );
    assert_eq!(config.store.replicas_to_ack, 2, "unchanged");

    let mut memory = Config::parse(LIMIT).unwrap();
    let message = flag(1, None).apply(&mut memory).unwrap_err().to_string();
    assert!(
        message.starts_with("--redis-replicas-to-ack 1 needs a Redis store"),
        "{message}"
    );
    assert_eq!(
        (memory.store.kind, memory.store.replicas_to_ack),
        (StoreKind::Memory, 0)
    );
}

/// A cluster's seeds must be reachable by TCP: the cluster names its nodes
/// by IP and port, so a unix socket seed is refused by the check, at the
/// `cluster` value (line 7, column 11), as serve and the flags refuse it.
#[test]
fn a_unix_socket_seed_of_a_cluster_is_refused_at_its_line() {
    let unix = error(&format!(
        "{LIMIT}[store]\ncluster = [\"unix:///tmp/x.sock\"]\n"
    ));
    assert!(unix.contains("line 7, column 11"), "{unix}");
    assert!(unix.contains("unix socket"), "{unix}");
    let flag = Overrides {
        redis_cluster: vec!["unix:///tmp/x.sock?pass=s3cret".into()],
        ..Overrides::default()
    };
    let mut config = Config::parse(LIMIT).unwrap();
    let refused = flag.apply(&mut config).expect_err("refused").to_string();
    assert!(refused.contains("unix socket"), "{refused}");
    assert!(!refused.contains("s3cret"), "{refused}");
}

/// `replicas_to_ack` is for a Redis store: with the memory store it would
/// be ignored, so it is refused at its line, as `tls_ca` is (0, the
/// default, asks nothing and is accepted).
#[test]
fn replicas_to_ack_on_the_memory_store_is_refused_at_its_line() {
    for store in ["", "url = \"memory\"\n"] {
        let refused = error(&format!("{LIMIT}[store]\n{store}replicas_to_ack = 1\n"));
        let line = if store.is_empty() { "line 7" } else { "line 8" };
        assert!(refused.contains(line), "{refused}");
        assert!(refused.contains("the store is memory"), "{refused}");
        let none = format!("{LIMIT}[store]\n{store}replicas_to_ack = 0\n");
        assert!(Config::parse(&none).is_ok(), "{none}");
    }
}
