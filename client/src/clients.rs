//! Connections to broker nodes: one cached channel per address, shared by all tasks of a
//! producer or consumer (a tonic channel multiplexes concurrent calls).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use rocketraft_proto::broker::broker_client::BrokerClient;
use tonic::transport::Channel;

use crate::connector::Connector;
use crate::group::GroupError;

#[derive(Default)]
pub struct BrokerClients {
    connector: Connector,
    clients: Mutex<HashMap<SocketAddr, BrokerClient<Channel>>>,
}

impl BrokerClients {
    /// Connections opened through `connector`.
    pub fn new(connector: Connector) -> BrokerClients {
        BrokerClients {
            connector,
            clients: Mutex::default(),
        }
    }

    /// How these connections are opened.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// A client of the node at `addr`, connecting on first use.
    pub async fn get(&self, addr: SocketAddr) -> Result<BrokerClient<Channel>, GroupError> {
        let cached = self.lock().get(&addr).cloned();
        if let Some(client) = cached {
            return Ok(client);
        }
        let client = self.connector.connect(addr).await?;
        self.lock().insert(addr, client.clone());
        Ok(client)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SocketAddr, BrokerClient<Channel>>> {
        self.clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
