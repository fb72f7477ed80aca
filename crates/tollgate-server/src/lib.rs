//! # tollgate-server
//!
//! The tollgate rate-limit service: an API gateway or API server asks it,
//! for every request, whether to let it in. Plans of several limits come
//! from a TOML config ([`Config`]), reloaded on SIGHUP and on change
//! ([`reload`]); decisions are served over HTTP ([`http`]) with the IETF
//! RateLimit headers, and counted in Prometheus metrics ([`metrics`]).
//!
//! The binary (`tollgate serve`) only parses flags: [`Options`] →
//! [`prepare`] → [`Prepared::run`]. Tests build a [`Server`] with a
//! [`tollgate::ManualClock`], bind port 0 and call [`run`].

pub mod clock;
pub mod config;
pub mod dashboard;
mod error;
pub mod http;
pub mod inspect;
pub mod metrics;
pub mod reload;
mod server;
pub mod stats;
mod store;
pub mod top;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::Config;
pub use error::Error;
pub use server::{Decided, Observed, ReloadReport, Server, StoreHealth};
pub use store::{StoreHandle, FAIL_CLOSED_RETRY_AFTER_MS};

/// Serves `server` on `listener` until `shutdown` completes, then finishes
/// the requests in flight and returns.
///
/// # Errors
/// [`Error::Serve`] if accepting connections fails for good.
pub async fn run(
    listener: TcpListener,
    server: Server,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    run_all(vec![listener], server, shutdown).await
}

/// [`run`] on several listeners at once, with one shutdown for all.
///
/// # Errors
/// [`Error::Serve`] if accepting connections fails for good on any listener.
pub async fn run_all(
    listeners: Vec<TcpListener>,
    server: Server,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let router = http::router(server);
    let (stop, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for listener in listeners {
        let mut stopped = stopped.clone();
        // Decisions are small answers on keep-alive connections: send them
        // at once rather than waiting for more to coalesce.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let serving = axum::serve(listener, router.clone()).with_graceful_shutdown(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        });
        tasks.spawn(async move { serving.await });
    }
    let mut shutdown = std::pin::pin!(shutdown);
    let mut stopping = false;
    loop {
        tokio::select! {
            () = &mut shutdown, if !stopping => {
                stopping = true;
                tracing::info!("shutting down: finishing requests in flight");
                let _ = stop.send(true);
            }
            joined = tasks.join_next() => match joined {
                None => return Ok(()),
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => return Err(Error::Serve(e)),
                Some(Err(e)) => return Err(Error::Serve(std::io::Error::other(e))),
            },
        }
    }
}

/// Completes on SIGTERM or ctrl-c (SIGINT).
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; stop with ctrl-c");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

/// `tollgate serve`'s flags.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--config FILE`: without it, the embedded default.
    pub config: Option<PathBuf>,
    /// `--listen ADDR` (repeatable): replaces the config's `listen`.
    pub listen: Vec<String>,
    /// `--redis URL`: replaces the config's store.
    pub redis: Option<String>,
    /// `--grpc-listen ADDR`: replaces the config's `[envoy] grpc_listen`.
    pub grpc_listen: Option<String>,
}

/// A server ready to run: config loaded, store built, addresses bound.
pub struct Prepared {
    server: Server,
    listeners: Vec<TcpListener>,
    addrs: Vec<SocketAddr>,
    grpc_listener: TcpListener,
    grpc_addr: SocketAddr,
    hangups: Option<tokio::signal::unix::Signal>,
}

