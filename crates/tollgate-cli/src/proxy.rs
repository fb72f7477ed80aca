//! `tollgate proxy`: a rate-limiting reverse proxy in front of an upstream.
//!
//! Until plan config files arrive (with `tollgate serve`), the proxy limits
//! every client by one limit given on the command line.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tollgate::{MemoryBackend, SystemClock};
use tollgate_proxy::options::{parse_duration_ms, parse_key, single_limit_plan};
use tollgate_proxy::{Error, ProxyConfig};
use tollgate_tower::RateLimitConfig;

/// The options of `tollgate proxy`.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// The API to protect, e.g. http://127.0.0.1:3000 (a path is prefixed to every request).
    #[arg(long)]
    pub upstream: String,
    /// Where the proxy listens.
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub listen: String,
    /// Who a client is: `peer` (its IP address), `api-key` (Authorization: Bearer or X-API-Key),
    /// or `header:NAME` (e.g. header:X-Client-Id).
    #[arg(long, default_value = "peer")]
    pub key: String,
    /// With `--key peer`: how many trusted proxies in front append to X-Forwarded-For
    /// (0: ignore X-Forwarded-For, which any client can forge).
    #[arg(long, default_value_t = 0)]
    pub trust_forwarded_for: usize,
    /// The policy: sliding-window, token-bucket or gcra.
    #[arg(long, default_value = "sliding-window")]
    pub policy: String,
    /// Requests per window for each client.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// The window, e.g. 1s, 15m, 1d (or milliseconds).
    #[arg(long, default_value = "1s")]
    pub window: String,
    /// How long the upstream may take to start answering before the client gets a 504.
    #[arg(long, default_value = "30s")]
    pub upstream_timeout: String,
}

impl ProxyArgs {
    /// The proxy configuration these options describe (memory store, system clock).
    ///
    /// # Errors
    /// A [`tollgate_proxy::Error`] naming the option that is wrong.
    pub fn config(&self) -> Result<ProxyConfig, Error> {
        let plan = single_limit_plan("proxy", &self.policy, self.limit, &self.window)?;
        let key = parse_key(&self.key, self.trust_forwarded_for)?;
        let limits =
            RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), Arc::new(SystemClock));
        let timeout = parse_duration_ms("--upstream-timeout", &self.upstream_timeout)?;
        Ok(ProxyConfig::new(&self.upstream, key, limits)?
            .response_timeout(Duration::from_millis(timeout)))
    }
}

/// Runs the proxy until `shutdown` completes, printing where it listens.
///
/// # Errors
/// Bad options, or a listen address that cannot be bound.
pub async fn run(
    args: ProxyArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let config = args.config()?;
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!(
        "tollgate proxy: listening on http://{}, forwarding to {}, {} {} per {} per client ({})",
        listener.local_addr()?,
        config.upstream().url(),
        args.policy,
        args.limit,
        args.window,
        args.key,
    );
    tollgate_proxy::run(listener, config, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tollgate::Policy;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        proxy: ProxyArgs,
    }

    fn config(args: &[&str]) -> Result<ProxyConfig, String> {
        let cli = Cli::try_parse_from(std::iter::once("proxy").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.proxy.config().map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_give_a_working_config() {
        let config = config(&["--upstream", "http://127.0.0.1:3000"]).unwrap();
        assert_eq!(config.upstream().url(), "http://127.0.0.1:3000");
        let limit = &config.limits().plan().limits()[0];
        assert_eq!(
            (
                limit.policy().name(),
                limit.policy().limit(),
                limit.policy().window_ms()
            ),
            ("sliding-window", 100, 1_000)
        );
    }

    #[test]
    fn each_bad_option_is_named() {
        let cases: [(&[&str], &str); 6] = [
            (&["--upstream", "ftp://x"], "invalid upstream"),
            (
                &["--upstream", "http://h", "--window", "1w"],
                "invalid --window",
            ),
            (
                &["--upstream", "http://h", "--key", "cookie"],
                "invalid --key",
            ),
            (
                &["--upstream", "http://h", "--policy", "leaky"],
                "unknown policy",
            ),
            (
                &["--upstream", "http://h", "--limit", "0"],
                "limit must be at least 1",
            ),
            (
                &["--upstream", "http://h", "--upstream-timeout", "0s"],
                "invalid --upstream-timeout",
            ),
        ];
        for (args, expected) in cases {
            let err = config(args).err().unwrap_or_default();
            assert!(err.contains(expected), "{args:?}: {err}");
        }
    }
}
