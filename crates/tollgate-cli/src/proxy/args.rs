//! The options of `tollgate proxy`, and the proxy configuration they
//! build: the client key, one limit or a `--config` file's plans, the
//! store, the upstream and its timeout, the connection limits.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tollgate::{Plan, Policy, SystemClock};
use tollgate_config::{Config, Overrides};
use tollgate_connections::Limits;
use tollgate_proxy::options::{connection_limits, parse_duration_ms, parse_key, single_limit_plan};
use tollgate_proxy::{Error, ProxyConfig};
use tollgate_tower::RateLimitConfig;

use super::plans::{connect_store, invalid_redis, plan_config, redis_option, Running, Sweep};
use crate::redis_args::RedisArgs;

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
    /// A `tollgate serve` config file: its plans, `[clients]` (client key →
    /// plan), default plan and `[store]` replace --policy/--limit/--window.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["policy", "limit", "window"])]
    pub config: Option<PathBuf>,
    /// Where the limit state lives (default: this process's memory, or the
    /// `--config` file's `[store]`, which these flags replace).
    #[command(flatten)]
    pub redis: RedisArgs,
    /// The policy: sliding-window, token-bucket or gcra.
    #[arg(long, default_value = "sliding-window")]
    pub policy: String,
    /// Requests per window for each client.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// The window, e.g. 1s, 15m, 1d (or milliseconds).
    #[arg(long, default_value = "1s")]
    pub window: String,
    /// How long the upstream may take to start answering before the client gets a 504,
    /// counted from the end of the request's upload (its start, without a body); also
    /// how long an upload may stop moving (504 for the upstream's stop, 408 for the client's).
    #[arg(long, default_value = "30s")]
    pub upstream_timeout: String,
    /// Serving threads, each with its own listener on the address (SO_REUSEPORT)
    /// and its own upstream connections [default: the number of CPUs].
    #[arg(long, value_name = "N", value_parser = parse_workers)]
    pub workers: Option<NonZeroUsize>,
    /// Pin each worker thread to a CPU of its own, among those this process
    /// may run on (in turn, when there are more workers than CPUs), as
    /// nginx's `worker_cpu_affinity auto`: on a host whose cores other
    /// processes also keep busy, it keeps the scheduler from running two
    /// workers on one core, which shows as a p99 several times the median.
    #[arg(long)]
    pub pin_workers: bool,
    /// How long a client may take to send a request head, from its first
    /// byte (from the connection's opening for the first request) [default:
    /// the --config file's `[connections]`, else 10s].
    #[arg(long, value_name = "DURATION")]
    pub header_read_timeout: Option<String>,
    /// Close a client connection on which no byte moves either way for this
    /// long [default: the --config file's `[connections]`, else 60s].
    #[arg(long, value_name = "DURATION")]
    pub idle_timeout: Option<String>,
    /// Open client connections at most (all workers together); past it, new
    /// ones wait in the listen backlog [default: the --config file's
    /// `[connections]`, else 10000].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
}

impl ProxyArgs {
    /// The proxy configuration these options describe (system clock). A
    /// Redis store is checked now: see
    /// [`StoreHandle::connect`](tollgate_config::StoreHandle::connect).
    ///
    /// # Errors
    /// A [`tollgate_proxy::Error`] naming the option that is wrong, or the
    /// Redis that refused the connection.
    pub async fn config(&self) -> Result<ProxyConfig, Error> {
        self.config_and_store().await.map(|(config, ..)| config)
    }

    /// The flags that replace keys of the `--config` file: the Redis ones,
    /// and `grpc_listen` off. The proxy opens neither of `serve`'s ports (it
    /// listens on its own `--listen`), so a file whose `listen` is on the
    /// default gRPC port, which `serve` would refuse, is the proxy's to use.
    pub(super) fn config_overrides(&self) -> Overrides {
        Overrides {
            grpc_listen: Some("off".to_owned()),
            ..self.redis.overrides()
        }
    }

