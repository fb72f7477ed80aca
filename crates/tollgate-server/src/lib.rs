//! # tollgate-server
//!
//! The tollgate rate-limit service: an API gateway or API server asks it,
//! for every request, whether to let it in.
//!
//! - [`Server`] is the domain: the config in force, the store, the clock and
//!   the metrics. [`Server::decide`] answers in domain terms (a decision, or
//!   an unknown plan, a cost over the maximum, a store error); it knows no
//!   HTTP.
//! - [`http`] translates HTTP to and from it (JSON, the IETF RateLimit
//!   headers, statuses), writing headers and reading `/v1/auth`'s client key
//!   with `tollgate_http`, as every HTTP front end does; the gRPC rate limit service for Envoy
//!   (`tollgate_envoy`) runs beside it on the same store and plans.
//! - [`metrics`] counts decisions for Prometheus.
//! - The config file, the store it names and reloading come from
//!   `tollgate_config` (re-exported as [`config`]), which `tollgate proxy`
//!   shares; [`tasks`] runs the reload watcher and the idle-client sweeper.
//!
//! Modules depend one way: [`routes`] → `http`, `inspect`, `dashboard` →
//! `server` → `metrics`, no cycle.
//! The binary (`tollgate serve`) only parses flags: [`Options`] →
//! [`prepare`] → [`Prepared::run`]. Tests build a [`Server`] with a
//! [`tollgate::ManualClock`], bind port 0 and call [`run`].
//!
//! A decision in domain terms, without HTTP:
//!
//! ```
//! use std::sync::Arc;
//!
//! use tollgate::ManualClock;
//! use tollgate_server::{Config, Server, StoreHandle};
//!
//! let text = "[[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 1\nwindow = \"1s\"\n";
//! let config = Config::parse(text)?;
//! let store = StoreHandle::for_config(&config)?;
//! let server = Server::new(config, store, Arc::new(ManualClock::new(0)));
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! runtime.block_on(async {
//!     let first = server.decide("alice", None, 1).await?;
//!     assert!(first.decision.allowed);
//!     let second = server.decide("alice", None, 1).await?;
//!     assert_eq!((second.decision.allowed, second.decision.retry_after_ms), (false, Some(1_000)));
//!     Ok::<(), tollgate_server::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod dashboard;
mod error;
pub mod http;
pub mod inspect;
pub mod metrics;
pub mod routes;
mod server;
mod settle;
pub mod stats;
mod stop;
pub mod stopwatch;
pub mod tasks;
pub mod top;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use error::Error;
pub use server::{
    sweep_idle, Decided, Observed, PartCircuit, ReloadReport, Server, StoreHealth, StoreRefunds,
};
use settle::Settling;
use stop::StopSignal;
/// The config crate, re-exported: [`Server::new`] takes its [`Config`] and
/// [`StoreHandle`].
pub use tollgate_config as config;
pub use tollgate_config::signals::shutdown_signal;
pub use tollgate_config::{Config, Overrides, StoreHandle, FAIL_CLOSED_RETRY_AFTER_MS};

/// Serves `server` on `listener` until `shutdown` completes, then finishes
/// the requests in flight, lets the store settle ([`Server::settle_store`])
/// and returns. Connections are held to the config's `[connections]`
/// limits (see `tollgate_connections`).
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
    let settling = Settling::new(server.clone());
    serve_all(listeners, server, shutdown, &settling).await
}

/// [`run_all`], settling the store with `settling` (whose deadline a later
/// settle shares).
async fn serve_all(
    listeners: Vec<TcpListener>,
    server: Server,
    shutdown: impl Future<Output = ()> + Send,
    settling: &Settling,
) -> Result<(), Error> {
    // Read once: the connection limits need a restart to change.
    let limits = server.config().connections;
    let service = routes::HotRoutes::new(server);
    let (stop, stopped) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    for listener in listeners {
        let mut stopped = stopped.clone();
        let slots = tollgate_connections::Slots::new(limits.max_connections);
        // No route reads the peer's address: it is not put in the requests.
        let service = service.clone();
        let service_for = move |_peer| service.clone();
        let serving =
            tollgate_connections::serve(listener, service_for, limits, slots, async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            });
        tasks.spawn(async move {
            serving.await;
            Ok::<(), std::io::Error>(())
        });
    }
    let mut shutdown = std::pin::pin!(shutdown);
    let mut stopping = false;
    let served = loop {
        tokio::select! {
            () = &mut shutdown, if !stopping => {
                stopping = true;
                tracing::info!("shutting down: finishing requests in flight");
                let _ = stop.send(true);
            }
            joined = tasks.join_next() => match joined {
                None => break Ok(()),
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(e))) => break Err(Error::Serve(e)),
                Some(Err(e)) => break Err(Error::Serve(std::io::Error::other(e))),
            },
        }
    };
    settling.settle().await;
    served
}

/// `tollgate serve`'s flags.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--config FILE`: without it, the embedded default.
    pub config: Option<PathBuf>,
    /// The flags that replace keys of the config file, at start-up and on
    /// every reload: `--listen`, `--grpc-listen` and the Redis flags.
    pub flags: Overrides,
}

