//! # tollgate-config
//!
//! The one config-and-wiring module of tollgate, shared by `tollgate serve`
//! (`tollgate-server`) and `tollgate proxy --config` alike, so that neither
//! front end owns it:
//!
//! - [`Config`]: the TOML config file (plans and their limits, which client
//!   is on which plan, the store, `[auth]`, `[envoy]`, where to listen),
//!   checked completely before use, every mistake reported with its line and
//!   column; one builder per section (`config/`). Command-line flags that
//!   replace a key of the file are [`Overrides`], applied the same way at
//!   start-up and on every reload.
//! - [`StoreHandle`]: the store the config names (memory, or Redis behind
//!   its timeout and failure policy, with the exact rejection cache in
//!   front: [`store::cached`]).
//! - [`reload`]: re-reading the file on SIGHUP and when it changes, and
//!   [`signals`]: SIGHUP and the shutdown signals.
//!
//! Nothing here serves requests: this crate knows no HTTP server.
//!
//! ```
//! use tollgate_config::{Config, StoreHandle};
//!
//! let config = Config::parse(
//!     r#"
//! [[plans.free]]
//! name = "1s"
//! policy = "sliding-window"
//! limit = 2
//! window = "1s"
//! "#,
//! )?;
//! assert_eq!(config.default_plan().name(), "free");
//! assert!(config.summary().contains("\"1s\" sliding-window 2 per 1s"));
//! // The store it names: memory here, nothing to start first.
//! let store = StoreHandle::for_config(&config)?;
//! assert!(store.shared().is_err(), "not a shared store");
//! // A mistake is refused with where it is.
//! let text = "[[plans.free]]\nname = \"1s\"\npolicy = \"leaky\"\nlimit = 2\nwindow = \"1s\"\n";
//! let refused = Config::parse(text);
//! assert!(refused.unwrap_err().to_string().starts_with("line 3, column 10"));
//! # Ok::<(), tollgate_config::Error>(())
//! ```

pub mod config;
mod error;
pub mod reload;
pub mod signals;
pub mod store;

pub use config::{
    check_redis_url, format_duration, parse_duration, read_config_text, ClientIdSource, Config,
    EnvoyConfig, FailurePolicy, Overrides, StoreConfig, StoreKind, DEFAULT_CLIENT_HEADER,
    DEFAULT_GRPC_LISTEN, DEFAULT_LISTEN, DEFAULT_MAX_CLIENTS, DEFAULT_MAX_COST, DEFAULT_PREFIX,
    DEFAULT_SWEEP_INTERVAL_MS, DEFAULT_TIMEOUT_MS, EMBEDDED_DEFAULT, MAX_CLIENT_BYTES,
    MAX_CONFIG_BYTES,
};
pub use error::Error;
pub use store::{ClientMemory, StoreHandle, FAIL_CLOSED_RETRY_AFTER_MS};
