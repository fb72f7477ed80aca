//! What the Envoy tests of `tollgate serve` share: a config with an Envoy
//! rule, requests, and a server on port 0 with a gRPC client.
#![allow(dead_code)]

use std::net::SocketAddr;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_server::{Error, Options, Overrides};
use tonic::transport::Channel;

/// Plans `free` (3 a day) and `paid` (10 a day); the Envoy rule for domain
/// `edge` and one budget per `remote_address` uses `rule_plan`.
pub fn config_text(rule_plan: &str) -> String {
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

pub fn request(domain: &str, key: &str, value: &str) -> RateLimitRequest {
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

pub async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    r: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(r).await.unwrap().into_inner()
}

pub fn limit_name(response: &RateLimitResponse) -> Option<String> {
    response.statuses[0]
        .current_limit
        .as_ref()
        .map(|l| l.name.clone())
}

/// `tollgate serve` on `text` (written to a file), HTTP and gRPC on port 0.
pub struct Running {
    pub http: SocketAddr,
    pub grpc: RateLimitServiceClient<Channel>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), Error>>,
    _dir: tempfile::TempDir,
}

impl Running {
    pub async fn start(text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, text).unwrap();
        let prepared = tollgate_server::prepare(Options {
            config: Some(path),
            flags: Overrides {
                listen: vec!["127.0.0.1:0".into()],
                grpc_listen: Some("127.0.0.1:0".into()),
                ..Overrides::default()
            },
        })
        .await
        .unwrap();
        let http = prepared.addrs()[0];
        let grpc = prepared.grpc_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(prepared.run(async {
            let _ = stopped.await;
        }));
        let grpc = RateLimitServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap();
        Self {
            http,
            grpc,
            stop,
            task,
            _dir: dir,
        }
    }

    pub async fn ask(&mut self, r: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.grpc.should_rate_limit(r).await.map(|r| r.into_inner())
    }

    pub async fn get(&self, path: &str) -> String {
        reqwest::get(format!("http://{}{path}", self.http))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        drop(self.grpc);
        self.task.await.unwrap().unwrap();
    }
}