/// A server ready to run: config loaded, store built, addresses bound.
pub struct Prepared {
    server: Server,
    listeners: Vec<TcpListener>,
    addrs: Vec<SocketAddr>,
    /// `None` when the gRPC service is off.
    grpc_listener: Option<TcpListener>,
    hangups: Option<tokio::signal::unix::Signal>,
}

/// Loads the config (or the embedded default), applies the flags, builds the
/// store and binds every listen address.
///
/// # Errors
/// The config's error (bad flags and a bad CA included), [`tollgate_config::Error::Redis`]
/// for a Redis store that cannot be set up or refuses the connection (a
/// wrong password, an untrusted certificate; Redis being down is logged,
/// not an error: the failure policy answers until it is up, see
/// [`StoreHandle::connect`]), or [`Error::Bind`].
pub async fn prepare(options: Options) -> Result<Prepared, Error> {
    let overrides = options.flags;
    let config = match &options.config {
        Some(path) => Config::load_with(path, &overrides)?,
        None => Config::embedded_default_with(&overrides)?,
    };
    let store = StoreHandle::connect(&config).await?;
    let mut listeners = Vec::with_capacity(config.listen.len());
    let mut addrs = Vec::with_capacity(config.listen.len());
    for addr in &config.listen {
        let listener = bind(*addr).await?;
        addrs.push(listener.local_addr().unwrap_or(*addr));
        listeners.push(listener);
    }
    let grpc_listener = match config.envoy.grpc_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let mut server = Server::new(config, store, Arc::new(tollgate::SystemClock));
    if let Some(path) = options.config {
        server = server.with_config_file(path, overrides);
    }
    Ok(Prepared {
        server,
        listeners,
        addrs,
        grpc_listener,
        hangups: tollgate_config::signals::catch_hangups(),
    })
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

impl Prepared {
    /// The addresses actually bound.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The address the gRPC rate limit service (Envoy RLS) actually bound;
    /// `None` when it is off.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        let listener = self.grpc_listener.as_ref()?;
        listener
            .local_addr()
            .ok()
            .or(self.server.config().envoy.grpc_listen)
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
        let grpc = match self.grpc_addr() {
            Some(addr) => format!("gRPC (Envoy rate limit service) listening on {addr}"),
            None => "gRPC (Envoy rate limit service) off".to_owned(),
        };
        format!(
            "tollgate listening on {} with {source}\n{grpc}\n{}",
            addrs.join(", "),
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
        self.log_serving();
        let stop = StopSignal::new();
        let sweep_every = Duration::from_millis(self.server.config().sweep_interval_ms);
        let watcher = tokio::spawn(tasks::watch(
            self.server.clone(),
            tollgate_config::reload::POLL_INTERVAL,
            self.hangups,
            stop.stopped(),
        ));
        let sweeper = tokio::spawn(tasks::sweep_periodically(
            self.server.clone(),
            sweep_every,
            stop.stopped(),
        ));
        let grpc = self
            .grpc_listener
            .map(|listener| spawn_grpc(listener, self.server.envoy_service(), stop.clone()));
        // One deadline for both settles below: at most SETTLE_WITHIN in all.
        let settling = Settling::new(self.server.clone());
        let shutdown = stop.on_shutdown(shutdown);
        let result = serve_all(self.listeners, self.server, shutdown, &settling).await;
        // Also when serving failed before any shutdown was asked for.
        stop.stop();
        let _ = watcher.await;
        let _ = sweeper.await;
        let result = result.and(grpc_outcome(grpc).await);
        // Again after the gRPC server's last requests (at once when idle),
        // in what is left of the first settle's SETTLE_WITHIN.
        settling.settle().await;
        result
    }

    /// The log line saying what is served.
    fn log_serving(&self) {
        let addrs: Vec<String> = self.addrs.iter().map(ToString::to_string).collect();
        tracing::info!(
            listen = %addrs.join(","),
            config = %self.server.config_path().map_or_else(|| "embedded default".to_owned(), |p| p.display().to_string()),
            default_plan = self.server.config().default_plan().name(),
            "serving"
        );
    }
}

/// How the gRPC task ended (`Ok` when there was none).
async fn grpc_outcome(
    grpc: Option<tokio::task::JoinHandle<Result<(), tollgate_envoy::Error>>>,
) -> Result<(), Error> {
    let Some(grpc) = grpc else {
        return Ok(());
    };
    match grpc.await {
        Ok(served) => served.map_err(Error::Grpc),
        Err(join) => Err(Error::Grpc(tollgate_envoy::Error::Config(format!(
            "the gRPC task ended abnormally: {join}"
        )))),
    }
}

/// Serves Envoy's rate limit service on `listener` until `stop` is given;
/// a failure gives it, stopping everything.
fn spawn_grpc(
    listener: TcpListener,
    service: tollgate_envoy::ServiceConfig,
    stop: StopSignal,
) -> tokio::task::JoinHandle<Result<(), tollgate_envoy::Error>> {
    tokio::spawn(async move {
        let served = tollgate_envoy::run(listener, service, stop.stopped()).await;
        if let Err(error) = &served {
            tracing::error!(%error, "the gRPC server failed; stopping");
            stop.stop();
        }
        served
    })
}
