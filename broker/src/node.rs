//! One broker node: opens its store and Raft log, starts Raft, and serves the broker API and
//! the Raft service on one gRPC port until shut down.
//!
//! Start order matters: the state machine must cut the store back to its checkpoint before
//! Raft replays the log into it, and the listener is bound before Raft starts so peers can
//! reach a node as soon as it can vote.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rocketraft_domain::clock::Clock;
use rocketraft_domain::limits::HTTP2_FRAME_BYTES_MAX;
use rocketraft_domain::limits::SEND_REQUEST_BYTES_MAX;
use rocketraft_proto::broker::broker_server::BrokerServer;
use rocketraft_server_kit::graceful_stop::Serving;
use rocketraft_server_kit::side_protocol::SideProtocol;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::ServerTlsConfig;
use tonic::transport::server::Router;

use crate::config::BrokerConfig;
use crate::consumer_registry::ConsumerRegistry;
use crate::consumer_registry::run_consumer_registry;
use crate::data_dir_lock::DataDirLock;
use crate::disk::OsDisk;
use crate::group_state::GroupState;
use crate::metrics::BrokerMetrics;
use crate::queue_locks::QueueLocks;
use crate::queue_locks::run_queue_locks;
use crate::raft::control::compaction::CompactionError;
use crate::raft::control::compaction::CompactionPolicy;
use crate::raft::control::compaction::compact_log;
use crate::raft::control::compaction::run_compaction;
use crate::raft::control::lease::Leadership;
use crate::raft::control::lease::run_leadership_watch;
use crate::raft::control::membership::PeerAddrs;
use crate::raft::control::role::on_every_role_change;
use crate::raft::control::setup::bootstrap;
use crate::raft::control::setup::start_raft;
use crate::raft::log::boot_check;
use crate::raft::log::repair;
use crate::raft::log::repair::RepairMark;
use crate::raft::log::repair::RepairState;
use crate::raft::log::repair::run_repair;
use crate::raft::log::store::LogReader;
use crate::raft::log::store::LogSize;
use crate::raft::log::store::LogStore;
use crate::raft::log::store::LogStoreConfig;
use crate::raft::log::store::release_idle_entry_cache;
use crate::raft::transport::append_route::RaftRoutes;
use crate::raft::transport::faults::FaultPlan;
use crate::raft::transport::network::RAFT_GRPC_MESSAGE_BYTES_MAX;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::transport::service::RaftService;
use crate::raft::types::LogId;
use crate::raft::types::NodeId;
use crate::raft::types::Raft;
use crate::registration::Identity;
use crate::registration::run_registration;
use crate::retention::run_retention;
use crate::schedule::delay_levels::DelayLevels;
use crate::schedule::service::ScheduleStatus;
use crate::schedule::service::run_schedule_service;
use crate::scrub::ScrubOptions;
use crate::scrub::ScrubStatus;
use crate::scrub::run_scrub;
use crate::service::BrokerService;
use crate::service::ServiceOptions;
use crate::service::blackhole::BlackholeRoutes;
use crate::state_machine::CHECKPOINT_INTERVAL_DEFAULT;
use crate::state_machine::StateMachine;
use crate::state_machine::StoreLostFlushedData;
use crate::store::MessageStore;
use crate::tls::NodeTls;
use crate::tls::PeerConnector;
use crate::tls::TlsFileError;
use crate::topic::AUTO_CREATED_QUEUE_COUNT;
use crate::transaction::checks::TransactionChecks;
use rocketraft_server_kit::metrics_endpoint::serve_metrics;

