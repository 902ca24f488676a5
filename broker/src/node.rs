//! One broker node: opens its store and Raft log, starts Raft, and serves the broker API and
//! the Raft service on one gRPC port until shut down.
//!
//! Start order matters: the state machine must cut the store back to its checkpoint before
//! Raft replays the log into it, and the listener is bound before Raft starts so peers can
//! reach a node as soon as it can vote.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rocketraft_domain::limits::HTTP2_FRAME_BYTES_MAX;
use rocketraft_domain::limits::SEND_REQUEST_BYTES_MAX;
use rocketraft_proto::broker::broker_server::BrokerServer;
use rocketraft_server_kit::connection_limit::serve_connections;
use rocketraft_server_kit::graceful_stop::stop_serving;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
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
use crate::raft::transport::service::RaftService;
use crate::raft::types::LogId;
use crate::raft::types::NodeId;
use crate::raft::types::Raft;
use crate::registration::Identity;
use crate::registration::run_registration;
use crate::retention::run_retention;
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
    /// The broker API's server, and the Raft service's when it has a port of its own.
    servers: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
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
    /// `raft_listen`.
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
        let raft_log_dir = config.data_dir.join("raft").join("log");
        let OpenedRaft {
            raft,
            group,
            pending_repair,
            after_reboot,
            log,
            log_size,
        } = open_raft(&config, faults.clone(), peer_connector.clone()).await?;
        let repair = RepairState::new(pending_repair, after_reboot.then(|| config.flush_mode()));
        let shutdown = CancellationToken::new();
        // Every task the node runs, awaited by `shutdown` before the data dir is unlocked.
        let tasks = TaskTracker::new();
        tasks.spawn(release_idle_entry_cache(log.clone(), shutdown.clone()));
        let consumers = Arc::new(ConsumerRegistry::default());
        tasks.spawn(run_consumer_registry(
            raft.clone(),
            consumers.clone(),
            Duration::from_millis(config.client_expiry_ms),
            shutdown.clone(),
        ));
        let queue_locks = Arc::new(QueueLocks::new(Duration::from_millis(
            config.queue_lock_expiry_ms,
        )));
        tasks.spawn(run_queue_locks(raft.clone(), queue_locks.clone()));
        let transaction_checks = Arc::new(TransactionChecks::default());
        let checks = transaction_checks.clone();
        tasks.spawn(on_every_role_change(raft.clone(), move || checks.reset()));
        let delay_levels = config.parsed_delay_levels()?;
        let schedule_status = Arc::new(ScheduleStatus::default());
        let scrub_status = Arc::new(ScrubStatus::new(group.store().suspects().clone()));
        let metrics = Arc::new(BrokerMetrics::default());
        let metrics_addr = match config.metrics_listen {
            Some(metrics_listen) => {
                let listener =
                    TcpListener::bind(metrics_listen)
                        .await
                        .map_err(|source| StartError::Bind {
                            addr: metrics_listen,
                            source,
                        })?;
                let metrics_addr = listener.local_addr().map_err(|source| StartError::Bind {
                    addr: metrics_listen,
                    source,
                })?;
                let (metrics, raft, group) = (metrics.clone(), raft.clone(), group.clone());
                let log_size = log_size.clone();
                tasks.spawn(serve_metrics(
                    listener,
                    Arc::new(move || metrics.render(&raft, &log_size, &group)),
                    shutdown.clone(),
                ));
                tracing::info!(%metrics_addr, "metrics endpoint serving /metrics");
                Some(metrics_addr)
            }
            None => None,
        };
        let (leadership, leadership_watch) = tokio::sync::watch::channel(Leadership::NotLeading);
        tasks.spawn(run_leadership_watch(
            raft.clone(),
            Duration::from_millis(config.raft.election_timeout_max_ms),
            leadership,
            shutdown.clone(),
        ));
        tasks.spawn(run_schedule_service(
            raft.clone(),
            group.clone(),
            delay_levels.clone(),
            (config.transaction_checks(), transaction_checks.clone()),
            schedule_status.clone(),
            shutdown.clone(),
        ));
        let broker = BrokerService::new(
            raft.clone(),
            group.clone(),
            ServiceOptions {
                group_name: config.group.clone(),
                store_host: addr,
                auto_create_topic: config.auto_create_topic,
                auto_create_group: config.auto_create_group,
                delay_levels,
                timer_max_delay: Duration::from_millis(config.timer_max_delay_ms),
                consumers,
                queue_locks,
                transaction_checks: transaction_checks.clone(),
                schedule: schedule_status.clone(),
                fault_injection: drill_faults.clone(),
                repair: repair.clone(),
                pull_holds_max: config.pull_holds_max,
                scrub: scrub_status.clone(),
                admin_token: config.admin_token.clone(),
                leadership: leadership_watch,
                metrics: metrics.clone(),
            },
        );
        let raft_service = RaftService::new(
            raft.clone(),
            group.clone(),
            config.data_dir.join("raft").join("staging"),
            shutdown.clone(),
            faults.map(|faults| (config.node_id, faults)),
            repair.clone(),
        );
        let broker = BrokerServer::new(broker)
            // The largest legal broker request is a full `Send`; pull responses stay below
            // the pull budget plus one message, far under the encoding limit.
            .max_decoding_message_size(SEND_REQUEST_BYTES_MAX)
            .max_encoding_message_size(RAFT_GRPC_MESSAGE_BYTES_MAX);
        let broker = BlackholeRoutes::new(
            broker,
            drill_faults.clone().map(|faults| (config.node_id, faults)),
        );
        let raft_service = RaftRoutes::new(
            raft_service,
            RAFT_GRPC_MESSAGE_BYTES_MAX,
            config.store.commit_log_segment_bytes,
        );
        let serve = |router: Router, listener: TcpListener| {
            tokio::spawn(router.serve_with_incoming_shutdown(
                serve_connections(listener, config.connections_max),
                shutdown.clone().cancelled_owned(),
            ))
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
            // Raft on a port of its own: the broker API's port answers `UNIMPLEMENTED` to
            // every Raft call.
            Some(raft_listener) => vec![
                serve(
                    server(tls.as_ref().map(NodeTls::api_server))?.add_service(broker),
                    listeners.api,
                ),
                serve(
                    server(tls.as_ref().map(NodeTls::raft_server))?.add_service(raft_service),
                    raft_listener,
                ),
            ],
            // Validated: TLS needs a `raft_listen`.
            None => vec![serve(
                server(None)?.add_service(broker).add_service(raft_service),
                listeners.api,
            )],
        };
        tasks.spawn(run_compaction(
            raft.clone(),
            CompactionPolicy {
                interval: Duration::from_millis(config.raft.log_compaction_interval_ms),
                growth_bytes: config.raft.log_compaction_growth_bytes,
                retained: config.raft.log_retained_entries,
                retained_bytes: config.raft.log_retained_bytes,
            },
            log.clone(),
            log_size,
            shutdown.clone(),
        ));
        if config.bootstrap {
            bootstrap(&raft, &peers).await.map_err(StartError::Raft)?;
        }
        // The addresses of the group's other nodes.
        let other_nodes = PeerAddrs::new(
            raft.clone(),
            peers
                .iter()
                .filter(|(id, _)| **id != config.node_id)
                .map(|(_, addr)| addr.clone())
                .collect(),
            peer_connector.clone(),
        );
        tasks.spawn(run_scrub(
            group.clone(),
            other_nodes.clone(),
            ScrubOptions {
                bytes_per_sec: config.scrub_bytes_per_sec,
                pass_interval: Duration::from_millis(config.scrub_pass_interval_ms),
            },
            scrub_status,
            shutdown.clone(),
        ));
        tasks.spawn(run_retention(
            group.clone(),
            config.data_dir.clone(),
            config.retention.clone(),
            metrics,
            shutdown.clone(),
        ));
        tasks.spawn(run_repair(
            raft.clone(),
            repair,
            raft_log_dir,
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
                addr: peers
                    .get(&config.node_id)
                    .map_or_else(|| addr.to_string(), |own| own.api.clone()),
                auto_create_queue_count: if config.auto_create_topic {
                    AUTO_CREATED_QUEUE_COUNT
                } else {
                    0
                },
                cluster_secret: config.cluster_secret.clone(),
                // With TLS, the nameservers too are verified against the group's CA.
                connector: peer_connector,
                fault_injection: drill_faults.clone(),
            };
            tasks.spawn(run_registration(
                raft.clone(),
                group.clone(),
                schedule_status.clone(),
                identity,
                config.namesrv.clone(),
                Duration::from_millis(config.register_interval_ms),
                shutdown.clone(),
            ));
        }
        tracing::info!(node_id = config.node_id, group = %config.group, %addr, %raft_addr, "broker node started");
        Ok(BrokerNode {
            node_id: config.node_id,
            addr,
            raft_addr,
            metrics_addr,
            raft,
            group,
            shutdown,
            servers,
            tasks,
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
        futures::future::join_all(self.servers.into_iter().map(stop_serving)).await;
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
