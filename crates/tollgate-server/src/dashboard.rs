//! The dashboard at `GET /`: one page and its scripts, embedded in the
//! binary (no CDN, no network beyond this server). It reads only the public
//! JSON endpoints ([`crate::inspect`]). Off with `[dashboard] enabled = false`.
//!
//! The chart library is uPlot (MIT), vendored unchanged under
//! `assets/vendor/uplot-1.6.32/` with its licence.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::http::Rejection;
use crate::server::Server;

const PAGE: &str = include_str!("../assets/dashboard.html");
const SCRIPT: &str = include_str!("../assets/dashboard.js");
const STYLE: &str = include_str!("../assets/dashboard.css");
const UPLOT_JS: &str = include_str!("../assets/vendor/uplot-1.6.32/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/vendor/uplot-1.6.32/uPlot.min.css");
const UPLOT_LICENSE: &str = include_str!("../assets/vendor/uplot-1.6.32/LICENSE");

/// The dashboard's routes: `/` and `/assets/{file}`.
pub fn routes() -> Router<Server> {
    Router::new()
        .route("/", get(page))
        .route("/assets/{file}", get(asset))
}

fn off() -> Response {
    Rejection::new(
        StatusCode::NOT_FOUND,
        "the dashboard is off ([dashboard] enabled = false)",
    )
    .into_response()
}

fn send(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

async fn page(State(server): State<Server>) -> Response {
    if server.observed().is_none() {
        return off();
    }
    send("text/html; charset=utf-8", PAGE)
}

async fn asset(State(server): State<Server>, Path(file): Path<String>) -> Response {
    if server.observed().is_none() {
        return off();
    }
    match file.as_str() {
        "dashboard.js" => send("text/javascript; charset=utf-8", SCRIPT),
        "dashboard.css" => send("text/css; charset=utf-8", STYLE),
        "uPlot.iife.min.js" => send("text/javascript; charset=utf-8", UPLOT_JS),
        "uPlot.min.css" => send("text/css; charset=utf-8", UPLOT_CSS),
        "uPlot.LICENSE.txt" => send("text/plain; charset=utf-8", UPLOT_LICENSE),
        _ => {
            Rejection::new(StatusCode::NOT_FOUND, format!("no such asset: {file}")).into_response()
        }
    }
}
