//! The HTTP API (JSON):
//!
//! - `POST /v1/check` with `{"client": "...", "cost": 1, "plan": "..."}` (`cost`
//!   defaults to 1, `plan` overrides the client's plan): 200 with the decision.
//! - `GET /v1/remaining/{client}[?plan=NAME]`: the same numbers, using nothing.
//! - `GET /v1/auth[?plan=NAME]`: forward-auth (nginx `auth_request`, Traefik
//!   ForwardAuth, Caddy `forward_auth`): 204 allowed, 429 rejected; the client
//!   id comes from `X-Client-Id` or the configured header or API key.
//! - `GET /healthz`, `GET /metrics` (Prometheus text).
//!
//! Every decision carries `RateLimit-Policy` and `RateLimit`, and a rejection
//! `Retry-After`. Bad input gets a 4xx `{"error": "..."}` and changes nothing,
//! and so does a `POST /v1/check` a browser sent from a page of another
//! origin (a 403, [`no_cross_origin`]).

mod body;
mod cross_origin;
mod decision_json;
mod query;
mod request;
mod response;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::BoxError;
use axum::Router;
use tollgate_config::ClientIdSource;

use crate::metrics::BadRequest;
use crate::server::Server;
use body::{only_chunked, read_body};
pub use cross_origin::no_cross_origin;
pub(crate) use query::{query_utf8, refuse_query_not_utf8};
pub use request::{
    check_client, check_cost, decode_check, no_check_query, CheckRequest, PlanQuery,
    MAX_BODY_BYTES, MAX_CLIENT_BYTES,
};
pub use response::{decision_response, json, rate_limit_headers, Rejection};

/// The decision API's routes (the whole router, with the inspections and
/// the dashboard: [`crate::routes::router`]).
pub(crate) fn routes() -> Router<Server> {
    Router::new()
        .route("/v1/check", post(check))
        .route("/v1/remaining/{client}", get(remaining))
        .route("/v1/auth", get(auth))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
}

/// Counts a refusal and turns it into its response.
pub(crate) fn refuse(server: &Server, rejection: Rejection) -> Response {
    let kind = match rejection.status {
        StatusCode::BAD_REQUEST => Some(BadRequest::Invalid),
        StatusCode::PAYLOAD_TOO_LARGE => Some(BadRequest::TooLarge),
        StatusCode::FORBIDDEN => Some(BadRequest::CrossOrigin),
        StatusCode::REQUEST_TIMEOUT => Some(BadRequest::TooSlow),
        // An endpoint that is off (404) is no mistake of the request's,
        // nor is a store that cannot decide (5xx).
        _ => None,
    };
    if let Some(kind) = kind {
        server.metrics().record_bad_request(kind);
    }
    // Debug formatting: the message quotes what the caller sent (a query
    // string's keys, decoded from %0a and %1b), whose newlines and escapes
    // would otherwise forge log lines.
    tracing::debug!(status = rejection.status.as_u16(), error = ?rejection.message, "request refused");
    rejection.into_response()
}

async fn check(State(server): State<Server>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    answer_check(&server, &parts.uri, &parts.headers, body).await
}

/// `POST /v1/check`: the body read whole (at most [`MAX_BODY_BYTES`]),
/// decoded and decided, for the router and [`HotRoutes`] alike. A request
/// a browser sent from a page of another origin is refused before anything
/// is read ([`no_cross_origin`]). A query string is refused, not ignored: a
/// caller who writes `?plan=gold` must not be decided on another plan
/// unawares.
pub(crate) async fn answer_check<B>(
    server: &Server,
    uri: &Uri,
    headers: &HeaderMap,
    body: B,
) -> Response
where
    B: HttpBody<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if let Err(rejection) = no_cross_origin(uri, headers) {
        return refuse(server, rejection);
    }
    if let Err(rejection) = no_check_query(uri.query()) {
        return refuse(server, rejection);
    }
    if let Err(rejection) = only_chunked(headers) {
        return refuse(server, rejection);
    }
    let body = match read_body(body, server.body_within()).await {
        Ok(body) => body,
        Err(rejection) => return refuse(server, rejection),
    };
    let max_cost = server.config().max_cost;
    let request = match decode_check(&body, max_cost) {
        Ok(request) => request,
        Err(rejection) => return refuse(server, rejection),
    };
    match server
        .decide(&request.client, request.plan.as_deref(), request.cost)
        .await
    {
        Ok(decided) => decision_response(StatusCode::OK, &request.client, request.cost, &decided),
        Err(error) => refuse(server, error.into()),
    }
}

async fn remaining(
    State(server): State<Server>,
    client: Result<Path<String>, PathRejection>,
    query: Result<Query<PlanQuery>, QueryRejection>,
) -> Response {
    let (client, plan) = match client_and_plan(client, query) {
        Ok(asked) => asked,
        Err(rejection) => return refuse(&server, rejection),
    };
    match server.look(&client, plan.as_deref()).await {
        Ok(decided) => decision_response(StatusCode::OK, &client, 0, &decided),
        Err(error) => refuse(&server, error.into()),
    }
}

/// The `{client}` of a path such as `/v1/remaining/{client}` (its length is
/// checked by [`check_client`]).
pub(crate) fn path_client(
    client: Result<Path<String>, PathRejection>,
) -> Result<String, Rejection> {
    client
        .map(|Path(client)| client)
        .map_err(|e| Rejection::bad_request(format!("invalid client id in the path: {e}")))
}

