//! Reloading the config: the new config in force, each unchanged limit
//! keeping its clients' state, and a report of what changed.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use tollgate_config::Config;

use super::{lock, Server};
use crate::Error;

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadReport {
    /// Limits of the new config that existed unchanged before: their clients keep their state.
    pub kept: usize,
    /// Limits that are new or changed (policy, limit or window): their clients start afresh.
    pub fresh: usize,
    /// Limits of the old config that are gone.
    pub removed: usize,
    /// Settings that changed but only take effect on restart.
    pub needs_restart: Vec<&'static str>,
}

impl fmt::Display for ReloadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} limit(s) kept their state, {} new or changed, {} removed",
            self.kept, self.fresh, self.removed
        )?;
        if !self.needs_restart.is_empty() {
            write!(
                f,
                "; changed settings that need a restart: {}",
                self.needs_restart.join(", ")
            )?;
        }
        Ok(())
    }
}

impl Server {
    /// Re-reads the config file and, if it is valid, puts it in force.
    /// Limits that did not change (same plan, limit name, policy, limit and
    /// window) keep every client's state. A broken file is refused with a
    /// log line and the running config stays.
    ///
    /// # Errors
    /// [`Error::NoConfigFile`] when the server runs without a file; the
    /// file's read or config error otherwise.
    pub fn reload(&self) -> Result<ReloadReport, Error> {
        let file = self.inner.config_file.get().ok_or(Error::NoConfigFile)?;
        let path = &file.path;
        let _one_at_a_time = lock(&self.inner.reload_lock);
        let running = self.config();
        match Config::load_for_reload(path, &file.overrides, &running.store) {
            Ok(config) => {
                let report = self.apply(config);
                if report.needs_restart.is_empty() {
                    tracing::info!(path = %path.display(), %report, "config reloaded");
                } else {
                    tracing::warn!(path = %path.display(), %report, "config reloaded, but some changes wait for a restart");
                }
                Ok(report)
            }
            Err(error) => {
                self.inner.metrics.record_reload(false);
                tracing::error!(path = %path.display(), %error, "config reload refused; the running config stays");
                Err(error.into())
            }
        }
    }

    /// Puts `config` in force (see [`Server::reload`]), but for the
    /// settings read only at start-up, which keep their running values.
    pub fn apply(&self, config: Config) -> ReloadReport {
        let old = self.config();
        let old_ids: HashSet<u64> = old
            .plans()
            .iter()
            .flat_map(|p| p.limits().iter().map(|l| l.id()))
            .collect();
        let new_ids: HashSet<u64> = config
            .plans()
            .iter()
            .flat_map(|p| p.limits().iter().map(|l| l.id()))
            .collect();
        let kept = new_ids.intersection(&old_ids).count();
        let mut config = config;
        let needs_restart = keep_restart_settings(&mut config, &old);
        let report = ReloadReport {
            kept,
            fresh: new_ids.len() - kept,
            removed: old_ids.len() - kept,
            needs_restart,
        };
        self.inner
            .envoy
            .rules_handle()
            .replace(config.envoy.rules.clone());
        let active = Self::activate(&self.inner.metrics, config);
        self.inner.active.store(Arc::new(active));
        if let Some(cache) = &self.inner.rejection_cache {
            // After the swap: an entry remembered meanwhile under an old
            // plan answers nothing anyway (the cache checks the limits).
            let dropped = cache.forget_changed(self.config().plans());
            tracing::debug!(dropped, "rejection cache: changed plans forgotten");
        }
        self.inner.metrics.record_reload(true);
        report
    }
}

/// Settings read only at start-up: where `config` changes one, it is named
/// and `running`'s value put back, so that the config in force
/// (`GET /v1/config`, the next reload's comparison) is what the server
/// runs; a file changed back to the running value then needs no restart.
fn keep_restart_settings(config: &mut Config, running: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    macro_rules! keep {
        ($($field:ident).+ => $name:literal) => {
            if config.$($field).+ != running.$($field).+ {
                changed.push($name);
                config.$($field).+ = running.$($field).+.clone();
            }
        };
    }
    keep!(listen => "listen");
    keep!(envoy.grpc_listen => "envoy.grpc_listen");
    keep!(envoy.on_store_error => "envoy.on_store_error");
    keep!(store => "store");
    keep!(sweep_interval_ms => "sweep_interval");
    keep!(dashboard_enabled => "dashboard.enabled");
    keep!(connections => "connections");
    changed
}