    /// [`ProxyArgs::config`], with what the `--config` file it was built
    /// from runs with that a reload does not replace (read once, so that
    /// reloads compare against exactly the settings in use), and the memory
    /// to sweep: without `--config`, `serve`'s embedded default (capped at
    /// the default `max_clients`).
    pub(super) async fn config_and_store(
        &self,
    ) -> Result<(ProxyConfig, Option<Running>, Sweep), Error> {
        let key = parse_key(&self.key, self.trust_forwarded_for)?;
        let overrides = self.config_overrides();
        let (limits, store, sweep) = match &self.config {
            None => {
                let plan = single_limit_plan("proxy", &self.policy, self.limit, &self.window)?;
                let mut config = Config::embedded_default();
                overrides
                    .apply(&mut config)
                    .map_err(|e| invalid_redis(&overrides, &e))?;
                if !self.redis.is_empty() {
                    check_redis_range(&plan, self.window.trim())?;
                }
                let (store, _, sweep) =
                    connect_store(&config, redis_option(&overrides, "--redis")).await?;
                let limits = RateLimitConfig::new(plan, store, Arc::new(SystemClock));
                (limits, None, sweep)
            }
            Some(path) => {
                let (limits, store, sweep) = plan_config(path, &overrides).await?;
                (limits, Some(store), sweep)
            }
        };
        let timeout = parse_duration_ms("--upstream-timeout", &self.upstream_timeout)?;
        let from_file = store
            .as_ref()
            .map_or_else(Limits::default, |s| s.restart_only.connections);
        let connections = connection_limits(
            from_file,
            self.header_read_timeout.as_deref(),
            self.idle_timeout.as_deref(),
            self.max_connections,
        )?;
        let config = ProxyConfig::new(&self.upstream, key, limits)?
            .response_timeout(Duration::from_millis(timeout))
            .connection_limits(connections);
        Ok((config, store, sweep))
    }
}

/// Checks the limits of `plan` (made from `--policy`, `--limit` and
/// `window`) against the Redis store's exact range with
/// `tollgate_redis::check_limit`, the check `tollgate check`, `serve` and
/// `proxy --config` run on a config file's limits when the store is Redis:
/// a limit the store could never answer exactly is refused at start-up
/// rather than answered by the failure policy on every request. The flag
/// named is the one to change, as the file's check points at its value:
/// `--window` when the window alone is out of range, else `--limit`.
///
/// # Errors
/// [`Error::InvalidOption`] naming that flag, its value and the bound.
fn check_redis_range(plan: &Plan, window: &str) -> Result<(), Error> {
    for limit in plan.limits() {
        let policy = limit.policy();
        let (name, count, window_ms) = (policy.name(), policy.limit(), policy.window_ms());
        let Err(error) = tollgate_redis::check_limit(name, count, window_ms) else {
            continue;
        };
        let (option, value) =
            if matches!(error, tollgate_redis::RedisStoreError::UnsupportedPolicy(_)) {
                ("--policy", format!("{name:?}"))
            } else {
                match tollgate_redis::at_fault(name, window_ms) {
                    tollgate_redis::AtFault::Limit => {
                        ("--limit", format!("{count} ({name}, --window {window:?})"))
                    }
                    tollgate_redis::AtFault::Window => {
                        ("--window", format!("{window:?} ({name}, --limit {count})"))
                    }
                }
            };
        return Err(Error::InvalidOption {
            option,
            reason: format!("{value}: the redis store cannot serve it exactly: {error}"),
        });
    }
    Ok(())
}

/// The most serving threads `--workers` takes: each is a thread and a
/// listening socket of its own, so a mistyped count would otherwise end in
/// the system's "Too many open files", naming no flag.
pub const MAX_WORKERS: usize = 1024;

