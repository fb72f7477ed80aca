//! A standalone tollgate rate limit service for Envoy, on the rules of
//! `examples/rules.toml` (which match `examples/envoy.yaml`).
//!
//! ```text
//! cargo run --release -p tollgate-envoy --example rls_server -- 127.0.0.1:8081 [WORKERS]
//! ```
//!
//! `WORKERS`: the server's threads (default one per core, as
//! `tollgate serve`).

use std::sync::Arc;

use tollgate::{AnyPolicy, Limit, MemoryBackend, Plan, SystemClock};
use tollgate_envoy::{Rules, RulesConfig, ServiceConfig};

fn limit(name: &str, policy: &str, n: u32, window_ms: u64) -> Result<Limit, tollgate::Error> {
    Ok(Limit::new(
        name,
        AnyPolicy::from_name(policy, n, window_ms)?,
        false,
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8081".to_owned());
    let workers = match std::env::args().nth(2) {
        Some(n) => n
            .parse()
            .map_err(|_| "WORKERS must be a whole number above 0")?,
        None => tollgate_envoy::default_workers(),
    };
    let plans = vec![
        Plan::new("per-ip", vec![limit("1s", "sliding-window", 20, 1_000)?])?,
        Plan::new(
            "per-key",
            vec![
                limit("1s", "gcra", 100, 1_000)?,
                limit("1d", "token-bucket", 100_000, 86_400_000)?,
            ],
        )?,
        Plan::new("login", vec![limit("1m", "sliding-window", 5, 60_000)?])?,
    ];
    let rules = RulesConfig::from_toml(include_str!("rules.toml"))?;
    let config = ServiceConfig::new(
        Rules::new(rules, &plans)?,
        Arc::new(MemoryBackend::new()),
        Arc::new(SystemClock),
    );
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!(
        "tollgate rate limit service (gRPC) on {}, {workers} workers",
        listener.local_addr()?
    );
    tollgate_envoy::run_workers(listener, config, workers, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
