//! Stopping a gRPC server whose shutdown signal fired (broker or nameserver): open calls get
//! [`SHUTDOWN_GRACE`] to finish, then the server task is cut, so an idle client socket never
//! holds a stop.

use std::time::Duration;

use tokio::task::JoinHandle;

/// How long a stopping server lets open calls finish before it cuts them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Waits for `server` to stop, cutting its open calls after [`SHUTDOWN_GRACE`].
pub async fn stop_serving(mut server: JoinHandle<Result<(), tonic::transport::Error>>) {
    match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(error))) => tracing::warn!(%error, "grpc server stopped with an error"),
        Ok(Err(error)) => tracing::warn!(%error, "grpc server task failed"),
        Err(_) => {
            tracing::warn!("grpc calls still open after {SHUTDOWN_GRACE:?}; closing them");
            server.abort();
        }
    }
}
