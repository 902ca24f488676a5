//! How this client opens a connection to a broker node or a nameserver: plain HTTP/2, or TLS
//! (rustls) verifying the server's certificate against a CA the application trusts. Every
//! connection the SDK makes (sends, pulls, leader lookups, route queries, admin calls) goes
//! through the one [`Connector`] its producer, consumer or admin client was built with: a
//! cluster is either all TLS or all plain text.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use rocketraft_domain::limits::HTTP2_FRAME_BYTES_MAX;
use rocketraft_proto::broker::broker_client::BrokerClient;
use tonic::transport::Certificate;
use tonic::transport::Channel;
use tonic::transport::ClientTlsConfig;
use tonic::transport::Endpoint;

use crate::group::GRPC_MESSAGE_BYTES_MAX;
use crate::group::GroupError;

/// How long to wait for a connection to a node.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A connection with calls open that has read nothing for `KEEP_ALIVE_INTERVAL` sends a
/// ping; one unanswered for `KEEP_ALIVE_TIMEOUT` fails the connection and its calls. This is
/// how a consumer's held pull (and a membership watch) leaves a paused or cut-off leader: with
/// 5 s / 5 s the drill's consumer resumed 3.1 s after a leader was paused, with 500 ms / 1 s
/// in 1.6 s (its producer in 1.0 s, the election). A busy connection sends no pings.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_millis(500);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long connecting to a nameserver may take: a vanished host never refuses.
const NAMESERVER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long one nameserver call may take.
const NAMESERVER_CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The CA a TLS-serving cluster's broker certificates are verified against.
#[derive(Debug, Clone)]
pub struct ClientTls {
    config: ClientTlsConfig,
}

impl ClientTls {
    /// Trusts the CA certificate(s) in `pem`.
    pub fn from_ca_pem(pem: impl AsRef<[u8]>) -> ClientTls {
        ClientTls {
            config: ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
        }
    }

    /// Trusts the CA certificate(s) in the PEM file at `path`.
    pub fn from_ca_file(path: &Path) -> std::io::Result<ClientTls> {
        let pem = std::fs::read(path).map_err(|error| {
            std::io::Error::new(
                error.kind(),
                format!("read the TLS CA file {}: {error}", path.display()),
            )
        })?;
        Ok(ClientTls::from_ca_pem(pem))
    }
}

/// Opens connections to broker nodes; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Connector {
    tls: Option<ClientTls>,
}

impl Connector {
    /// Plain HTTP/2 (`http://`).
    pub fn plain() -> Connector {
        Connector::default()
    }

    /// TLS (`https://`), verifying nodes against `tls`'s CA.
    pub fn tls(tls: ClientTls) -> Connector {
        Connector { tls: Some(tls) }
    }

    /// An endpoint for the server (a nameserver or a broker node) at `addr` (`host:port`),
    /// plain or TLS, not yet connected.
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|error| format!("{addr}: {error}"))?;
        match &self.tls {
            Some(tls) => endpoint
                .tls_config(tls.config.clone())
                .map_err(|error| format!("{addr}: {error}")),
            None => Ok(endpoint),
        }
    }

    /// An endpoint for the nameserver at `addr`, not yet connected: it connects within 1 s,
    /// each call ends within 3 s, and a connection with a call open pings as a node's does,
    /// so a vanished nameserver's connection fails instead of holding the next query.
    pub fn nameserver_endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        Ok(self
            .endpoint(addr)?
            .connect_timeout(NAMESERVER_CONNECT_TIMEOUT)
            .timeout(NAMESERVER_CALL_TIMEOUT)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT))
    }

    /// Connects to the broker API of the node at `addr`.
    pub async fn connect(&self, addr: SocketAddr) -> Result<BrokerClient<Channel>, GroupError> {
        let endpoint = self
            .endpoint(&addr.to_string())
            .map_err(|reason| GroupError::Endpoint { addr, reason })?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .max_frame_size(HTTP2_FRAME_BYTES_MAX)
            // While calls are open (held pulls, membership watches), ping the node, so one
            // that stopped answering (paused, or cut off) fails them instead of holding them.
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(false);
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| GroupError::Connect { addr, source })?;
        Ok(BrokerClient::new(channel)
            .max_decoding_message_size(GRPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(GRPC_MESSAGE_BYTES_MAX))
    }
}
