//! `GET /v1/clients/{client}`'s answer: the store's inspection of one
//! client ([`tollgate::Store::inspect`]: nothing used, nothing written, on
//! memory and Redis alike) in JSON.

use serde::Serialize;
use tollgate::{Inspection, LimitState, LogRun};

use super::config_view::LimitView;

/// Units allowed at one time in the sliding window's log.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LogEntry {
    /// When the units were allowed (clock ms).
    pub at_ms: u64,
    /// Units allowed at that time.
    pub units: u32,
    /// How long until they leave the window.
    pub leaves_in_ms: u64,
}

/// One limit's state: the limit as `/v1/config` shows it, then its numbers.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LimitStateView {
    /// The limit (name, policy, limit, window, shadow).
    #[serde(flatten)]
    pub limit: LimitView,
    /// Requests of cost 1 the client could make now.
    pub remaining: u32,
    /// How long until the full quota is back, in ms.
    pub reset_ms: u64,
    /// How long until a request of cost 1 would pass this limit, in ms.
    pub retry_after_ms: u64,
    /// The sliding window's log still in the window, oldest first (`null`
    /// for other policies).
    pub entries: Option<Vec<LogEntry>>,
}

/// `GET /v1/clients/{client}`'s answer.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ClientState {
    /// The client id.
    pub client: String,
    /// The plan looked at.
    pub plan: String,
    /// The time the state was read at (ms): the clock's, or the client's
    /// latest seen time when later.
    pub now_ms: u64,
    /// Whether a request of cost 1 would pass every limit now.
    pub allowed: bool,
    /// How long until a request of cost 1 would pass, in ms.
    pub retry_after_ms: u64,
    /// Each limit, in the plan's order.
    pub limits: Vec<LimitStateView>,
}

fn entry(run: &LogRun) -> LogEntry {
    LogEntry {
        at_ms: run.at_ms,
        units: run.units,
        leaves_in_ms: run.leaves_in_ms,
    }
}

fn limit_view(limit: &LimitState) -> LimitStateView {
    LimitStateView {
        limit: LimitView {
            name: limit.name.to_string(),
            policy: limit.policy,
            limit: limit.limit,
            window_ms: limit.window_ms,
            shadow: limit.shadow,
        },
        remaining: limit.remaining,
        reset_ms: limit.reset_after_ms,
        retry_after_ms: limit.retry_after_ms,
        entries: limit
            .log
            .as_ref()
            .map(|log| log.iter().map(entry).collect()),
    }
}

impl ClientState {
    /// The answer for `client` on the plan `plan`, from its inspection.
    pub fn of(client: &str, plan: &str, inspection: &Inspection) -> Self {
        Self {
            client: client.to_owned(),
            plan: plan.to_owned(),
            now_ms: inspection.now_ms,
            allowed: inspection.allowed,
            retry_after_ms: inspection.retry_after_ms,
            limits: inspection.limits.iter().map(limit_view).collect(),
        }
    }
}
