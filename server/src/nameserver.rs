//! A nameserver wired with its 4.x face: RocketMQ remoting on the nameserver's own port,
//! answered from the same registry as gRPC, so a 4.x app's `namesrvAddr` is the address
//! rocketraft's clients use.

use std::sync::Arc;

use rocketraft_nameserver::server::NameServer;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_nameserver::service::SharedRegistry;
use rocketraft_remoting::connection::side_protocol;
use rocketraft_remoting::nameserver::NameServerHandler;
use tokio::net::TcpListener;

/// Starts a nameserver on `listener` that serves gRPC and RocketMQ 4.x remoting.
pub fn start_nameserver(
    listener: TcpListener,
    config: NameServerConfig,
) -> std::io::Result<NameServer> {
    let registry = SharedRegistry::default();
    let remoting = side_protocol(Arc::new(NameServerHandler::new(registry.clone())));
    NameServer::start_with(listener, config, registry, Some(remoting))
}
