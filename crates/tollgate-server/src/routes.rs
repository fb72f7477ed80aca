//! The one router of `serve`'s HTTP port: the decision API ([`crate::http`]),
//! the inspections ([`crate::inspect`]) and the dashboard
//! ([`crate::dashboard`]), each translating to the same [`Server`]; and
//! [`HotRoutes`], which answers the busiest of them before the router.
//! Built here, above the three, so that none of them imports another's
//! routes.

mod hot;

use axum::extract::DefaultBodyLimit;
use axum::Router;

pub use hot::HotRoutes;

use crate::http::{method_not_allowed, not_found, refuse_query_not_utf8, MAX_BODY_BYTES};
use crate::server::Server;

/// The routes, ready for `axum::serve` (`serve` itself answers the busiest
/// ones first, with [`HotRoutes`]).
pub fn router(server: Server) -> Router {
    crate::http::routes()
        .merge(crate::inspect::routes())
        .merge(crate::dashboard::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            server.clone(),
            refuse_query_not_utf8,
        ))
        .with_state(server)
}
