//! `tollgate serve` and `tollgate replay` on a TLS Redis Cluster the test
//! starts itself, with a private CA and an ACL user.

use std::process::Command;

use tollgate_redis::testing::{ClusterOptions, RedisCluster};

mod cluster_common;
use cluster_common::{config, decided_by, keys, start_serve};

const BIN: &str = env!("CARGO_BIN_EXE_tollgate");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_replay_reach_a_tls_cluster_as_an_acl_user_with_a_private_ca() {
    let options = ClusterOptions {
        tls: true,
        extra: ["--user", "alice", "on", ">s3cret-pw", "~*", "&*", "+@all"]
            .map(String::from)
            .to_vec(),
        ..ClusterOptions::default()
    };
    let Some(cluster) = RedisCluster::spawn_with("tls_cluster_acl", &options) else {
        return;
    };
    let ca = cluster.certs().expect("a TLS cluster").ca.clone();
    let seeds: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("rediss://alice:s3cret-pw@127.0.0.1:{}", n.port()))
        .collect();
    let seeds = seeds.join(",");
    let dir = tempfile::tempdir().expect("temp dir");
    let serve = start_serve(&config(dir.path()), &seeds, Some(&ca)).await;
    let http = reqwest::Client::new();
    for client in ["a", "b", "c", "d", "e", "f"] {
        assert_eq!(decided_by(&http, &serve, client).await, "store");
    }
    let holding = (0..3)
        .filter(|&n| !keys(&cluster, n).trim().is_empty())
        .count();
    assert!(
        holding >= 2,
        "the clients' keys are spread over the masters"
    );

    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/");
    let output = Command::new(BIN)
        .args(["replay", "--redis-cluster", &seeds, "--redis-ca"])
        .arg(&ca)
        .arg(format!("{root}session2.replay"))
        .output()
        .expect("run tollgate replay");
    assert!(output.status.success(), "{output:?}");
    let expected = std::fs::read_to_string(format!("{root}session2.expected")).expect("expected");
    assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
    assert!(!String::from_utf8_lossy(&output.stderr).contains("s3cret-pw"));
}
