//! The accept loop of [`Gateway::serve`](super::Gateway::serve): HTTP/1.1
//! connections with a deadline for each request's headers, at most so many
//! at once, and a graceful shutdown.
//!
//! `axum::serve` sets neither: a client that opens connections and never
//! finishes a request (slowloris), or leaves them idle, would hold them,
//! and the file descriptors behind them, for as long as it likes.

use std::pin::pin;
use std::sync::Arc;

use axum::Router;
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::{GatewayConfig, MAX_HEADER_TIMEOUT};

/// Serves `router` on `listener` until `shutdown` completes; then stops
/// accepting, lets the requests under way finish (idle connections are
/// closed at once) and returns when every connection has closed.
///
/// Past `config.max_connections`, the loop accepts no more until one closes:
/// new clients wait in the listen backlog. A connection's request headers
/// must arrive within `config.header_timeout` (at most
/// [`MAX_HEADER_TIMEOUT`]) of its waiting for them, which includes
/// a keep-alive connection's wait for its next request, or it is closed
/// without an answer. A request's body and handling are under the
/// gateway's request timeout instead.
pub(super) async fn serve(
    mut listener: TcpListener,
    router: Router,
    config: &GatewayConfig,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections.get()));
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout.min(MAX_HEADER_TIMEOUT));
    let mut shutdown = pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        // axum's `Listener` retries failed accepts itself (after a pause
        // when out of file descriptors).
        let (stream, _peer) = tokio::select! {
            accepted = Listener::accept(&mut listener) => accepted,
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    // Refuse new connections from now on.
    drop(listener);
    graceful.shutdown().await;
}