/// A node failed to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    DataDir(#[from] crate::data_dir_lock::LockError),
    #[error("open store under {dir}")]
    Store {
        dir: PathBuf,
        #[source]
        source: crate::store::StoreError,
    },
    #[error("open raft state under {dir}")]
    RaftState {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bind {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("start raft")]
    Raft(#[from] crate::raft::control::setup::SetupError),
    #[error(transparent)]
    TlsFile(#[from] TlsFileError),
    #[error("configure TLS")]
    Tls(#[source] tonic::transport::Error),
    /// Local state is damaged and no other node of the group holds it.
    #[error("cannot repair this node: {0}")]
    Unrepairable(String),
}

/// How often a shutdown still waiting for the node's tasks says so.
const TASKS_STOP_WARN_EVERY: Duration = Duration::from_secs(5);

pub struct BrokerNode {
    node_id: NodeId,
    addr: SocketAddr,
    raft_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    raft: Raft,
    group: Arc<GroupState>,
    shutdown: CancellationToken,
    /// The broker API's server, and the Raft service's when it has a port of its own; once
    /// they are stopped no call of this node still runs.
    servers: Vec<Serving>,
    /// Every other task the node runs (registration, retention, scrub, repair, compaction,
    /// the schedule service, the registries, metrics): each ends with `shutdown` or with
    /// Raft, and `shutdown` awaits them all.
    tasks: TaskTracker,
    /// Held while the node runs, so no other node opens its data dir meanwhile; declared
    /// last, so it is released after everything else the node owns is dropped.
    _data_dir_lock: DataDirLock,
}

/// Options a test or the dev cluster sets that an operator's config does not carry.
#[derive(Default)]
pub struct NodeOptions {
    /// Fault injection on this node's outgoing Raft RPCs.
    pub faults: Option<Arc<FaultPlan>>,
    /// The time the node's business logic reads: the system's, or a test's manual clock.
    pub clock: Clock,
    /// A protocol served beside the broker API on its port, told apart by a connection's
    /// first byte (RocketMQ 4.x remoting, wired by the composition root). Served only while
    /// the port is in plain text: it has no TLS of its own.
    pub side_protocol: Option<SideProtocol>,
}

/// The sockets a node serves on, bound before it starts (tests bind port 0 first to learn
/// the peers' addresses).
pub struct Listeners {
    /// The broker API, and Raft when `raft` is `None`.
    pub api: TcpListener,
    /// The Raft service, for a node with a `raft_listen`.
    pub raft: Option<TcpListener>,
}

impl Listeners {
    /// Binds `listen` and, if set, `raft_listen` of `config`.
    pub async fn bind(config: &BrokerConfig) -> Result<Listeners, StartError> {
        Ok(Listeners {
            api: bind(config.listen).await?,
            raft: match config.raft_listen {
                Some(addr) => Some(bind(addr).await?),
                None => None,
            },
        })
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

impl BrokerNode {
    /// Starts a node listening on `config.listen` (and `config.raft_listen`).
    pub async fn start(
        config: BrokerConfig,
        options: NodeOptions,
    ) -> Result<BrokerNode, StartError> {
        let listeners = Listeners::bind(&config).await?;
        BrokerNode::start_on(config, listeners, options).await
    }

    /// Starts a node on already bound listeners, one for Raft exactly when the config has a
    /// `raft_listen`, in four phases: open (lock the data dir, open the store and the Raft
    /// log, start Raft), share (what the services and tasks share), serve (the broker API and
    /// Raft), then spawn (every background task, tracked). Raft starts before the servers so
    /// that a peer reaching the node finds it ready; the listeners were bound before, so
    /// peers can connect as soon as the node can vote.
    pub async fn start_on(
        config: BrokerConfig,
        listeners: Listeners,
        options: NodeOptions,
    ) -> Result<BrokerNode, StartError> {
        config.validate()?;
        if listeners.raft.is_some() != config.raft_listen.is_some() {
            return Err(StartError::Config(crate::config::ConfigError::new(
                "raft_listen",
                "a node with a raft_listen is started with a Raft listener, and only then",
            )));
        }
        crate::topic::warn_if_mappings_short();
        let clock = options.clock.clone();
        let side_protocol = options.side_protocol.clone();
        let opened = open(&config, &listeners, options).await?;
        let shared = share(&config, &opened, clock)?;
        let served = serve(&config, listeners, &opened, &shared, side_protocol).await?;
        if config.bootstrap {
            bootstrap(&opened.raft, &opened.peers)
                .await
                .map_err(StartError::Raft)?;
        }
        spawn(&config, &opened, &shared);
        let Opened {
            data_dir_lock,
            addr,
            raft_addr,
            raft,
            group,
            ..
        } = opened;
        tracing::info!(node_id = config.node_id, group = %config.group, %addr, %raft_addr, "broker node started");
        Ok(BrokerNode {
            node_id: config.node_id,
            addr,
            raft_addr,
            metrics_addr: served.metrics_addr,
            raft,
            group,
            shutdown: shared.shutdown,
            servers: served.servers,
            tasks: shared.tasks,
            _data_dir_lock: data_dir_lock,
        })
    }

    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Where the broker API is served.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the Raft service is served: [`Self::addr`] unless the node has a `raft_listen`.
    pub fn raft_addr(&self) -> SocketAddr {
        self.raft_addr
    }

    /// Where `/metrics` is served, if `metrics_listen` was set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    pub fn group(&self) -> &Arc<GroupState> {
        &self.group
    }

    #[cfg(test)]
    pub(crate) fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Takes a snapshot and purges the whole Raft log behind it, as compaction does with
    /// a retained tail; returns the index purged up to. A follower that needs a purged
    /// entry is sent the snapshot.
    pub async fn snapshot_and_purge(
        &self,
        timeout: Duration,
    ) -> Result<Option<u64>, CompactionError> {
        compact_log(&self.raft, |snapshot| snapshot, timeout).await
    }

    /// Stops serving, stops Raft and flushes nothing more: what was acknowledged is already
    /// durable, the rest is replayed from the Raft log at the next start. Returns once every
    /// task of the node has ended, so the data dir is unlocked only when nothing of this node
    /// still touches it (a node started on it next finds it as this one left it).
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
        futures::future::join_all(self.servers.into_iter().map(Serving::stop)).await;
        self.tasks.close();
        let group = self.group.clone();
        let finished = async move {
            self.tasks.wait().await;
            group.background_finished().await;
        };
        tokio::pin!(finished);
        while tokio::time::timeout(TASKS_STOP_WARN_EVERY, &mut finished)
            .await
            .is_err()
        {
            tracing::warn!(
                node_id = self.node_id,
                "node tasks or a snapshot build still running after shutdown; the data dir \
                 stays locked until they end"
            );
        }
        tracing::info!(node_id = self.node_id, "broker node stopped");
    }
}

/// Phase 1 of a start: the node's own state, locked, opened and with Raft running over it.
struct Opened {
    /// Cancelled by `shutdown`: Raft sends nothing more, and every task and server of the
    /// node ends on it.
    shutdown: CancellationToken,
    /// Held from here on: no other node opens this data dir meanwhile.
    data_dir_lock: DataDirLock,
    /// Where the broker API and Raft are served.
    addr: SocketAddr,
    raft_addr: SocketAddr,
    /// The group's nodes as configured.
    peers: BTreeMap<NodeId, NodeAddr>,
    tls: Option<NodeTls>,
    /// How this node reaches its peers and the nameservers.
    peer_connector: PeerConnector,
    /// The node's own fault plan, when drills may inject faults (`enable_fault_injection`).
    drill_faults: Option<Arc<FaultPlan>>,
    /// The faults on this node's outgoing Raft calls: a test's plan, or the drill's.
    faults: Option<Arc<FaultPlan>>,
    raft: Raft,
    group: Arc<GroupState>,
    repair: Arc<RepairState>,
    log: LogReader,
    log_size: LogSize,
}

/// Locks the data dir, opens the store and the Raft log (repairing what it may), and starts
/// Raft.
async fn open(
    config: &BrokerConfig,
    listeners: &Listeners,
    options: NodeOptions,
) -> Result<Opened, StartError> {
    let tls = config.tls.as_ref().map(NodeTls::load).transpose()?;
    let peer_connector = PeerConnector::new(tls.as_ref());
    let data_dir_lock = DataDirLock::acquire(&config.data_dir)?;
    let peers = config.peer_map()?;
    let local_addr = |listener: &TcpListener, configured| {
        listener.local_addr().map_err(|source| StartError::Bind {
            addr: configured,
            source,
        })
    };
    let addr = local_addr(&listeners.api, config.listen)?;
    let raft_addr = match (&listeners.raft, config.raft_listen) {
        (Some(listener), Some(configured)) => local_addr(listener, configured)?,
        _ => addr,
    };
    // A drill node gets a plan of its own, driven by `InjectFault`.
    let drill_faults = config
        .enable_fault_injection
        .then(|| Arc::new(FaultPlan::new(config.node_id)));
    let faults = options.faults.or_else(|| drill_faults.clone());
    let shutdown = CancellationToken::new();
    let OpenedRaft {
        raft,
        group,
        pending_repair,
        after_reboot,
        log,
        log_size,
    } = open_raft(config, faults.clone(), peer_connector.clone(), &shutdown).await?;
    let repair = RepairState::new(pending_repair, after_reboot.then(|| config.flush_mode()));
    Ok(Opened {
        shutdown,
        data_dir_lock,
        addr,
        raft_addr,
        peers,
        tls,
        peer_connector,
        drill_faults,
        faults,
        raft,
        group,
        repair,
        log,
        log_size,
    })
}

/// Phase 2: what the node's services and background tasks share.
struct Shared {
    /// [`Opened::shutdown`].
    shutdown: CancellationToken,
    /// Every task the node runs, awaited by `shutdown` before the data dir is unlocked.
    tasks: TaskTracker,
    consumers: Arc<ConsumerRegistry>,
    queue_locks: Arc<QueueLocks>,
    transaction_checks: Arc<TransactionChecks>,
    delay_levels: DelayLevels,
    schedule_status: Arc<ScheduleStatus>,
    scrub_status: Arc<ScrubStatus>,
    metrics: Arc<BrokerMetrics>,
    /// Whether this node leads with a live quorum: set by the leadership watch, read by the
    /// broker API (held pulls end when the node is cut off).
    leadership: watch::Sender<Leadership>,
    clock: Clock,
}

fn share(config: &BrokerConfig, opened: &Opened, clock: Clock) -> Result<Shared, StartError> {
    Ok(Shared {
        shutdown: opened.shutdown.clone(),
        tasks: TaskTracker::new(),
        consumers: Arc::new(ConsumerRegistry::default()),
        queue_locks: Arc::new(QueueLocks::new(Duration::from_millis(
            config.queue_lock_expiry_ms,
        ))),
        transaction_checks: Arc::new(TransactionChecks::default()),
        delay_levels: config.parsed_delay_levels()?,
        schedule_status: Arc::new(ScheduleStatus::default()),
        scrub_status: Arc::new(ScrubStatus::new(opened.group.store().suspects().clone())),
        metrics: Arc::new(BrokerMetrics::default()),
        leadership: watch::channel(Leadership::NotLeading).0,
        clock,
    })
}

/// Phase 3: the servers running.
struct Served {
    /// The broker API's server, and the Raft service's when it has a port of its own.
    servers: Vec<Serving>,
    metrics_addr: Option<SocketAddr>,
}

/// Serves the broker API and the Raft service on the node's listeners, and `/metrics` if
/// configured.
async fn serve(
    config: &BrokerConfig,
    listeners: Listeners,
    opened: &Opened,
    shared: &Shared,
    side_protocol: Option<SideProtocol>,
) -> Result<Served, StartError> {
    let metrics_addr = match config.metrics_listen {
        Some(metrics_listen) => Some(serve_metrics_on(metrics_listen, opened, shared).await?),
        None => None,
    };
    let broker = BrokerService::new(
        opened.raft.clone(),
        opened.group.clone(),
        ServiceOptions {
            group_name: config.group.clone(),
            store_host: opened.addr,
            auto_create_topic: config.auto_create_topic,
            auto_create_group: config.auto_create_group,
            delay_levels: shared.delay_levels.clone(),
            timer_max_delay: Duration::from_millis(config.timer_max_delay_ms),
            consumers: shared.consumers.clone(),
            queue_locks: shared.queue_locks.clone(),
            transaction_checks: shared.transaction_checks.clone(),
            schedule: shared.schedule_status.clone(),
            fault_injection: opened.drill_faults.clone(),
            repair: opened.repair.clone(),
            pull_holds_max: config.pull_holds_max,
            scrub: shared.scrub_status.clone(),
            admin_token: config.admin_token.clone(),
            leadership: shared.leadership.subscribe(),
            metrics: shared.metrics.clone(),
            tasks: shared.tasks.clone(),
            clock: shared.clock.clone(),
        },
    );
    let raft_service = RaftService::new(
        opened.raft.clone(),
        opened.group.clone(),
        config.data_dir.join("raft").join("staging"),
        shared.shutdown.clone(),
        opened.faults.clone().map(|faults| (config.node_id, faults)),
        opened.repair.clone(),
    );
    let broker = BrokerServer::new(broker)
        // The largest legal broker request is a full `Send`; pull responses stay below
        // the pull budget plus one message, far under the encoding limit.
        .max_decoding_message_size(SEND_REQUEST_BYTES_MAX)
        .max_encoding_message_size(RAFT_GRPC_MESSAGE_BYTES_MAX);
    let broker = BlackholeRoutes::new(
        broker,
        opened
            .drill_faults
            .clone()
            .map(|faults| (config.node_id, faults)),
    );
    let raft_service = RaftRoutes::new(
        raft_service,
        RAFT_GRPC_MESSAGE_BYTES_MAX,
        config.store.commit_log_segment_bytes,
    );
    let serve = |router: Router, listener: TcpListener, side: Option<SideProtocol>| {
        Serving::spawn_with(
            router,
            listener,
            config.connections_max,
            &shared.shutdown,
            side,
        )
    };
    let tls = opened.tls.as_ref();
    // Plain-text requests must not get past the TLS the operator set.
    let api_side = match (side_protocol, tls) {
        (Some(side), Some(_)) => {
            tracing::info!(
                protocol = side.name,
                "not served: it has no TLS, and this port has"
            );
            None
        }
        (side, _) => side,
    };
    let server = |tls: Option<ServerTlsConfig>| {
        let builder = tonic::transport::Server::builder()
            .max_concurrent_streams(config.streams_per_connection_max)
            .max_frame_size(HTTP2_FRAME_BYTES_MAX);
        match tls {
            Some(tls) => builder.tls_config(tls).map_err(StartError::Tls),
            None => Ok(builder),
        }
    };
    let servers = match listeners.raft {
        // Raft on a port of its own: the broker API's port answers `UNIMPLEMENTED` to every
        // Raft call.
        Some(raft_listener) => vec![
            serve(
                server(tls.map(NodeTls::api_server))?.add_service(broker),
                listeners.api,
                api_side,
            ),
            serve(
                server(tls.map(NodeTls::raft_server))?.add_service(raft_service),
                raft_listener,
                None,
            ),
        ],
        // Validated: TLS needs a `raft_listen`.
        None => vec![serve(
            server(None)?.add_service(broker).add_service(raft_service),
            listeners.api,
            api_side,
        )],
    };
    Ok(Served {
        servers,
        metrics_addr,
    })
}

/// Serves `/metrics` on `listen` as a tracked task; returns the address bound.
async fn serve_metrics_on(
    listen: SocketAddr,
    opened: &Opened,
    shared: &Shared,
) -> Result<SocketAddr, StartError> {
    let bind_error = |source| StartError::Bind {
        addr: listen,
        source,
    };
    let listener = TcpListener::bind(listen).await.map_err(bind_error)?;
    let metrics_addr = listener.local_addr().map_err(bind_error)?;
    let (metrics, raft, group) = (
        shared.metrics.clone(),
        opened.raft.clone(),
        opened.group.clone(),
    );
    let log_size = opened.log_size.clone();
    shared.tasks.spawn(serve_metrics(
        listener,
        Arc::new(move || metrics.render(&raft, &log_size, &group)),
        shared.shutdown.clone(),
    ));
    tracing::info!(%metrics_addr, "metrics endpoint serving /metrics");
    Ok(metrics_addr)
}

/// Phase 4: every background task of the node, tracked, each ending with the node's
/// shutdown or with Raft.
fn spawn(config: &BrokerConfig, opened: &Opened, shared: &Shared) {
    let (tasks, shutdown) = (&shared.tasks, &shared.shutdown);
    let (raft, group) = (&opened.raft, &opened.group);
    tasks.spawn(release_idle_entry_cache(
        opened.log.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(run_consumer_registry(
        raft.clone(),
        shared.consumers.clone(),
        Duration::from_millis(config.client_expiry_ms),
        shutdown.clone(),
    ));
    tasks.spawn(crate::throughput::run_sampling(
        shared.metrics.throughput().clone(),
        shutdown.clone(),
    ));
    tasks.spawn(run_queue_locks(
        raft.clone(),
        shared.queue_locks.clone(),
        shared.clock.clone(),
    ));
    let checks = shared.transaction_checks.clone();
    tasks.spawn(on_every_role_change(raft.clone(), move || checks.reset()));
    tasks.spawn(run_leadership_watch(
        raft.clone(),
        Duration::from_millis(config.raft.election_timeout_max_ms),
        shared.leadership.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(run_schedule_service(
        raft.clone(),
        group.clone(),
        shared.delay_levels.clone(),
        (
            config.transaction_checks(),
            shared.transaction_checks.clone(),
        ),
        shared.schedule_status.clone(),
        shared.clock.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(run_compaction(
        raft.clone(),
        CompactionPolicy {
            interval: Duration::from_millis(config.raft.log_compaction_interval_ms),
            growth_bytes: config.raft.log_compaction_growth_bytes,
            retained: config.raft.log_retained_entries,
            retained_bytes: config.raft.log_retained_bytes,
        },
        opened.log.clone(),
        opened.log_size.clone(),
        shutdown.clone(),
    ));
    // The addresses of the group's other nodes.
    let other_nodes = PeerAddrs::new(
        raft.clone(),
        opened
            .peers
            .iter()
            .filter(|(id, _)| **id != config.node_id)
            .map(|(_, addr)| addr.clone())
            .collect(),
        opened.peer_connector.clone(),
    );
    tasks.spawn(run_scrub(
        group.clone(),
        other_nodes.clone(),
        ScrubOptions {
            bytes_per_sec: config.scrub_bytes_per_sec,
            pass_interval: Duration::from_millis(config.scrub_pass_interval_ms),
        },
        shared.scrub_status.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(run_retention(
        group.clone(),
        config.data_dir.clone(),
        config.retention.clone(),
        shared.metrics.clone(),
        shutdown.clone(),
    ));
    tasks.spawn(run_repair(
        raft.clone(),
        opened.repair.clone(),
        config.data_dir.join("raft").join("log"),
        config.node_id,
        other_nodes,
        config.admin_token.clone(),
        shutdown.clone(),
    ));
    if !config.namesrv.is_empty() {
        let identity = Identity {
            cluster: config.cluster.clone(),
            group: config.group.clone(),
            node_id: config.node_id,
            // The address clients reach this node at.
            addr: opened
                .peers
                .get(&config.node_id)
                .map_or_else(|| opened.addr.to_string(), |own| own.api.clone()),
            auto_create_queue_count: if config.auto_create_topic {
                AUTO_CREATED_QUEUE_COUNT
            } else {
                0
            },
            cluster_secret: config.cluster_secret.clone(),
            // With TLS, the nameservers too are verified against the group's CA.
            connector: opened.peer_connector.clone(),
            fault_injection: opened.drill_faults.clone(),
        };
        tasks.spawn(run_registration(
            raft.clone(),
            group.clone(),
            shared.schedule_status.clone(),
            identity,
            config.namesrv.clone(),
            Duration::from_millis(config.register_interval_ms),
            shutdown.clone(),
        ));
    }
}

/// Raft started over the node's store and log.
struct OpenedRaft {
    raft: Raft,
    group: Arc<GroupState>,
    /// The repair the Raft log needs, if it was found damaged (now or at an earlier start).
    pending_repair: Option<RepairMark>,
    /// The machine restarted since the log was written with `flush = async`.
    after_reboot: bool,
    /// A reader of the Raft log, for tasks beside Raft.
    log: LogReader,
    log_size: LogSize,
}

/// Opens the store and the Raft log and starts Raft.
async fn open_raft(
    config: &BrokerConfig,
    faults: Option<Arc<FaultPlan>>,
    peer_connector: PeerConnector,
    stopped: &CancellationToken,
) -> Result<OpenedRaft, StartError> {
    let raft_dir = config.data_dir.join("raft");
    let raft_error = |source| StartError::RaftState {
        dir: raft_dir.clone(),
        source,
    };
    let (mut state_machine, group) = match open_state(config, &raft_dir) {
        Err(StartError::RaftState { source, dir }) => {
            let Some(lost) = StoreLostFlushedData::in_error(&source) else {
                return Err(StartError::RaftState { source, dir });
            };
            if !has_other_nodes(config)? {
                return Err(StartError::Unrepairable(format!(
                    "{lost}, and the group has no other node to rebuild it from"
                )));
            }
            tracing::error!(
                error = %lost,
                "the store is damaged: setting it aside and rebuilding this node from its group"
            );
            let last_log_index = open_log_store(config, &raft_dir.join("log"), None)
                .and_then(|log| log.last_index())
                .map_err(raft_error)?;
            let up_to_index = last_log_index.max(lost.applied_index).unwrap_or(0);
            let node_state = repair::NodeState {
                data_dir: &config.data_dir,
                store_dir: &config.store_config().dir,
                state_dir: &raft_dir.join("state"),
                log_disk: &OsDisk,
                log_dir: &raft_dir.join("log"),
            };
            let aside =
                repair::set_aside_for_rebuild(&node_state, up_to_index).map_err(raft_error)?;
            tracing::warn!(aside = %aside.display(), up_to_index, "damaged state set aside");
            open_state(config, &raft_dir)?
        }
        opened => opened?,
    };
    let log_dir = raft_dir.join("log");
    let log_store = open_log_store(
        config,
        &log_dir,
        state_machine.snapshot_last_log_id().map_err(raft_error)?,
    )
    .map_err(raft_error)?;
    state_machine
        .snapshot_over_log_gap(log_store.last_index().map_err(raft_error)?)
        .await
        .map_err(raft_error)?;
    let pending_repair = repair::load(&OsDisk, &log_dir).map_err(raft_error)?;
    let boot_id = boot_check::current_boot_id();
    let after_reboot =
        boot_check::rebooted_since_async_write(&OsDisk, &log_dir, boot_id.as_deref())
            .map_err(raft_error)?;
    if !after_reboot {
        boot_check::settle(&OsDisk, &log_dir, config.flush_mode(), boot_id.as_deref())
            .map_err(raft_error)?;
    }
    if let Some(mark) = &pending_repair
        && !has_other_nodes(config)?
    {
        return Err(StartError::Unrepairable(format!(
            "the raft log lost entries {} to {}, and the group has no other node to re-fetch \
             them from",
            mark.cut_at_index, mark.up_to_index
        )));
    }
    // A node repairing its log must not stand for election, not even before the repair
    // task starts.
    let may_elect = pending_repair.is_none() && !after_reboot;
    let log = log_store.reader();
    let log_size = log.size().map_err(raft_error)?;
    let raft = start_raft(
        config,
        log_store,
        state_machine,
        faults,
        peer_connector,
        may_elect,
        stopped.clone(),
    )
    .await
    .map_err(StartError::Raft)?;
    Ok(OpenedRaft {
        raft,
        group,
        pending_repair,
        after_reboot,
        log,
        log_size,
    })
}

/// Whether the group has a node other than this one to repair it from.
fn has_other_nodes(config: &BrokerConfig) -> Result<bool, StartError> {
    Ok(config.peer_map()?.keys().any(|id| *id != config.node_id))
}

/// Opens the message store and the state machine over it.
fn open_state(
    config: &BrokerConfig,
    raft_dir: &std::path::Path,
) -> Result<(StateMachine, Arc<GroupState>), StartError> {
    let store_config = config.store_config();
    let (store, _report) =
        MessageStore::open(store_config.clone()).map_err(|source| StartError::Store {
            dir: store_config.dir.clone(),
            source,
        })?;
    let (state_machine, group) =
        StateMachine::open(&raft_dir.join("state"), store, CHECKPOINT_INTERVAL_DEFAULT).map_err(
            |source| StartError::RaftState {
                dir: raft_dir.to_path_buf(),
                source,
            },
        )?;
    let lag = config.flush_mode().durability_lag();
    Ok((state_machine.with_durability_lag(lag), group))
}

/// Opens the node's Raft log; `snapshot` is the last entry of the node's durable snapshot,
/// where the log counts as purged if its purge mark is found damaged.
fn open_log_store(
    config: &BrokerConfig,
    log_dir: &std::path::Path,
    snapshot: Option<LogId>,
) -> std::io::Result<LogStore> {
    LogStore::open(LogStoreConfig {
        disk: OsDisk::shared(),
        dir: log_dir.to_path_buf(),
        segment_size_bytes: config.store.raft_log_segment_bytes,
        flush: config.flush_mode(),
        purged_if_mark_damaged: snapshot,
    })
}
