//! A broker node with the endpoints its config asks for: the composition root. The broker
//! library serves the broker API and Raft; each endpoint is a client of that API (through the
//! SDK) and keeps no message state, so it starts after the node and stops before it. RocketMQ
//! 4.x remoting is served on the broker API's own port, beside gRPC, from the node's start.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rocketraft_broker::node::BrokerNode;
use rocketraft_broker::node::Listeners;
use rocketraft_broker::node::NodeOptions;
use rocketraft_broker::node::StartError;
use rocketraft_broker::tls::NodeTls;
use rocketraft_client::connector::ClientTls;
use rocketraft_client::connector::Connector;
use rocketraft_proxy::AccessKeys;
use rocketraft_proxy::Proxy;
use rocketraft_proxy::ProxyConfig;
use rocketraft_proxy::ProxyError;
use rocketraft_remoting::broker::BrokerHandler;
use rocketraft_remoting::connection::side_protocol;
use rocketraft_server_kit::config_file::ConfigError;
use rocketraft_server_kit::side_protocol::SideProtocol;
use tokio::net::TcpListener;

use crate::config::ServerConfig;

/// A node or one of its endpoints failed to start.
#[derive(Debug, thiserror::Error)]
pub enum NodeStartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Broker(#[from] StartError),
    #[error("bind the RocketMQ 5.x gRPC endpoint on {addr}")]
    GrpcV5Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("read the CA the RocketMQ 5.x gRPC endpoint verifies the brokers with")]
    GrpcV5Ca(#[source] std::io::Error),
    #[error("start the RocketMQ 5.x gRPC endpoint")]
    GrpcV5(#[source] ProxyError),
}

/// A running broker node and its endpoints.
pub struct Node {
    broker: BrokerNode,
    /// RocketMQ 5.x's gRPC API, if `grpc_v5_listen` was set.
    grpc_v5: Option<Proxy>,
}

impl Node {
    /// Starts a node listening on its configured addresses.
    pub async fn start(config: ServerConfig, options: NodeOptions) -> Result<Node, NodeStartError> {
        let listeners = Listeners::bind(&config.broker).await?;
        Node::start_on(config, listeners, options).await
    }

    /// Starts a node on already bound broker listeners, then its endpoints.
    pub async fn start_on(
        config: ServerConfig,
        listeners: Listeners,
        mut options: NodeOptions,
    ) -> Result<Node, NodeStartError> {
        config.validate()?;
        options.side_protocol = remoting(&config)?;
        let broker = BrokerNode::start_on(config.broker.clone(), listeners, options).await?;
        let grpc_v5 = match config.grpc_v5.listen {
            Some(listen) => match start_grpc_v5(&config, listen).await {
                Ok(grpc_v5) => Some(grpc_v5),
                Err(error) => {
                    broker.shutdown().await;
                    return Err(error);
                }
            },
            None => None,
        };
        Ok(Node { broker, grpc_v5 })
    }

    /// The broker node itself.
    pub fn broker(&self) -> &BrokerNode {
        &self.broker
    }

    /// Where RocketMQ 5.x's gRPC API is served, if `grpc_v5_listen` was set.
    pub fn grpc_v5_addr(&self) -> Option<SocketAddr> {
        self.grpc_v5.as_ref().map(Proxy::addr)
    }

    /// Stops the endpoints, then the broker node (see [`BrokerNode::shutdown`]: it returns
    /// once nothing of the node still touches its data dir).
    pub async fn shutdown(self) {
        if let Some(grpc_v5) = self.grpc_v5 {
            grpc_v5.shutdown().await;
        }
        self.broker.shutdown().await;
    }
}

/// RocketMQ 4.x remoting on the broker API's port, for a node in plain text (remoting has no
/// TLS here): requests reach the group's leader through the SDK, as the 5.x endpoint's do.
fn remoting(config: &ServerConfig) -> Result<Option<SideProtocol>, NodeStartError> {
    let broker = &config.broker;
    if broker.tls.is_some() {
        return Ok(None);
    }
    let peers = broker.peer_map()?;
    let own = peers
        .get(&broker.node_id)
        .and_then(|addr| addr.api.parse().ok())
        .unwrap_or(broker.listen);
    let nodes = peers
        .values()
        .filter_map(|addr| addr.api.parse().ok())
        .collect();
    let handler = BrokerHandler::new(broker.group.clone(), own, nodes, Connector::plain());
    Ok(Some(side_protocol(Arc::new(handler))))
}

/// Serves RocketMQ 5.x's gRPC API on `listen`, with the broker API's TLS and caps.
async fn start_grpc_v5(config: &ServerConfig, listen: SocketAddr) -> Result<Proxy, NodeStartError> {
    let broker = &config.broker;
    let listener =
        TcpListener::bind(listen)
            .await
            .map_err(|source| NodeStartError::GrpcV5Bind {
                addr: listen,
                source,
            })?;
    let (client_tls, server_tls) = match &broker.tls {
        Some(settings) => (
            Some(ClientTls::from_ca_file(&settings.ca).map_err(NodeStartError::GrpcV5Ca)?),
            Some(
                NodeTls::load(settings)
                    .map_err(StartError::from)?
                    .api_server(),
            ),
        ),
        None => (None, None),
    };
    Proxy::start_on(
        listener,
        ProxyConfig {
            nameservers: broker.namesrv.clone(),
            client_tls,
            server_tls,
            connections_max: broker.connections_max,
            streams_per_connection_max: broker.streams_per_connection_max,
            timer_max_delay_ms: broker.timer_max_delay_ms,
            access_keys: AccessKeys::new(config.grpc_v5.access_keys.clone()),
            consumer_retry_delays: broker.parsed_delay_levels()?.delays().to_vec(),
            auto_renew_invisible: Duration::from_millis(config.grpc_v5.auto_renew_invisible_ms),
        },
    )
    .map_err(NodeStartError::GrpcV5)
}
