//! One load generator for a fleet of `tollgate serve` processes
//! (`scripts/bench-fleet.sh`): a fixed number of `POST /v1/check` calls on
//! keep-alive connections spread over every server, on one thread (like
//! `wrk -t1`), that also keeps what `wrk` cannot: which client each answer
//! was for. So it can say how many requests each client had allowed across
//! the whole fleet, and the script's plan has a window longer than the run,
//! so that number is what the one window allowed and must not exceed the
//! limit.
//!
//! ```text
//! fleet_load --servers 127.0.0.1:9001,127.0.0.1:9002 --requests 200000 \
//!   --connections 64 --clients 10000 [--abusers 100 --abuser-share 0.5] --limit 20
//! ```
//!
//! Workload: each call picks its client from a fixed pseudo-random sequence
//! (seeded, so every run asks the same): with probability `abuser-share`
//! one of the first `abusers` clients, otherwise one of the others. Prints
//! one line of `key=value` pairs.

// An example binary: its items need no docs.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// What the command line asks for.
struct Args {
    servers: Vec<String>,
    requests: usize,
    connections: usize,
    clients: usize,
    abusers: usize,
    abuser_share: f64,
    limit: u64,
}

fn parse_args() -> Result<Args> {
    let mut found: HashMap<String, String> = HashMap::new();
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("expected a --flag, got {flag:?}"))?;
        let value = words
            .next()
            .ok_or_else(|| format!("{flag} needs a value"))?;
        found.insert(name.to_owned(), value);
    }
    let get = |name: &str, default: &str| found.get(name).cloned().unwrap_or(default.into());
    let number = |name: &str, default: &str| -> Result<usize> {
        get(name, default)
            .parse()
            .map_err(|e| format!("--{name}: {e}").into())
    };
    Ok(Args {
        servers: get("servers", "127.0.0.1:8080")
            .split(',')
            .map(str::to_owned)
            .collect(),
        requests: number("requests", "200000")?,
        connections: number("connections", "64")?.max(1),
        clients: number("clients", "10000")?.max(1),
        abusers: number("abusers", "0")?,
        abuser_share: get("abuser-share", "0")
            .parse()
            .map_err(|e| format!("--abuser-share: {e}"))?,
        limit: number("limit", "100")? as u64,
    })
}

/// The client of every call, from a fixed seed (xorshift64*).
fn workload(args: &Args) -> Vec<u32> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let abusers = args.abusers.min(args.clients);
    let others = (args.clients - abusers).max(1) as u64;
    (0..args.requests)
        .map(|_| {
            let abusive = abusers > 0 && (next() % 1_000_000) as f64 / 1e6 < args.abuser_share;
            let client = if abusive {
                next() % abusers as u64
            } else {
                abusers as u64 + next() % others
            };
            client as u32
        })
        .collect()
}

/// One answer: for which client, allowed or not, who decided, how long it took.
struct Answer {
    client: u32,
    allowed: bool,
    decided_by: String,
    micros: u32,
}

/// Sends calls from the shared sequence on one keep-alive connection until
/// the sequence is used up.
async fn connection(
    server: String,
    calls: Arc<Vec<u32>>,
    next: Arc<AtomicUsize>,
) -> Result<Vec<Answer>> {
    let mut stream = TcpStream::connect(&server).await?;
    stream.set_nodelay(true)?;
    let mut answers = Vec::new();
    let mut buffer = Vec::with_capacity(4096);
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(&client) = calls.get(index) else {
            return Ok(answers);
        };
        let body = format!(r#"{{"client":"c{client}","cost":1}}"#);
        let request = format!(
            "POST /v1/check HTTP/1.1\r\nHost: {server}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let started = Instant::now();
        stream.write_all(request.as_bytes()).await?;
        let answer = read_response(&mut stream, &mut buffer).await?;
        answers.push(Answer {
            client,
            allowed: answer.contains(r#""allowed":true"#),
            decided_by: decided_by(&answer),
            micros: started.elapsed().as_micros().min(u32::MAX as u128) as u32,
        });
    }
}

/// Reads one HTTP/1.1 response (with a Content-Length) and returns its body.
async fn read_response(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Result<String> {
    buffer.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err("the server closed the connection".into());
        }
        buffer.extend_from_slice(&chunk[..read]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(head) = response.parse(buffer)? else {
            continue;
        };
        let length: usize = response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("content-length"))
            .and_then(|h| std::str::from_utf8(h.value).ok()?.parse().ok())
            .ok_or("a response without Content-Length")?;
        if buffer.len() >= head + length {
            if response.code != Some(200) && response.code != Some(429) {
                return Err(format!("HTTP {:?}", response.code).into());
            }
            return Ok(String::from_utf8_lossy(&buffer[head..head + length]).into_owned());
        }
    }
}

fn decided_by(body: &str) -> String {
    body.split(r#""decided_by":""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("?")
        .to_owned()
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted.get(index).copied().unwrap_or(0)) / 1000.0
}

fn report(args: &Args, answers: &[Answer], seconds: f64) {
    let mut allowed_per_client = vec![0u64; args.clients];
    let mut by: HashMap<&str, usize> = HashMap::new();
    let mut latencies: Vec<u32> = answers.iter().map(|a| a.micros).collect();
    latencies.sort_unstable();
    for answer in answers {
        if answer.allowed {
            allowed_per_client[answer.client as usize] += 1;
        }
        *by.entry(answer.decided_by.as_str()).or_default() += 1;
    }
    let most = allowed_per_client.iter().copied().max().unwrap_or(0);
    let over = allowed_per_client
        .iter()
        .filter(|&&n| n > args.limit)
        .count();
    let allowed: u64 = allowed_per_client.iter().sum();
    let mut decided: Vec<_> = by.into_iter().collect();
    decided.sort();
    let decided: Vec<String> = decided.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    println!(
        "requests={} seconds={seconds:.2} rate={:.0} p50_ms={:.2} p99_ms={:.2} allowed={allowed} \
         most_allowed_per_client={most} limit={} clients_over_limit={over} decided_by={}",
        answers.len(),
        answers.len() as f64 / seconds,
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        args.limit,
        decided.join(",")
    );
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let calls = Arc::new(workload(&args));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let answers = runtime.block_on(async {
        let next = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..args.connections)
            .map(|i| {
                let server = args.servers[i % args.servers.len()].clone();
                tokio::spawn(connection(server, calls.clone(), next.clone()))
            })
            .collect();
        let mut answers = Vec::with_capacity(calls.len());
        for task in tasks {
            answers.extend(task.await.map_err(|e| e.to_string())??);
        }
        Ok::<_, Box<dyn Error + Send + Sync>>(answers)
    })?;
    report(&args, &answers, started.elapsed().as_secs_f64());
    Ok(())
}
