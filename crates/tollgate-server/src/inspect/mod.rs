//! The inspection endpoints (JSON), read by the dashboard and by anyone:
//!
//! - `GET /v1/clients/{client}[?plan=NAME]`: the client's plan and the state
//!   of each of its limits ([`client`], from [`tollgate::Store::inspect`]
//!   through [`Server::inspect`]); uses nothing, on every store; 503 when
//!   the store cannot be read. Also `GET /v1/clients?client=ID[&plan=NAME]`,
//!   the same with the id in the query, which the dashboard uses: a browser
//!   removes an id of `.` or `..` (`%2e` too) from a path as a dot segment.
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
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};

use crate::http::{
    check_client, client_and_plan, json, non_empty_plan, refuse, PlanQuery, Rejection,
};
use crate::server::{Observed, Server, StoreHealth};
use crate::stats::Snapshot;
use crate::top::RankBy;

/// The most clients `/v1/top` lists.
pub const MAX_TOP: usize = 1_000;

/// The inspection routes.
pub fn routes() -> Router<Server> {
    Router::new()
        .route("/v1/clients/{client}", get(client_state))
        .route("/v1/clients", get(client_state_by_query))
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
    match client_and_plan(client, query) {
        Ok((client, plan)) => answer_client_state(&server, &client, plan.as_deref()).await,
        Err(rejection) => refuse(&server, rejection),
    }
}

/// `GET /v1/clients?client=ID[&plan=NAME]`'s query: the id in the query
/// rather than in the path, where a browser would remove an id of `.` or
/// `..` as a dot segment before it is sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientQuery {
    client: Option<String>,
    plan: Option<String>,
}

async fn client_state_by_query(
    State(server): State<Server>,
    query: Result<Query<ClientQuery>, QueryRejection>,
) -> Response {
    match client_and_plan_of_query(query) {
        Ok((client, plan)) => answer_client_state(&server, &client, plan.as_deref()).await,
        Err(rejection) => refuse(&server, rejection),
    }
}

/// The client id and the optional plan of [`ClientQuery`], checked as the
/// path form's are.
fn client_and_plan_of_query(
    query: Result<Query<ClientQuery>, QueryRejection>,
) -> Result<(String, Option<String>), Rejection> {
    let Query(query) = query.map_err(|e| {
        Rejection::bad_request(format!(
            "invalid query string: {} (the parameters are client=ID and plan=NAME)",
            e.body_text()
        ))
    })?;
    let client = query.client.ok_or_else(|| {
        Rejection::bad_request(
            "the client id is missing: GET /v1/clients/{client} or /v1/clients?client=ID",
        )
    })?;
    check_client(&client)?;
    Ok((client, non_empty_plan(query.plan)?))
}

/// A client's inspection, or the refusal of an unknown plan or a store
/// that cannot be read.
async fn answer_client_state(server: &Server, client: &str, plan: Option<&str>) -> Response {
    match server.inspect(client, plan).await {
        Ok((plan, inspection)) => ok(&client::ClientState::of(client, &plan, &inspection)),
        Err(error) => refuse(server, error.into()),
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