/// Loads the config (or the embedded default), applies the flags, builds the
/// store and binds every listen address.
///
/// # Errors
/// The config's error, [`Error::InvalidListen`] or [`Error::InvalidRedisUrl`]
/// for bad flags, [`Error::Redis`] for a Redis store that cannot be set
/// up (Redis being down is not an error: the failure policy answers until
/// it is up), or [`Error::Bind`].
pub async fn prepare(options: Options) -> Result<Prepared, Error> {
    let mut config = match &options.config {
        Some(path) => Config::load(path)?,
        None => Config::embedded_default(),
    };
    if !options.listen.is_empty() {
        config.listen = options
            .listen
            .iter()
            .map(|addr| {
                addr.parse()
                    .map_err(|_| Error::InvalidListen { addr: addr.clone() })
            })
            .collect::<Result<_, _>>()?;
    }
    if let Some(addr) = &options.grpc_listen {
        config.envoy.grpc_listen = addr
            .parse()
            .map_err(|_| Error::InvalidListen { addr: addr.clone() })?;
    }
    if let Some(url) = &options.redis {
        config.store.kind = config::StoreKind::Redis {
            url: config::check_redis_url(url)?,
        };
    }
    let store = StoreHandle::for_config(&config)?;
    let mut listeners = Vec::with_capacity(config.listen.len());
    let mut addrs = Vec::with_capacity(config.listen.len());
    for addr in &config.listen {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| Error::Bind {
                addr: *addr,
                source,
            })?;
        addrs.push(listener.local_addr().unwrap_or(*addr));
        listeners.push(listener);
    }
    let grpc_addr = config.envoy.grpc_listen;
    let grpc_listener = TcpListener::bind(grpc_addr)
        .await
        .map_err(|source| Error::Bind {
            addr: grpc_addr,
            source,
        })?;
    let grpc_addr = grpc_listener.local_addr().unwrap_or(grpc_addr);
    let mut server = Server::new(config, store, Arc::new(tollgate::SystemClock));
    if let Some(path) = options.config {
        server = server.with_config_path(path);
    }
    Ok(Prepared {
        server,
        listeners,
        addrs,
        grpc_listener,
        grpc_addr,
        hangups: reload::catch_hangups(),
    })
}

impl Prepared {
    /// The addresses actually bound.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The address the gRPC rate limit service (Envoy RLS) actually bound.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// What to tell the operator at startup: where it listens, what is in force.
    pub fn banner(&self) -> String {
        let config = self.server.config();
        let addrs: Vec<String> = self.addrs.iter().map(|a| format!("http://{a}")).collect();
        let source = match self.server.config_path() {
            Some(path) => format!("config {}", path.display()),
            None => "the embedded default config".to_owned(),
        };
        format!(
            "tollgate listening on {} with {source}\ngRPC (Envoy rate limit service) listening on {}\n{}",
            addrs.join(", "),
            self.grpc_addr,
            config.summary()
        )
    }

    /// Serves HTTP and gRPC (Envoy's rate limit service, on the same store,
    /// clock and plans) until `shutdown`, reloading the config on SIGHUP and
    /// file changes and sweeping idle clients meanwhile. If either server
    /// fails, both stop.
    ///
    /// # Errors
    /// As [`run_all`], or [`Error::Grpc`] when the gRPC server fails.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<(), Error> {
        let (stop, stopped) = watch::channel(false);
        let stop = Arc::new(stop);
        let until_stop = move || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            }
        };
        let sweep_every = Duration::from_millis(self.server.config().sweep_interval_ms);
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        tracing::info!(
            listen = %addrs.join(","),
            config = %self.server.config_path().map_or_else(|| "embedded default".to_owned(), |p| p.display().to_string()),
            default_plan = self.server.config().default_plan().name(),
            "serving"
        );
        let watcher = tokio::spawn(reload::watch(
            self.server.clone(),
            reload::POLL_INTERVAL,
            self.hangups,
            until_stop(),
        ));
        let sweeper = tokio::spawn(reload::sweep_periodically(
            self.server.clone(),
            sweep_every,
            until_stop(),
        ));
        let stop_on_grpc_failure = stop.clone();
        let grpc = tokio::spawn({
            let service = self.server.envoy_service();
            let until = until_stop();
            async move {
                let served = tollgate_envoy::run(self.grpc_listener, service, until).await;
                if let Err(error) = &served {
                    tracing::error!(%error, "the gRPC server failed; stopping");
                    let _ = stop_on_grpc_failure.send(true);
                }
                served
            }
        });
        let stop_on_shutdown = stop.clone();
        let stopped = until_stop();
        let result = run_all(self.listeners, self.server, async move {
            tokio::select! {
                () = shutdown => {}
                () = stopped => {}
            }
            let _ = stop_on_shutdown.send(true);
        })
        .await;
        // Also when serving failed before any shutdown was asked for.
        let _ = stop.send(true);
        let _ = watcher.await;
        let _ = sweeper.await;
        let grpc = match grpc.await {
            Ok(served) => served.map_err(Error::Grpc),
            Err(join) => Err(Error::Grpc(tollgate_envoy::Error::Config(format!(
                "the gRPC task ended abnormally: {join}"
            )))),
        };
        result.and(grpc)
    }
}
