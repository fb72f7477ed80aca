//! Envoy's rate limit service inside `tollgate serve`: a tonic client calls
//! the gRPC port of an in-process server (prepared as `tollgate serve`
//! prepares it, on port 0), whose gRPC health check says SERVING; a config
//! reload changes a rule, and the port can be turned off.

mod envoy_common;

use std::net::SocketAddr;

use tokio::sync::oneshot;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::google::protobuf::UInt64Value;
use tollgate_server::{Config, Error, Options, Overrides};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use envoy_common::*;

#[tokio::test]
async fn serve_answers_envoy_over_grpc_and_a_reload_changes_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config_text("free")).unwrap();
    let prepared = tollgate_server::prepare(Options {
        config: Some(path.clone()),
        flags: Overrides {
            listen: vec!["127.0.0.1:0".into()],
            // The flag wins over the file (which also says port 0 here).
            grpc_listen: Some("127.0.0.1:0".into()),
            ..Overrides::default()
        },
    })
    .await
    .unwrap();
    let grpc: SocketAddr = prepared.grpc_addr().unwrap();
    assert_ne!(grpc.port(), 0);
    assert!(
        prepared.banner().contains(&format!(
            "gRPC (Envoy rate limit service) listening on {grpc}"
        )),
        "{}",
        prepared.banner()
    );
    let server = prepared.server().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(prepared.run(async {
        let _ = stopped.await;
    }));
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();

    // gRPC health checking on the same port: the server and the service
    // are SERVING.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
        let check = HealthCheckRequest {
            service: service.into(),
        };
        let status = health.check(check).await.unwrap().into_inner().status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    drop(health);

    // Plan `free`: 3 a day per address, then OVER_LIMIT.
    let mut codes = Vec::new();
    for _ in 0..4 {
        let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
        assert_eq!(limit_name(&response).as_deref(), Some("free-1d"));
        codes.push(Code::try_from(response.overall_code).unwrap());
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
    // A descriptor no rule matches is not limited.
    let other = ask(
        &mut client,
        request("elsewhere", "remote_address", "10.0.0.1"),
    )
    .await;
    assert_eq!(other.overall_code, Code::Ok as i32);
    assert_eq!(limit_name(&other), None);

    // Reload: the rule now uses `paid`, with room again for the address.
    std::fs::write(&path, config_text("paid")).unwrap();
    server.reload().unwrap();
    let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
    assert_eq!(response.overall_code, Code::Ok as i32);
    assert_eq!(limit_name(&response).as_deref(), Some("paid-1d"));
    assert_eq!(response.statuses[0].limit_remaining, 9);

    // Envoy's hits_addend often counts bytes (a bandwidth quota): the HTTP
    // API's max_cost does not bound it. One client's descriptors add up to
    // at most u32::MAX; past it the request is OVER_LIMIT (an error status
    // would be let through by Envoy's failure mode), not capped.
    std::fs::write(&path, format!("max_cost = 5\n{}", config_text("paid"))).unwrap();
    server.reload().unwrap();
    let mut costly = request("edge", "remote_address", "10.0.0.1");
    costly.hits_addend = 6;
    let response = ask(&mut client, costly).await;
    assert_eq!(response.overall_code, Code::Ok as i32);
    assert_eq!(response.statuses[0].limit_remaining, 3);
    let mut twice = request("edge", "remote_address", "10.0.0.1");
    twice.descriptors.push(twice.descriptors[0].clone());
    twice.descriptors[0].hits_addend = Some(UInt64Value {
        value: u64::from(u32::MAX),
    });
    let response = ask(&mut client, twice).await;
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
    assert_eq!(response.statuses[0].limit_remaining, 2, "nothing consumed");

    // A rule naming an unknown plan is refused; the running rules stay.
    std::fs::write(&path, config_text("gold")).unwrap();
    assert!(server.reload().is_err());
    let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
    assert_eq!(limit_name(&response).as_deref(), Some("paid-1d"));

    let _ = stop.send(());
    drop(client);
    task.await.unwrap().unwrap();
}

/// `--grpc-listen off` and `[envoy] grpc_listen = "off"`: serve binds no
/// gRPC port (the address the file names stays free), says so, and serves
/// HTTP as usual.
#[tokio::test]
async fn the_grpc_port_can_be_turned_off_by_flag_or_in_the_config() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    let text = config_text("free").replace("127.0.0.1:0", &taken_addr.to_string());
    std::fs::write(&path, &text).unwrap();
    let options = |grpc_listen: Option<&str>| Options {
        config: Some(path.clone()),
        flags: Overrides {
            listen: vec!["127.0.0.1:0".into()],
            grpc_listen: grpc_listen.map(str::to_owned),
            ..Overrides::default()
        },
    };
    // On, the file's address is bound (and taken here, so it fails).
    let error = tollgate_server::prepare(options(None)).await.err().unwrap();
    assert!(
        matches!(error, Error::Bind { addr, .. } if addr == taken_addr),
        "{error}"
    );
    let error = tollgate_server::prepare(options(Some("nowhere")))
        .await
        .err()
        .unwrap();
    assert!(error.to_string().contains("or off"), "{error}");

    let off_by_flag = tollgate_server::prepare(options(Some("off")))
        .await
        .unwrap();
    std::fs::write(&path, text.replace(&taken_addr.to_string(), "off")).unwrap();
    let off_in_file = tollgate_server::prepare(options(None)).await.unwrap();
    for prepared in [off_by_flag, off_in_file] {
        assert_eq!(prepared.grpc_addr(), None);
        assert_eq!(prepared.server().config().envoy.grpc_listen, None);
        assert!(
            prepared
                .banner()
                .contains("gRPC (Envoy rate limit service) off"),
            "{}",
            prepared.banner()
        );
        let http = prepared.addrs()[0];
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(prepared.run(async {
            let _ = stopped.await;
        }));
        let status = tokio::task::spawn_blocking(move || {
            tollgate_testkit::get_status(http, "/healthz", &[])
        })
        .await
        .unwrap();
        assert_eq!(status, 200);
        let _ = stop.send(());
        task.await.unwrap().unwrap();
    }
    drop(taken);
}

#[test]
fn envoy_rules_are_checked_with_the_line_of_the_mistake() {
    let text = config_text("gold");
    let error = Config::parse(&text).err().unwrap();
    let tollgate_server::config::Error::InvalidConfig { line, message, .. } = &error else {
        panic!("{error}");
    };
    assert_eq!(*line, 7, "{error}");
    assert!(message.contains("unknown plan \"gold\""), "{error}");
    let bad_addr = text.replace("grpc_listen = \"127.0.0.1:0\"", "grpc_listen = \"nowhere\"");
    let error = Config::parse(&bad_addr).err().unwrap().to_string();
    assert!(
        error.contains("line 5,") && error.contains("invalid grpc_listen"),
        "{error}"
    );
}

#[test]
fn the_embedded_default_answers_envoy_per_client_address() {
    let config = Config::embedded_default();
    assert_eq!(config.envoy.rules.len(), 1);
    assert_eq!(
        config.envoy.grpc_listen,
        Some(tollgate_server::config::DEFAULT_GRPC_LISTEN)
    );
}
