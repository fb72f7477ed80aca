//! An axum server rate-limited per client IP by tollgate.
//!
//! ```text
//! cargo run -p tollgate-tower --example axum_server -- 127.0.0.1:3000
//! for i in $(seq 6); do curl -si http://127.0.0.1:3000/ | head -n1; done
//! ```
//!
//! Plan `demo`: 5 requests per second (sliding window) and 100 per minute
//! (token bucket) for each client IP; the 6th request within a second gets a
//! 429 with `RateLimit`, `RateLimit-Policy` and `Retry-After`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tollgate::{AnyPolicy, Limit, MemoryBackend, Plan, SystemClock};
use tollgate_tower::{PeerIp, RateLimitConfig, RateLimitLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let plan = Plan::new(
        "demo",
        vec![
            Limit::new(
                "1s",
                AnyPolicy::from_name("sliding-window", 5, 1_000)?,
                false,
            ),
            Limit::new(
                "1m",
                AnyPolicy::from_name("token-bucket", 100, 60_000)?,
                false,
            ),
        ],
    )?;
    let config = RateLimitConfig::new(plan, Arc::new(MemoryBackend::new()), Arc::new(SystemClock));
    let app = Router::new()
        .route("/", get(|| async { "hello from behind tollgate\n" }))
        .layer(RateLimitLayer::new(config, PeerIp::direct()));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
