//! A gRPC server (broker, nameserver, 5.x endpoint) serving until its shutdown signal fires,
//! and its stop: open calls get [`SHUTDOWN_GRACE`] to finish, then the server task is aborted
//! and its connections cut, so neither an idle client socket nor a call that never ends (a
//! watch, a held pull) holds a stop.
//!
//! Invariant: once [`Serving::stop`] returns, no call of the server still runs, so none
//! holds the services it was given (a server task's abort alone does not reach the tasks that
//! serve its connections).

use std::time::Duration;

use futures::future::Either;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;

use crate::connection_limit::ConnectionCut;
use crate::connection_limit::serve_connections;
use crate::side_protocol::SideProtocol;
use crate::side_protocol::split_side_protocol;

/// How long a stopping server lets open calls finish before it cuts them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// A running gRPC server.
pub struct Serving {
    server: JoinHandle<Result<(), tonic::transport::Error>>,
    /// Cut when the stop's grace is over: every connection's reads and writes fail.
    connections: ConnectionCut,
}

impl Serving {
    /// Serves `router` on `listener`, at most `connections_max` connections at once, until
    /// `shutdown` is cancelled; then [`Serving::stop`] ends it.
    pub fn spawn(
        router: Router,
        listener: TcpListener,
        connections_max: usize,
        shutdown: &CancellationToken,
    ) -> Serving {
        Serving::spawn_with(router, listener, connections_max, shutdown, None)
    }

    /// As [`Serving::spawn`], handing the connections that open with `side`'s first byte to
    /// it (they count under `connections_max` too, and are cut with the others).
    pub fn spawn_with(
        router: Router,
        listener: TcpListener,
        connections_max: usize,
        shutdown: &CancellationToken,
        side: Option<SideProtocol>,
    ) -> Serving {
        let connections = ConnectionCut::new();
        let admitted = serve_connections(listener, connections_max, connections.clone());
        let incoming = match side {
            Some(side) => Either::Left(split_side_protocol(admitted, side, connections_max)),
            None => Either::Right(admitted),
        };
        let server = tokio::spawn(
            router.serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned()),
        );
        Serving {
            server,
            connections,
        }
    }

    /// Waits for the server to stop once its shutdown signal fired, cutting the calls still
    /// open after [`SHUTDOWN_GRACE`].
    pub async fn stop(mut self) {
        match tokio::time::timeout(SHUTDOWN_GRACE, &mut self.server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "grpc server stopped with an error"),
            Ok(Err(error)) => tracing::warn!(%error, "grpc server task failed"),
            Err(_) => {
                tracing::warn!("grpc calls still open after {SHUTDOWN_GRACE:?}; closing them");
                self.server.abort();
            }
        }
        self.connections.cut();
    }
}
