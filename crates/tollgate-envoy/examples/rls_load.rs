//! A small load generator for the rate limit service: many concurrent
//! `ShouldRateLimit` calls over a few HTTP/2 connections for a fixed time,
//! then decisions per second and latency percentiles.
//!
//! ```text
//! cargo run --release -p tollgate-envoy --example rls_server -- 127.0.0.1:8081 &
//! cargo run --release -p tollgate-envoy --example rls_load -- \
//!     addr=127.0.0.1:8081 connections=4 concurrency=64 seconds=10 keys=10000
//! ```
//!
//! Each call carries one descriptor `remote_address=<one of keys addresses>`
//! in domain `edge` (the `per-ip` rule of `examples/rules.toml`). The first
//! second is a warm-up and is not counted. (A benchmark tool: it reads the
//! wall clock, which the library itself never does.)

use std::time::{Duration, Instant};

use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::Endpoint;

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    ok: u64,
    over_limit: u64,
    errors: u64,
}

fn option(name: &str, default: &str) -> String {
    std::env::args()
        .skip(1)
        .find_map(|arg| arg.strip_prefix(&format!("{name}=")).map(str::to_owned))
        .unwrap_or_else(|| default.to_owned())
}

fn number(name: &str, default: u64) -> Result<u64, String> {
    option(name, &default.to_string())
        .parse()
        .map_err(|_| format!("{name} must be a whole number"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = option("addr", "127.0.0.1:8081");
    let connections = number("connections", 4)?.max(1);
    let concurrency = number("concurrency", 64)?.max(1);
    let seconds = number("seconds", 10)?.max(1);
    let keys = number("keys", 10_000)?.max(1);

    let mut channels = Vec::new();
    for _ in 0..connections {
        // One Endpoint::connect per channel: separate HTTP/2 connections.
        channels.push(
            Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await?,
        );
    }
    let start = Instant::now();
    let measure_from = start + Duration::from_secs(1);
    let deadline = measure_from + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let channel = channels[(task % connections) as usize].clone();
        tasks.push(tokio::spawn(async move {
            let mut client = RateLimitServiceClient::new(channel);
            let mut tally = Tally::default();
            let mut seed =
                0x9e37_79b9_7f4a_7c15_u64 ^ (task + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let client_ip = seed % keys;
                let request = RateLimitRequest {
                    domain: "edge".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "remote_address".into(),
                            value: format!(
                                "10.{}.{}.{}",
                                client_ip >> 16 & 255,
                                client_ip >> 8 & 255,
                                client_ip & 255
                            ),
                        }],
                        ..RateLimitDescriptor::default()
                    }],
                    hits_addend: 0,
                };
                let result = client.should_rate_limit(request).await;
                let elapsed = now.elapsed();
                if now < measure_from {
                    continue;
                }
                tally
                    .latencies_us
                    .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
                match result {
                    Ok(response) if response.get_ref().overall_code == Code::Ok as i32 => {
                        tally.ok += 1
                    }
                    Ok(_) => tally.over_limit += 1,
                    Err(_) => tally.errors += 1,
                }
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await?;
        all.latencies_us.extend(tally.latencies_us);
        all.ok += tally.ok;
        all.over_limit += tally.over_limit;
        all.errors += tally.errors;
    }
    all.latencies_us.sort_unstable();
    let n = all.latencies_us.len();
    if n == 0 {
        return Err("no calls completed".into());
    }
    let percentile = |p: f64| {
        let index = ((n as f64 * p).ceil() as usize).clamp(1, n) - 1;
        f64::from(all.latencies_us[index]) / 1000.0
    };
    println!(
        "calls={n} ok={} over_limit={} errors={} seconds={seconds} connections={connections} concurrency={concurrency} keys={keys}",
        all.ok, all.over_limit, all.errors
    );
    println!(
        "decisions/s={:.0} p50={:.3}ms p90={:.3}ms p99={:.3}ms p99.9={:.3}ms max={:.3}ms",
        n as f64 / seconds as f64,
        percentile(0.50),
        percentile(0.90),
        percentile(0.99),
        percentile(0.999),
        percentile(1.0),
    );
    Ok(())
}