/// The client id of a `.../{client}` path and the optional `?plan=NAME`
/// of `GET /v1/remaining/{client}` and `GET /v1/clients/{client}`, checked.
pub(crate) fn client_and_plan(
    client: Result<Path<String>, PathRejection>,
    query: Result<Query<PlanQuery>, QueryRejection>,
) -> Result<(String, Option<String>), Rejection> {
    let client = path_client(client)?;
    let plan = plan_query(query)?;
    check_client(&client)?;
    Ok((client, plan))
}

/// The `?plan=NAME` of a query string, refusing an empty or unknown parameter.
pub(crate) fn plan_query(
    query: Result<Query<PlanQuery>, QueryRejection>,
) -> Result<Option<String>, Rejection> {
    match query {
        Ok(Query(query)) => non_empty_plan(query.plan),
        Err(e) => Err(Rejection::bad_request(format!(
            "invalid query string: {} (the only parameter is plan=NAME)",
            e.body_text()
        ))),
    }
}

/// A `?plan=` given, refused when empty: a caller who wrote it meant a plan.
pub(crate) fn non_empty_plan(plan: Option<String>) -> Result<Option<String>, Rejection> {
    match plan {
        Some(plan) if plan.is_empty() => Err(Rejection::bad_request(
            "?plan= is empty: give a plan name or leave it out",
        )),
        plan => Ok(plan),
    }
}

/// The client id of a forward-auth request, read and checked (not empty,
/// at most [`MAX_CLIENT_BYTES`]) by the one key parser every front end
/// shares ([`tollgate_http`]).
fn auth_client(source: &ClientIdSource, headers: &HeaderMap) -> Result<String, Rejection> {
    match source {
        ClientIdSource::Header(name) => tollgate_http::header_key(headers, name),
        ClientIdSource::ApiKey => tollgate_http::api_key(headers),
    }
    .map_err(|e| Rejection::bad_request(e.to_string()))
}

/// Forward auth. The request is taken whole, to read its query and headers
/// in place (axum's `HeaderMap` extractor would copy every header).
async fn auth(State(server): State<Server>, request: Request) -> Response {
    answer_auth(&server, request.uri(), request.headers()).await
}

/// `GET /v1/auth`: the plan from the query, the client from the headers,
/// decided at cost 1; 204 when allowed.
pub(crate) async fn answer_auth(server: &Server, uri: &Uri, headers: &HeaderMap) -> Response {
    let plan = match plan_query(Query::try_from_uri(uri)) {
        Ok(plan) => plan,
        Err(rejection) => return refuse(server, rejection),
    };
    let client = match auth_client(&server.config().client_id, headers) {
        Ok(client) => client,
        Err(rejection) => return refuse(server, rejection),
    };
    match server.decide(&client, plan.as_deref(), 1).await {
        Ok(decided) if decided.decision.allowed => {
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::NO_CONTENT;
            response::insert_rate_limit_headers(response.headers_mut(), &decided);
            response
        }
        Ok(decided) => decision_response(StatusCode::TOO_MANY_REQUESTS, &client, 1, &decided),
        Err(error) => refuse(server, error.into()),
    }
}

/// `{"status":"ok"}`, as written once.
async fn healthz() -> Response {
    healthz_response()
}

/// `GET /healthz`'s answer.
pub(crate) fn healthz_response() -> Response {
    response::json_bytes(StatusCode::OK, Bytes::from_static(br#"{"status":"ok"}"#))
}

async fn metrics(State(server): State<Server>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        )],
        server.render_metrics(),
    )
        .into_response()
}

pub(crate) async fn not_found(method: Method, uri: Uri) -> Response {
    Rejection::new(
        StatusCode::NOT_FOUND,
        format!(
            "no such endpoint: {method} {}; the API is POST /v1/check, GET /v1/remaining/{{client}}, GET /v1/auth, GET /v1/clients/{{client}} (or ?client=ID), GET /v1/top, GET /v1/stats, GET /v1/config, GET /healthz, GET /metrics",
            uri.path()
        ),
    )
    .into_response()
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    Rejection::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", uri.path()),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tollgate::ManualClock;
    use tollgate_config::{Config, StoreHandle};

    use super::*;

    /// Where the test's subscriber writes its log lines.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .expect("not poisoned")
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A refusal's message holds what the caller sent (a query string's
    /// keys, decoded from `%0a` and `%1b`): at `RUST_LOG=debug` it must
    /// stay on its one log line, its control characters escaped, or a
    /// caller forges log lines and terminal escapes.
    #[test]
    fn a_refusal_is_logged_on_one_line_with_its_control_characters_escaped() {
        let config = Config::parse(
            "[[plans.free]]\nname = \"1s\"\npolicy = \"gcra\"\nlimit = 1\nwindow = \"1s\"\n",
        )
        .expect("a valid config");
        let store = StoreHandle::for_config(&config).expect("a memory store");
        let server = Server::new(config, store, Arc::new(ManualClock::new(0)));
        let written = Written::default();
        let writer = written.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let forged = "unknown field `\n2026-01-01T00:00:00Z ERROR forged\u{1b}[2J`";
        tracing::subscriber::with_default(subscriber, || {
            refuse(&server, Rejection::bad_request(forged));
        });
        let log =
            String::from_utf8(written.0.lock().expect("not poisoned").clone()).expect("UTF-8");
        assert_eq!(log.matches('\n').count(), 1, "one line: {log:?}");
        assert!(!log.contains('\u{1b}'), "a raw ESC: {log:?}");
        assert!(
            log.contains(r"\n2026-01-01T00:00:00Z ERROR forged\u{1b}[2J"),
            "the message, escaped: {log:?}"
        );
    }
}
