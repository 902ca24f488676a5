//! The endpoint's server: a gRPC server of its own on `grpc_v5_listen`, with the same caps on
//! connections and streams as the broker API, and one SDK producer that reaches the cluster.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::access::AccessKeys;
use crate::renewals::Renewals;
use rocketraft_client::connector::ClientTls;
use rocketraft_client::error::ProducerError;
use rocketraft_client::producer::Producer;
use rocketraft_domain::limits::HTTP2_FRAME_BYTES_MAX;
use rocketraft_domain::limits::SEND_BATCH_COUNT_MAX;
use rocketraft_domain::limits::SEND_REQUEST_BYTES_MAX;
use rocketraft_server_kit::graceful_stop::Serving;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::transport::ServerTlsConfig;

use crate::clients::Clients;
use crate::pb::messaging_service_server::MessagingServiceServer;
use crate::service::Service;
use crate::transaction::ForwardChecks;

/// Bytes a 5.x message may carry besides its body and properties, at most: its topic, id,
/// born host, message group and timestamps, and their framing.
const V5_MESSAGE_OVERHEAD_BYTES_MAX: usize = 1024;
/// The largest request the endpoint decodes: the largest legal send (rocketraft's limit) with
/// every message's 5.x overhead. A larger one is refused before it is read whole.
pub const V5_REQUEST_BYTES_MAX: usize =
    SEND_REQUEST_BYTES_MAX + SEND_BATCH_COUNT_MAX * V5_MESSAGE_OVERHEAD_BYTES_MAX;

/// The SDK producer group the endpoints send with: every endpoint of the cluster shares it,
/// so a transaction's check-backs go to each in turn.
const PRODUCER_GROUP: &str = "rocketraft_grpc_v5";

pub struct ProxyConfig {
    /// Where the cluster's routes come from.
    pub nameservers: Vec<String>,
    /// How the endpoint reaches the nameservers and brokers (TLS if they serve it).
    pub client_tls: Option<ClientTls>,
    /// TLS on the endpoint's own port; none: plain HTTP/2.
    pub server_tls: Option<ServerTlsConfig>,
    pub connections_max: usize,
    pub streams_per_connection_max: u32,
    /// How far ahead a DELAY message may be delivered (the brokers' `timer_max_delay_ms`).
    pub timer_max_delay_ms: u64,
    /// Who may call (5.x access keys); none configured: anyone.
    pub access_keys: AccessKeys,
    /// How long a consumer leaves a message it failed to consume invisible, by attempt (the
    /// brokers' delay levels, as RocketMQ's groups retry).
    pub consumer_retry_delays: Vec<Duration>,
    /// How long a push consumer's delivery is invisible at a time while this endpoint renews
    /// it (RocketMQ's proxy: 60 s).
    pub auto_renew_invisible: Duration,
}

/// A running endpoint.
pub struct Proxy {
    addr: SocketAddr,
    shutdown: CancellationToken,
    serving: Serving,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the endpoint's producer: {0}")]
    Producer(#[from] ProducerError),
    #[error("the endpoint's listener: {0}")]
    Listener(#[from] std::io::Error),
    #[error("the endpoint's TLS settings: {0}")]
    Tls(#[from] tonic::transport::Error),
}

impl Proxy {
    /// Serves on an already bound listener until [`Proxy::shutdown`].
    pub fn start_on(listener: TcpListener, config: ProxyConfig) -> Result<Proxy, ProxyError> {
        let addr = listener.local_addr()?;
        let clients = Arc::new(Clients::default());
        let mut producer = Producer::builder(config.nameservers.clone(), PRODUCER_GROUP)
            .transaction_checker(ForwardChecks {
                clients: clients.clone(),
            });
        if let Some(tls) = config.client_tls {
            producer = producer.tls(tls);
        }
        let producer = producer.build()?;
        // Pops and acks reach the leaders the sends found: one route cache, one leader view.
        let brokers = producer.brokers().clone();
        let shutdown = CancellationToken::new();
        let renewals = Arc::new(Renewals::new(config.auto_renew_invisible));
        tokio::spawn({
            let renewals = renewals.clone();
            let (brokers, clients, shutdown) = (brokers.clone(), clients.clone(), shutdown.clone());
            async move { renewals.run(brokers, clients, shutdown).await }
        });
        let service = Service {
            producer,
            brokers,
            clients,
            timer_max_delay_ms: config.timer_max_delay_ms,
            access_keys: config.access_keys,
            consumer_retry_delays: config.consumer_retry_delays.into(),
            renewals,
            shutdown: shutdown.clone(),
        };
        let mut builder = tonic::transport::Server::builder()
            .max_concurrent_streams(config.streams_per_connection_max)
            .max_frame_size(HTTP2_FRAME_BYTES_MAX);
        if let Some(tls) = config.server_tls {
            builder = builder.tls_config(tls)?;
        }
        let router = builder.add_service(
            MessagingServiceServer::new(service).max_decoding_message_size(V5_REQUEST_BYTES_MAX),
        );
        let serving = Serving::spawn(router, listener, config.connections_max, &shutdown);
        tracing::info!(%addr, "RocketMQ 5.x gRPC endpoint serving");
        Ok(Proxy {
            addr,
            shutdown,
            serving,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving: open calls get the nameserver's grace period, then are cut.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.serving.stop().await;
    }
}
