//! The inspection endpoints (JSON), read by the dashboard and by anyone:
//!
//! - `GET /v1/clients/{client}[?plan=NAME]`: the client's plan and the state
//!   of each of its limits ([`client`]); uses nothing.
//! - `GET /v1/top?by=rejected|requests&limit=N`: the heaviest clients of
//!   the last minute on this instance ([`crate::top`]).
//! - `GET /v1/stats`: the last five minutes, per second ([`crate::stats`]),
//!   and the store's health.
//! - `GET /v1/config`: the config in force ([`config_view`]).
//!
//! `/v1/top` and `/v1/stats` answer 404 when `[dashboard] enabled = false`
//! (their counters are off then).

pub mod client;
pub mod config_view;

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};

use crate::http::{check_client, json, path_client, plan_query, refuse, PlanQuery, Rejection};
use crate::server::{plan_index, Observed, Server, StoreHealth};
use crate::stats::Snapshot;
use crate::top::RankBy;

/// The most clients `/v1/top` lists.
pub const MAX_TOP: usize = 1_000;

/// The inspection routes.
pub fn routes() -> Router<Server> {
    Router::new()
        .route("/v1/clients/{client}", get(client_state))
        .route("/v1/top", get(top))
        .route("/v1/stats", get(stats))
        .route("/v1/config", get(config))
}

fn ok(body: &impl Serialize) -> Response {
    json(StatusCode::OK, body, HeaderMap::new())
}

fn observed<'a>(server: &'a Server, path: &str) -> Result<&'a Observed, Rejection> {
    server.observed().ok_or_else(|| {
        Rejection::new(
            StatusCode::NOT_FOUND,
            format!("{path} is off: its counters run only with [dashboard] enabled = true"),
        )
    })
}

async fn client_state(
    State(server): State<Server>,
    client: Result<Path<String>, PathRejection>,
    query: Result<Query<PlanQuery>, QueryRejection>,
) -> Response {
    let client = match path_client(client) {
        Ok(client) => client,
        Err(rejection) => return refuse(&server, rejection),
    };
    let plan = match plan_query(query).and_then(|plan| check_client(&client).map(|()| plan)) {
        Ok(plan) => plan,
        Err(rejection) => return refuse(&server, rejection),
    };
    let config = server.config();
    let index = match plan_index(&config, &client, plan.as_deref()) {
        Ok(index) => index,
        Err(error) => return refuse(&server, error.into()),
    };
    let plan = &config.plans()[index];
    if server.has_memory_store() {
        let now = server.now_ms();
        // The store answers a call earlier than the client's latest at that latest time.
        let (now, states) = match server.memory_state(&client) {
            Some((seen, states)) => (now.max(seen), states),
            None => (now, Vec::new()),
        };
        return ok(&client::from_memory(&client, plan, &states, now));
    }
    match server.look(plan, &client).await {
        Ok(look) => ok(&client::from_look(&client, plan, &look, server.now_ms())),
        Err(error) => Rejection::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the store cannot answer: {error}"),
        )
        .into_response(),
    }
}

/// `/v1/top`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopQuery {
    #[serde(default)]
    by: RankBy,
    limit: Option<usize>,
}

async fn top(
    State(server): State<Server>,
    query: Result<Query<TopQuery>, QueryRejection>,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(e) => {
            let message = format!(
                "invalid query string: {} (the parameters are by=rejected|requests and limit=N, N from 1 to {MAX_TOP})",
                e.body_text()
            );
            return refuse(&server, Rejection::bad_request(message));
        }
    };
    let limit = query.limit.unwrap_or(10);
    if !(1..=MAX_TOP).contains(&limit) {
        let message = format!("limit must be from 1 to {MAX_TOP} (got {limit})");
        return refuse(&server, Rejection::bad_request(message));
    }
    match observed(&server, "/v1/top") {
        Ok(observed) => ok(&observed.top.top(server.now_ms(), query.by, limit)),
        Err(rejection) => refuse(&server, rejection),
    }
}

/// `/v1/stats`'s answer.
#[derive(Serialize)]
struct StatsView {
    now_ms: u64,
    store: StoreHealth,
    #[serde(flatten)]
    seconds: Snapshot,
}

async fn stats(State(server): State<Server>) -> Response {
    match observed(&server, "/v1/stats") {
        Ok(observed) => {
            let now_ms = server.now_ms();
            ok(&StatsView {
                now_ms,
                store: server.store_health(),
                seconds: observed.stats.snapshot(now_ms),
            })
        }
        Err(rejection) => refuse(&server, rejection),
    }
}

async fn config(State(server): State<Server>) -> Response {
    ok(&config_view::ConfigView::of(&server.config()))
}
