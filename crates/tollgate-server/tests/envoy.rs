//! Envoy's rate limit service inside `tollgate serve`: a tonic client calls
//! the gRPC port of an in-process server (prepared as `tollgate serve`
//! prepares it, on port 0), and a config reload changes a rule.

use std::net::SocketAddr;

use tokio::sync::oneshot;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_server::{Config, Error, Options};
use tonic::transport::Channel;

/// Plans `free` (3 a day) and `paid` (10 a day); the Envoy rule for domain
/// `edge` and one budget per `remote_address` uses `rule_plan`.
fn config_text(rule_plan: &str) -> String {
    format!(
        r#"
default_plan = "free"

[envoy]
grpc_listen = "127.0.0.1:0"

[[envoy.rules]]
domain = "edge"
descriptor = [{{ key = "remote_address" }}]
plan = "{rule_plan}"

[[plans.free]]
name = "1d"
policy = "sliding-window"
limit = 3
window = "1d"

[[plans.paid]]
name = "1d"
policy = "sliding-window"
limit = 10
window = "1d"
"#
    )
}

fn request(domain: &str, key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(r).await.unwrap().into_inner()
}

fn limit_name(response: &RateLimitResponse) -> Option<String> {
    response.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.name.clone())
}

#[tokio::test]
async fn serve_answers_envoy_over_grpc_and_a_reload_changes_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, config_text("free")).unwrap();
    let prepared = tollgate_server::prepare(Options {
        config: Some(path.clone()),
        listen: vec!["127.0.0.1:0".into()],
        // The flag wins over the file (which also says port 0 here).
        grpc_listen: Some("127.0.0.1:0".into()),
        redis: None,
    })
    .await
    .unwrap();
    let grpc: SocketAddr = prepared.grpc_addr();
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

    // A rule naming an unknown plan is refused; the running rules stay.
    std::fs::write(&path, config_text("gold")).unwrap();
    assert!(server.reload().is_err());
    let response = ask(&mut client, request("edge", "remote_address", "10.0.0.1")).await;
    assert_eq!(limit_name(&response).as_deref(), Some("paid-1d"));

    let _ = stop.send(());
    drop(client);
    task.await.unwrap().unwrap();
}

#[test]
fn envoy_rules_are_checked_with_the_line_of_the_mistake() {
    let text = config_text("gold");
    let error = Config::parse(&text).err().unwrap();
    let Error::InvalidConfig { line, message, .. } = &error else {
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
        tollgate_server::config::DEFAULT_GRPC_LISTEN
    );
}