/// `--workers N`: a whole number from 1 to [`MAX_WORKERS`].
fn parse_workers(text: &str) -> Result<NonZeroUsize, String> {
    let count: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number of threads"))?;
    NonZeroUsize::new(count)
        .filter(|count| count.get() <= MAX_WORKERS)
        .ok_or_else(|| format!("{count} is out of range: 1 to {MAX_WORKERS} worker threads"))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use clap::Parser;
    use tollgate::Policy;

    /// `tollgate proxy`'s flags alone, as the binary parses them.
    #[derive(Parser)]
    pub(in crate::proxy) struct Cli {
        #[command(flatten)]
        pub(in crate::proxy) proxy: ProxyArgs,
    }

    fn config(args: &[&str]) -> Result<ProxyConfig, String> {
        let cli = Cli::try_parse_from(std::iter::once("proxy").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime
            .block_on(cli.proxy.config())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_give_a_working_config() {
        let config = config(&["--upstream", "http://127.0.0.1:3000"]).unwrap();
        assert_eq!(config.upstream().url(), "http://127.0.0.1:3000");
        let plans = config.limits().current_plans();
        let limit = &plans.default_plan().limits()[0];
        assert_eq!(
            (
                limit.policy().name(),
                limit.policy().limit(),
                limit.policy().window_ms()
            ),
            ("sliding-window", 100, 1_000)
        );
    }

    /// A worker count the machine cannot hold is refused by name, not left
    /// to fail as "Too many open files" (an audit).
    #[test]
    fn workers_are_counted_from_one_to_the_most() {
        let parse = |n: &str| {
            Cli::try_parse_from([
                "proxy",
                "--upstream",
                "http://127.0.0.1:3000",
                "--workers",
                n,
            ])
            .map(|cli| cli.proxy.workers.map(NonZeroUsize::get))
            .map_err(|e| e.to_string())
        };
        assert_eq!(parse("1"), Ok(Some(1)));
        assert_eq!(parse("1024"), Ok(Some(MAX_WORKERS)));
        for bad in ["0", "1025", "100000000", "two", "1.5"] {
            let error = parse(bad).unwrap_err();
            assert!(error.contains("--workers"), "{bad}: {error}");
        }
        assert!(parse("100000000").unwrap_err().contains("1 to 1024"));
    }

    /// With `--config`, a Redis flag at fault is named as without it: an
    /// unreadable `--redis-ca` was "invalid --config", and a flag given
    /// without a Redis store was printed under it.
    #[test]
    fn with_a_config_a_redis_flag_at_fault_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        let limit =
            "[[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 2\nwindow = \"1s\"\n";
        let tls = format!("{limit}[store]\nurl = \"rediss://127.0.0.1:1\"\n");
        let cases = [
            (
                tls.as_str(),
                ["--redis-ca", "/nonexistent.pem"],
                "invalid --redis-ca /",
            ),
            (
                limit,
                ["--redis-replicas-to-ack", "1"],
                "--redis-replicas-to-ack 1 needs a Redis store",
            ),
        ];
        for (text, flag, expected) in cases {
            std::fs::write(&path, text).unwrap();
            let path = path.to_str().unwrap();
            let mut args = vec!["--upstream", "http://h", "--config", path];
            args.extend(flag);
            let err = config(&args).err().unwrap_or_default();
            assert!(err.starts_with(expected), "{flag:?}: {err}");
        }
    }

    #[test]
    fn a_serve_config_gives_each_client_its_plan() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "default_plan = \"free\"\n[clients]\nacme = \"paid\"\n\
             [[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 2\nwindow = \"1s\"\n\
             [[plans.paid]]\nname = \"1s\"\npolicy = \"token-bucket\"\nlimit = 50\nwindow = \"1s\"\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let config = config(&[
            "--upstream",
            "http://127.0.0.1:3000",
            "--key",
            "header:X-Client-Id",
            "--config",
            path,
        ])
        .unwrap();
        let limits = config.limits();
        let plans = limits.current_plans();
        assert_eq!(plans.default_plan().name(), "free");
        assert_eq!(plans.plan_for("acme").name(), "paid");
        assert_eq!(plans.plan_for("acme").limits()[0].policy().limit(), 50);
        assert_eq!(plans.plan_for("someone").name(), "free");
        // --config replaces the one-limit options; a broken file is named.
        let both = config_err(&["--upstream", "http://h", "--config", path, "--limit", "5"]);
        assert!(both.contains("--limit"), "{both}");
        std::fs::write(path, "[[plans.free]\n").unwrap();
        let broken = config_err(&["--upstream", "http://h", "--config", path]);
        assert!(
            broken.contains("invalid --config") || broken.contains("--config"),
            "{broken}"
        );
        assert!(broken.contains("line 1"), "{broken}");
    }

    fn config_err(args: &[&str]) -> String {
        config(args).err().unwrap_or_default()
    }

    #[test]
    fn each_bad_option_is_named() {
        // Each message starts with what names the option: once (a Redis
        // flag's own check was once prefixed with "invalid --redis: ").
        let cases: [(&[&str], &str); 13] = [
            (
                &["--upstream", "http://h", "--redis-ca", "/tmp/ca.pem"],
                "--redis-ca /tmp/ca.pem needs a Redis store",
            ),
            (
                &["--upstream", "http://h", "--redis-replicas-to-ack", "1"],
                "--redis-replicas-to-ack 1 needs a Redis store",
            ),
            (
                &[
                    "--upstream",
                    "http://h",
                    "--redis",
                    "redis://127.0.0.1:1",
                    "--redis-replicas-to-ack",
                    "17",
                ],
                "invalid --redis-replicas-to-ack 17: must be from 0 to 16",
            ),
            (
                &[
                    "--upstream",
                    "http://h",
                    "--redis-cluster",
                    "redis://127.0.0.1:1,x",
                ],
                "invalid --redis-cluster: seed number 2 is not a redis:// or rediss:// URL",
            ),
            (
                &[
                    "--upstream",
                    "http://h",
                    "--redis",
                    "rediss://127.0.0.1:1",
                    "--redis-ca",
                    "/nonexistent.pem",
                ],
                "invalid --redis-ca /",
            ),
            (
                &["--upstream", "http://h", "--redis", "nope"],
                "invalid --redis URL \"nope\": expected redis://",
            ),
            (&["--upstream", "ftp://x"], "invalid upstream"),
            (
                &["--upstream", "http://u:pw@h:1"],
                "invalid upstream \"http://***@h:1\": user info (user:password@) is not supported",
            ),
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
            assert!(err.starts_with(expected), "{args:?}: {err}");
        }
    }

    #[test]
    fn a_limit_the_redis_store_cannot_serve_is_refused_before_connecting() {
        // Nobody listens there: a refusal can only come from the check.
        let redis = format!("redis://127.0.0.1:{}", tollgate_redis::testing::free_port());
        let cases = [
            // The window alone is beyond the store's exact range.
            (
                ["sliding-window", "3", "100000000000d"],
                "invalid --window: \"100000000000d\" (sliding-window, --limit 3): \
                 the redis store cannot serve it exactly: out of the Redis store's exact range: ",
            ),
            // The window is fine; GCRA scales times by this limit.
            (
                ["gcra", "100000", "1s"],
                "invalid --limit: 100000 (gcra, --window \"1s\"): \
                 the redis store cannot serve it exactly: out of the Redis store's exact range: ",
            ),
        ];
        for ([policy, limit, window], expected) in cases {
            let flags = [
                "--upstream",
                "http://h",
                "--policy",
                policy,
                "--limit",
                limit,
                "--window",
                window,
            ];
            let err = config_err(&[&flags[..], &["--redis", &redis]].concat());
            assert!(err.starts_with(expected), "{flags:?}: {err}");
            assert!(err.contains("exceeds 2^53 - 1"), "{flags:?}: {err}");
            // In memory, the same limit is exact: nothing to refuse.
            assert!(config(&flags).is_ok(), "{flags:?}");
        }
    }
}
