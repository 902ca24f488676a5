//! Serving the registry: the gRPC server and the task that expires silent nodes.

use rocketraft_domain::limits::REGISTRATION_BYTES_MAX;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use rocketraft_proto::nameserver::name_server_server::NameServerServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::Identity;
use tonic::transport::ServerTlsConfig;

use crate::metrics::NameServerMetrics;
use crate::service::NameServerService;
use crate::service::SharedRegistry;
use rocketraft_server_kit::connection_limit::CONNECTIONS_MAX_DEFAULT;
use rocketraft_server_kit::graceful_stop::Serving;
use rocketraft_server_kit::metrics_endpoint::serve_metrics;
use rocketraft_server_kit::side_protocol::SideProtocol;

/// The nameserver's default address.
pub const LISTEN_DEFAULT: &str = "127.0.0.1:9876";
/// A broker node not heard from for this long is dropped (RocketMQ's default).
pub const BROKER_EXPIRY_DEFAULT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone)]
pub struct NameServerConfig {
    pub broker_expiry: Duration,
    /// Connections served at once, at most; more are refused.
    pub connections_max: usize,
    /// Registrations must carry this secret; none: any registration is taken.
    pub cluster_secret: Option<String>,
    /// Where Prometheus scrapes `/metrics`; none: no endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// TLS on the nameserver port; none: plain HTTP/2.
    pub tls: Option<ServerTlsFiles>,
}

/// A server's certificate chain and its private key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ServerTlsFiles {
    /// Reads the files: the TLS settings of a server that presents this certificate.
    pub fn load(&self) -> std::io::Result<ServerTlsConfig> {
        let read = |key: &str, path: &Path| {
            std::fs::read(path).map_err(|error| {
                std::io::Error::new(
                    error.kind(),
                    format!("tls.{key}: cannot read {}: {error}", path.display()),
                )
            })
        };
        Ok(ServerTlsConfig::new().identity(Identity::from_pem(
            read("cert", &self.cert)?,
            read("key", &self.key)?,
        )))
    }
}

impl Default for NameServerConfig {
    fn default() -> Self {
        NameServerConfig {
            broker_expiry: BROKER_EXPIRY_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            cluster_secret: None,
            metrics_listen: None,
            tls: None,
        }
    }
}

/// A running nameserver.
pub struct NameServer {
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    serving: Serving,
}

impl NameServer {
    /// Serves on an already bound listener until [`NameServer::shutdown`].
    pub fn start_on(
        listener: TcpListener,
        config: NameServerConfig,
    ) -> std::io::Result<NameServer> {
        NameServer::start_with(listener, config, SharedRegistry::default(), None)
    }

    /// As [`NameServer::start_on`], over `registry` (which `side` may read too), serving
    /// `side` beside gRPC on the same port (RocketMQ 4.x remoting).
    pub fn start_with(
        listener: TcpListener,
        config: NameServerConfig,
        registry: SharedRegistry,
        side: Option<SideProtocol>,
    ) -> std::io::Result<NameServer> {
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let metrics = Arc::new(NameServerMetrics::default());
        let metrics_addr = match config.metrics_listen {
            Some(metrics_listen) => {
                let listener = std::net::TcpListener::bind(metrics_listen)?;
                listener.set_nonblocking(true)?;
                let listener = TcpListener::from_std(listener)?;
                let metrics_addr = listener.local_addr()?;
                let (metrics, registry) = (metrics.clone(), registry.clone());
                tokio::spawn(serve_metrics(
                    listener,
                    Arc::new(move || metrics.render(&registry)),
                    shutdown.clone(),
                ));
                tracing::info!(%metrics_addr, "metrics endpoint serving /metrics");
                Some(metrics_addr)
            }
            None => None,
        };
        tokio::spawn(expire_nodes(
            registry.clone(),
            config.broker_expiry,
            shutdown.clone(),
        ));
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &config.tls {
            builder = builder
                .tls_config(tls.load()?)
                .map_err(|error| std::io::Error::other(format!("tls: {error}")))?;
        }
        let router = builder.add_service(
            NameServerServer::new(NameServerService::new(
                registry,
                metrics,
                config.cluster_secret.clone(),
            ))
            .max_decoding_message_size(REGISTRATION_BYTES_MAX),
        );
        let serving =
            Serving::spawn_with(router, listener, config.connections_max, &shutdown, side);
        tracing::info!(%addr, "nameserver started");
        Ok(NameServer {
            addr,
            metrics_addr,
            shutdown,
            serving,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where `/metrics` is served, if `metrics_listen` was set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Stops serving: open calls get a grace period to finish, then are cut.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.serving.stop().await;
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
