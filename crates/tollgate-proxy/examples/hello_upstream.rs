//! A plain upstream for trying and benchmarking the proxy: answers every
//! request with `hello`.
//!
//! ```text
//! cargo run --release -p tollgate-proxy --example hello_upstream -- 127.0.0.1:3000
//! ```

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listen = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let app = axum::Router::new().fallback(|| async { "hello\n" });
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("upstream listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
