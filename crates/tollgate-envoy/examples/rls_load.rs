//! A small load generator for the rate limit service: many concurrent
//! unary calls over a few HTTP/2 connections, then calls per second and
//! latency percentiles.
//!
//! ```text
//! cargo run --release -p tollgate-envoy --example rls_server -- 127.0.0.1:8081 &
//! cargo run --release -p tollgate-envoy --example rls_load -- \
//!     addr=127.0.0.1:8081 connections=4 concurrency=64 seconds=10 keys=10000 mode=rls
//! ```
//!
//! - `mode=rls` (the default): each call is a `ShouldRateLimit` with one
//!   descriptor `remote_address=<one of keys addresses>` in domain `edge`
//!   (the `per-ip` rule of `examples/rules.toml`).
//! - `mode=rls2`: each call names two clients, as `examples/envoy.yaml`
//!   does: the address above and `api_key=<k and the same number>` (the
//!   `per-key` rule), decided together, all or nothing.
//! - `mode=health`: each call is a `grpc.health.v1.Health/Check` of the
//!   server (`service = ""`): the same transport without a decision, the
//!   ceiling a decision is compared with.
//!
//! `concurrency` calls are kept in flight, spread over `connections`
//! connections. For `seconds` after a 1 s warm-up (not counted); or, with
//! `calls=N`, exactly N calls and no warm-up (for instruction counts under
//! callgrind, where time means nothing). `threads=N` sets the load
//! generator's runtime threads (default: one per core). (A benchmark tool:
//! it reads the wall clock, which the library itself never does.)

use std::time::{Duration, Instant};

use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use tollgate_envoy::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_envoy::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    ok: u64,
    over_limit: u64,
    errors: u64,
}

/// What one task does, call after call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Rls,
    /// Two clients per call.
    Rls2,
    Health,
}

/// When a task stops, and which calls are counted.
#[derive(Clone, Copy)]
enum Span {
    /// Calls between `measure_from` and `deadline` are counted.
    Timed {
        measure_from: Instant,
        deadline: Instant,
    },
    /// This many calls, all counted.
    Calls(u64),
}

/// How a call ended.
enum Outcome {
    Ok,
    OverLimit,
    Error,
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let threads = number("threads", 0)?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        runtime.worker_threads(usize::try_from(threads)?);
    }
    runtime.enable_all().build()?.block_on(run())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let addr = option("addr", "127.0.0.1:8081");
    let connections = number("connections", 4)?.max(1);
    let concurrency = number("concurrency", 64)?.max(1);
    let seconds = number("seconds", 10)?.max(1);
    let keys = number("keys", 10_000)?.max(1);
    let calls = number("calls", 0)?;
    let mode = match option("mode", "rls").as_str() {
        "rls" => Mode::Rls,
        "rls2" => Mode::Rls2,
        "health" => Mode::Health,
        other => return Err(format!("mode must be rls, rls2 or health, not {other}").into()),
    };

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
    let span = match calls {
        0 => Span::Timed {
            measure_from: start + Duration::from_secs(1),
            deadline: start + Duration::from_secs(1 + seconds),
        },
        n => Span::Calls(n),
    };
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let channel = channels[(task % connections) as usize].clone();
        let span = match span {
            // The calls shared out: the first tasks take one more.
            Span::Calls(n) => Span::Calls(n / concurrency + u64::from(task < n % concurrency)),
            timed => timed,
        };
        tasks.push(tokio::spawn(drive(channel, mode, span, task, keys)));
    }
    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await?;
        all.latencies_us.extend(tally.latencies_us);
        all.ok += tally.ok;
        all.over_limit += tally.over_limit;
        all.errors += tally.errors;
    }
    let elapsed = match span {
        Span::Timed { .. } => seconds as f64,
        Span::Calls(_) => start.elapsed().as_secs_f64(),
    };
    report(all, mode, elapsed, connections, concurrency, keys)
}

