//! A nameserver wired with its 4.x face: RocketMQ remoting on the nameserver's own port,
//! answered from the same registry as gRPC, so a 4.x app's `namesrvAddr` is the address
//! rocketraft's clients use.
//!
//! Invariant: remoting is served only while the port is in plain text. It has no TLS here, and
//! serving it beside a TLS port would let plain-text requests past the TLS the operator set.

use std::sync::Arc;

use rocketraft_nameserver::server::NameServer;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_nameserver::service::SharedRegistry;
use rocketraft_remoting::connection::side_protocol;
use rocketraft_remoting::nameserver::NameServerHandler;
use tokio::net::TcpListener;

/// Starts a nameserver on `listener` that serves gRPC, and RocketMQ 4.x remoting unless the
/// port has TLS.
pub fn start_nameserver(
    listener: TcpListener,
    config: NameServerConfig,
) -> std::io::Result<NameServer> {
    let registry = SharedRegistry::default();
    let remoting = match &config.tls {
        Some(_) => {
            tracing::info!("RocketMQ 4.x remoting is not served: it has no TLS, and this port has");
            None
        }
        None => Some(side_protocol(Arc::new(NameServerHandler::new(
            registry.clone(),
        )))),
    };
    NameServer::start_with(listener, config, registry, remoting)
}
