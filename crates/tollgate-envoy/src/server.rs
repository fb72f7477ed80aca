//! Serving the rate limit service (and gRPC health checking) over gRPC.

use std::future::Future;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use crate::config::ServiceConfig;
use crate::service::RlsService;
use crate::Error;

/// The gRPC routes: `envoy.service.ratelimit.v3.RateLimitService` and
/// `grpc.health.v1.Health` (reporting `SERVING` for the server, `""`, and
/// for the rate limit service by name). Mount them in a tonic server, or
/// turn them into an axum router with `Routes::into_axum_router`.
pub async fn router(config: ServiceConfig) -> Routes {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<RlsService>>()
        .await;
    Routes::new(RateLimitServiceServer::new(RlsService::new(config))).add_service(health)
}

/// Serves the rate limit service on `listener` until `shutdown` completes,
/// then finishes the calls in flight.
///
/// # Errors
/// [`Error::Transport`] when the server fails.
pub async fn run(
    listener: TcpListener,
    config: ServiceConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let routes = router(config).await;
    // No Nagle: a decision is a small write that must leave at once.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await?;
    Ok(())
}
