//! The rate limit service on a loopback port, started in-process by the
//! tests of this crate, with a client connected to it; and the rules,
//! plans and descriptors several of them share.

use std::net::SocketAddr;

use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use tollgate::{AnyPolicy, Limit, ManualClock, Plan, Store};
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};
use tonic::transport::Channel;

/// Rules of two plans: an address (`remote_address`) on `per-ip`, an API
/// key (`api_key`) on `per-key`.
#[allow(dead_code)] // not every test crate that includes this module uses it
pub const IP_AND_KEY_RULES: &str = r#"
[[rules]]
domain = "edge"
descriptor = [{ key = "remote_address" }]
plan = "per-ip"

[[rules]]
domain = "edge"
descriptor = [{ key = "api_key" }]
plan = "per-key"
"#;

/// One rule: each address (`remote_address`) of domain `edge` on `per-ip`.
const PER_IP_RULES: &str = r#"
[[rules]]
domain = "edge"
descriptor = [{ key = "remote_address" }]
plan = "per-ip"
"#;

/// `per-ip`: two calls per address per second (sliding window), so that
/// the first call leaves 1, and a budget with 1 left after one call had
/// nothing taken before it.
#[allow(dead_code)]
pub fn per_ip_plan() -> Plan {
    let policy = AnyPolicy::from_name("sliding-window", 2, 1_000).expect("policy");
    Plan::new("per-ip", vec![Limit::new("1s", policy, false)]).expect("plan")
}

/// The service of one rule, each address on [`per_ip_plan`], on `store`,
/// its clock stopped at 0.
#[allow(dead_code)]
pub fn per_ip_config(store: Arc<dyn Store>) -> ServiceConfig {
    let config = RulesConfig::from_toml(PER_IP_RULES).expect("rules");
    let rules = Rules::new(config, &[per_ip_plan()]).expect("rules");
    ServiceConfig::new(rules, store, Arc::new(ManualClock::new(0)))
}

/// Each client of [`IP_AND_KEY_RULES`] may make this many requests a day.
#[allow(dead_code)]
pub const LIMIT: u32 = 5;

/// The plans of [`IP_AND_KEY_RULES`], `per-ip` and `per-key`, each `LIMIT`
/// a day under `policy`.
#[allow(dead_code)]
pub fn ip_and_key_plans(policy: &str) -> Vec<Plan> {
    let plan = |name: &str| {
        let policy = AnyPolicy::from_name(policy, LIMIT, 86_400_000).expect("policy");
        Plan::new(name, vec![Limit::new("per-day", policy, false)]).expect("plan")
    };
    vec![plan("per-ip"), plan("per-key")]
}

/// A request of domain `edge` with `descriptors`.
#[allow(dead_code)]
pub fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    }
}

/// A descriptor of one entry.
#[allow(dead_code)]
pub fn descriptor(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..RateLimitDescriptor::default()
    }
}

/// The caller's address, under [`IP_AND_KEY_RULES`]' `per-ip`.
#[allow(dead_code)]
pub fn address() -> RateLimitDescriptor {
    descriptor("remote_address", "10.0.0.1")
}

/// The caller's API key, under [`IP_AND_KEY_RULES`]' `per-key`.
#[allow(dead_code)]
pub fn key() -> RateLimitDescriptor {
    descriptor("api_key", "k")
}

/// `tollgate_envoy::run` on 127.0.0.1:0, and a client of it.
#[allow(dead_code)]
pub struct Running {
    /// Where the server listens (for a raw client; not every test uses it).
    #[allow(dead_code)]
    pub addr: SocketAddr,
    /// A client connected to it.
    pub client: RateLimitServiceClient<Channel>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)]
impl Running {
    /// Serves `config` on a free loopback port and connects a client.
    pub async fn start(config: ServiceConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            tollgate_envoy::run(listener, config, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        let client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        Running {
            addr,
            client,
            stop,
            task,
        }
    }

    /// Shuts the server down and waits until it has stopped.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        drop(self.client);
        self.task.await.unwrap();
    }
}
