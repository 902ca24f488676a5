//! Serving the registry: the gRPC server and the task that expires silent nodes.

use std::net::SocketAddr;
use std::time::Duration;
use std::time::Instant;

use rocketraft_proto::nameserver::name_server_server::NameServerServer;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::TcpIncoming;

use crate::service::NameServerService;
use crate::service::SharedRegistry;

/// The nameserver's default address.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:9876";
/// A broker node not heard from for this long is dropped (RocketMQ's default).
pub const BROKER_EXPIRY_DEFAULT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct NameServerConfig {
    pub broker_expiry: Duration,
}

impl Default for NameServerConfig {
    fn default() -> Self {
        NameServerConfig {
            broker_expiry: BROKER_EXPIRY_DEFAULT,
        }
    }
}

/// A running nameserver.
pub struct NameServer {
    addr: SocketAddr,
    shutdown: CancellationToken,
    server: JoinHandle<Result<(), tonic::transport::Error>>,
}

impl NameServer {
    /// Serves on an already bound listener until [`NameServer::shutdown`].
    pub fn start_on(
        listener: TcpListener,
        config: NameServerConfig,
    ) -> std::io::Result<NameServer> {
        let addr = listener.local_addr()?;
        let registry = SharedRegistry::default();
        let shutdown = CancellationToken::new();
        tokio::spawn(expire_nodes(
            registry.clone(),
            config.broker_expiry,
            shutdown.clone(),
        ));
        let server = tonic::transport::Server::builder()
            .add_service(NameServerServer::new(NameServerService::new(registry)))
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                shutdown.clone().cancelled_owned(),
            );
        tracing::info!(%addr, "nameserver started");
        Ok(NameServer {
            addr,
            shutdown,
            server: tokio::spawn(server),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub async fn shutdown(self) {
        self.shutdown.cancel();
        match self.server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "nameserver stopped with an error"),
            Err(error) => tracing::warn!(%error, "nameserver task failed"),
        }
    }
}

/// Checks for silent nodes a few times per expiry period.
async fn expire_nodes(registry: SharedRegistry, expiry: Duration, shutdown: CancellationToken) {
    let period = (expiry / 4).max(Duration::from_millis(10));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(period) => {}
        }
        registry.lock().expire(Instant::now(), expiry);
    }
}
