//! TLS on a broker node's ports (rustls through tonic), from the PEM files of its `[tls]`
//! config: the broker API serves the node's certificate to any client; the Raft port serves
//! it too and admits only peers that present a certificate signed by the group's CA (mutual
//! TLS); and the node presents its certificate, and verifies the peer's against that CA,
//! whenever it calls a peer (Raft, repair, scrub).
//!
//! Invariant: a node with TLS makes no plain-text call to a peer; every peer connection is
//! built by [`PeerConnector`].

use std::path::Path;
use std::time::Duration;

use rocketraft_domain::limits::HTTP2_FRAME_BYTES_MAX;
use tonic::transport::Certificate;
use tonic::transport::ClientTlsConfig;
use tonic::transport::Endpoint;
use tonic::transport::Identity;
use tonic::transport::ServerTlsConfig;

use crate::config::TlsSettings;

/// How long a peer connection may take to open.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A peer connection that has read nothing for this long sends a ping, idle or not; one
/// unanswered for [`PEER_KEEP_ALIVE_TIMEOUT`] fails the connection and its calls, so a peer
/// whose host vanished (nothing answers, no RST) is noticed within about two seconds and
/// the connection opened afresh when it is back, instead of waiting out TCP's retransmits.
const PEER_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(1);
const PEER_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(1);

/// A TLS file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("tls.{key}: cannot read {path}: {source}")]
pub struct TlsFileError {
    key: &'static str,
    path: String,
    #[source]
    source: std::io::Error,
}

/// The node's certificate and the group's CA, loaded.
#[derive(Debug, Clone)]
pub struct NodeTls {
    identity: Identity,
    ca: Certificate,
}

impl NodeTls {
    /// Reads the PEM files `settings` names.
    pub fn load(settings: &TlsSettings) -> Result<NodeTls, TlsFileError> {
        let read = |key, path: &Path| {
            std::fs::read(path).map_err(|source| TlsFileError {
                key,
                path: path.display().to_string(),
                source,
            })
        };
        Ok(NodeTls {
            identity: Identity::from_pem(
                read("cert", &settings.cert)?,
                read("key", &settings.key)?,
            ),
            ca: Certificate::from_pem(read("ca", &settings.ca)?),
        })
    }

    /// The broker API's port: the node's certificate, any client.
    pub fn api_server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new().identity(self.identity.clone())
    }

    /// The Raft port: the node's certificate, and only peers with one signed by the CA.
    pub fn raft_server(&self) -> ServerTlsConfig {
        self.api_server().client_ca_root(self.ca.clone())
    }

    fn peer_client(&self) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(self.ca.clone())
            .identity(self.identity.clone())
    }
}

/// Builds this node's connections to its peers: plain, or TLS with its certificate.
#[derive(Debug, Clone, Default)]
pub struct PeerConnector {
    tls: Option<ClientTlsConfig>,
}

impl PeerConnector {
    pub fn new(tls: Option<&NodeTls>) -> PeerConnector {
        PeerConnector {
            tls: tls.map(NodeTls::peer_client),
        }
    }

    /// An endpoint for the peer service at `addr` (`ip:port`), not yet connected.
    pub fn endpoint(&self, addr: &str) -> Result<Endpoint, String> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
            .map_err(|error| format!("bad peer address {addr:?}: {error}"))?
            .tcp_nodelay(true)
            .max_frame_size(HTTP2_FRAME_BYTES_MAX)
            .connect_timeout(PEER_CONNECT_TIMEOUT)
            .http2_keep_alive_interval(PEER_KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(PEER_KEEP_ALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        match &self.tls {
            Some(tls) => endpoint
                .tls_config(tls.clone())
                .map_err(|error| format!("TLS for peer {addr}: {error}")),
            None => Ok(endpoint),
        }
    }
}