/// One task: calls one after the other on `channel` until `span` ends.
async fn drive(channel: Channel, mode: Mode, span: Span, task: u64, keys: u64) -> Tally {
    let mut rls = RateLimitServiceClient::new(channel.clone());
    let mut health = HealthClient::new(channel);
    let mut tally = Tally::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (task + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let mut made = 0;
    loop {
        let now = Instant::now();
        let counted = match span {
            Span::Timed { deadline, .. } if now >= deadline => break,
            Span::Timed { measure_from, .. } => now >= measure_from,
            Span::Calls(n) if made >= n => break,
            Span::Calls(_) => true,
        };
        made += 1;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let outcome = match mode {
            Mode::Rls => decide(&mut rls, seed % keys, false).await,
            Mode::Rls2 => decide(&mut rls, seed % keys, true).await,
            Mode::Health => check(&mut health).await,
        };
        let elapsed = now.elapsed();
        if !counted {
            continue;
        }
        tally
            .latencies_us
            .push(u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX));
        match outcome {
            Outcome::Ok => tally.ok += 1,
            Outcome::OverLimit => tally.over_limit += 1,
            Outcome::Error => tally.errors += 1,
        }
    }
    tally
}

/// A descriptor of one entry.
fn descriptor(key: &str, value: String) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value,
        }],
        ..RateLimitDescriptor::default()
    }
}

/// One `ShouldRateLimit` for the client address numbered `client_ip`, and
/// with `with_key` for the API key of the same number too.
async fn decide(
    client: &mut RateLimitServiceClient<Channel>,
    client_ip: u64,
    with_key: bool,
) -> Outcome {
    let address = format!(
        "10.{}.{}.{}",
        client_ip >> 16 & 255,
        client_ip >> 8 & 255,
        client_ip & 255
    );
    let mut descriptors = vec![descriptor("remote_address", address)];
    if with_key {
        descriptors.push(descriptor("api_key", format!("k{client_ip}")));
    }
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors,
        hits_addend: 0,
    };
    match client.should_rate_limit(request).await {
        Ok(response) if response.get_ref().overall_code == Code::Ok as i32 => Outcome::Ok,
        Ok(_) => Outcome::OverLimit,
        Err(_) => Outcome::Error,
    }
}

/// One `Health/Check` of the whole server; anything but `SERVING` is an
/// error.
async fn check(client: &mut HealthClient<Channel>) -> Outcome {
    let request = HealthCheckRequest {
        service: String::new(),
    };
    match client.check(request).await {
        Ok(response) if response.get_ref().status == ServingStatus::Serving as i32 => Outcome::Ok,
        _ => Outcome::Error,
    }
}

fn report(
    mut all: Tally,
    mode: Mode,
    seconds: f64,
    connections: u64,
    concurrency: u64,
    keys: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    all.latencies_us.sort_unstable();
    let n = all.latencies_us.len();
    if n == 0 {
        return Err("no calls completed".into());
    }
    let percentile = |p: f64| {
        let index = ((n as f64 * p).ceil() as usize).clamp(1, n) - 1;
        f64::from(all.latencies_us[index]) / 1000.0
    };
    let mode = match mode {
        Mode::Rls => "rls",
        Mode::Rls2 => "rls2",
        Mode::Health => "health",
    };
    println!(
        "mode={mode} calls={n} ok={} over_limit={} errors={} seconds={seconds:.2} connections={connections} concurrency={concurrency} keys={keys}",
        all.ok, all.over_limit, all.errors
    );
    println!(
        "mode={mode} calls/s={:.0} p50={:.3}ms p90={:.3}ms p99={:.3}ms p99.9={:.3}ms max={:.3}ms",
        n as f64 / seconds,
        percentile(0.50),
        percentile(0.90),
        percentile(0.99),
        percentile(0.999),
        percentile(1.0),
    );
    Ok(())
}
