//! Test harness for multi-node rocketraft tests: real broker nodes with real files, talking
//! real gRPC on 127.0.0.1 ports the OS picks, with short Raft timings and an optional seeded
//! fault plan on the Raft transport.
//!
//! Everything waits on conditions with deadlines; nothing sleeps for a fixed time to "let
//! things settle". [`cluster`] adds a nameserver and a second group for SDK tests.

pub mod client_scripts;
pub mod cluster;
pub mod deliveries;
pub mod lab_cluster;
pub mod netns;
pub mod remoting_client;
pub mod tls;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rocketraft_broker::config::BrokerConfig;
use rocketraft_broker::config::COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER;
use rocketraft_broker::config::FlushKind;
use rocketraft_broker::config::RaftTimings;
use rocketraft_broker::config::RetentionSettings;
use rocketraft_broker::config::StoreSizes;
use rocketraft_broker::node::BrokerNode;
use rocketraft_broker::node::Listeners;
use rocketraft_broker::node::NodeOptions;
use rocketraft_broker::raft::transport::faults::FaultPlan;
use rocketraft_broker::raft::transport::node_addr::NodeAddr;
use rocketraft_client::admin::NewNode;
use rocketraft_client::connector::ClientTls;
use rocketraft_client::connector::Connector;
use rocketraft_client::group::BrokerGroupClient;
use rocketraft_domain::clock::Clock;
use rocketraft_domain::clock::ManualClock;
use rocketraft_nameserver::server::NameServer;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use rocketraft_proto::common as common_pb;
use rocketraft_server::Node;
use rocketraft_server::ServerConfig;
use rocketraft_server::config::GrpcV5Config;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tonic::transport::Channel;

/// Short delay levels for tests: level L waits L seconds (a few are longer, for clamping).
pub const TEST_DELAY_LEVELS: &str = "1s 2s 3s 4s 5s 6s";

/// Raft timings for tests: fast elections, still well above a loaded 2-core machine's jitter.
pub fn test_timings() -> RaftTimings {
    RaftTimings {
        heartbeat_interval_ms: 50,
        election_timeout_min_ms: 400,
        election_timeout_max_ms: 800,
        ..RaftTimings::default()
    }
}

/// Sets up `tracing` output once per test binary (`RUST_LOG` to see more).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                "warn,broker_group=info,nameserver=info,producer=info,rocketraft_tests=info".into()
            }),
        )
        .with_test_writer()
        .try_init();
}

/// Polls `condition` until it yields `Some` or `timeout` passes.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, condition: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll_until(timeout, WAIT_POLL, || {}, condition)
        .await
        .with_context(|| format!("timed out after {timeout:?} waiting for {what}"))
}

/// Real time between two polls of [`wait_for`].
const WAIT_POLL: Duration = Duration::from_millis(20);

/// Moves `clock` on by `step` between polls of `condition`, until it yields `Some` or
/// `timeout` of real time passes: for what the nodes do only as their clock moves (check-backs,
/// expiries), where no single step can be waited out.
pub async fn advance_until<T, F, Fut>(
    what: &str,
    clock: &ManualClock,
    step: Duration,
    timeout: Duration,
    condition: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    poll_until(timeout, ADVANCE_POLL, || clock.advance(step), condition)
        .await
        .with_context(|| {
            format!(
                "timed out after {timeout:?} waiting for {what}, the clock moved on by {step:?} \
                 each time"
            )
        })
}

/// Polls `condition` every `pause` of real time, calling `between` before each pause, until
/// it yields `Some`; `None` once `timeout` has passed.
async fn poll_until<T, F, Fut>(
    timeout: Duration,
    pause: Duration,
    mut between: impl FnMut(),
    mut condition: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = condition().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        between();
        tokio::time::sleep(pause).await;
    }
}

/// Real time between two steps of [`advance_until`]: enough for a loaded node to act on
/// the one before.
const ADVANCE_POLL: Duration = Duration::from_millis(100);

/// What every node of a test group gets besides its config.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// The RocketMQ 5.x endpoint (if `listen` is set: on a port of its own).
    pub grpc_v5: GrpcV5Config,
    /// The clock the nodes' business logic reads: a [`ManualClock`]'s, for a test that
    /// holds time still and moves it on itself.
    ///
    /// [`ManualClock`]: rocketraft_domain::clock::ManualClock
    pub clock: Clock,
}

impl Extras {
    /// Nodes whose business logic reads `clock`, which the test moves on itself.
    pub fn on_clock(clock: &rocketraft_domain::clock::ManualClock) -> Extras {
        Extras {
            clock: clock.clock(),
            ..Extras::default()
        }
    }
}

/// A broker group of real nodes in this process.
pub struct TestGroup {
    dir: TempDir,
    configs: BTreeMap<u64, BrokerConfig>,
    nodes: BTreeMap<u64, Node>,
    /// The RocketMQ 5.x endpoint every node serves (if `listen` is set: a port of its own).
    grpc_v5: GrpcV5Config,
    /// The clock every node reads.
    clock: Clock,
    pub faults: Arc<FaultPlan>,
    /// How the test reaches the nodes' broker API: TLS if the nodes serve it.
    connector: Connector,
}

impl TestGroup {
    /// Starts `size` nodes; node 1 founds the group. `tune` adjusts every node's config.
    pub async fn start(
        size: u64,
        seed: u64,
        tune: impl Fn(&mut BrokerConfig),
    ) -> anyhow::Result<TestGroup> {
        TestGroup::start_with_extras(size, seed, tune, Extras::default()).await
    }

    /// [`TestGroup::start`] with `extras` for every node.
    pub async fn start_with_extras(
        size: u64,
        seed: u64,
        tune: impl Fn(&mut BrokerConfig),
        extras: Extras,
    ) -> anyhow::Result<TestGroup> {
        let Extras { grpc_v5, clock } = extras;
        let dir = tempfile::tempdir()?;
        let mut listeners = BTreeMap::new();
        let mut peers = BTreeMap::new();
        for id in 1..=size {
            let (bound, peer) = bind_node().await?;
            listeners.insert(id, bound);
            peers.insert(id.to_string(), peer);
        }
        // Printed so a failing test names the seed that replays its faults.
        println!("SEED={seed:#x}");
        let faults = Arc::new(FaultPlan::new(seed));
        let mut group = TestGroup {
            configs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            grpc_v5,
            clock,
            faults,
            dir,
            connector: Connector::plain(),
        };
        for (id, listeners) in listeners {
            let mut config = BrokerConfig {
                cluster: "TestCluster".into(),
                group: "broker-a".into(),
                node_id: id,
                listen: listeners.api.local_addr()?,
                raft_listen: listeners
                    .raft
                    .as_ref()
                    .map(TcpListener::local_addr)
                    .transpose()?,
                peers: peers.clone(),
                namesrv: Vec::new(),
                register_interval_ms: 200,
                auto_create_topic: true,
                auto_create_group: true,
                enable_fault_injection: false,
                delay_levels: TEST_DELAY_LEVELS.into(),
                client_expiry_ms: 120_000,
                queue_lock_expiry_ms: rocketraft_broker::queue_locks::QUEUE_LOCK_EXPIRY_DEFAULT
                    .as_millis() as u64,
                timer_max_delay_ms: rocketraft_broker::schedule::timer::TIMER_MAX_DELAY_DEFAULT
                    .as_millis() as u64,
                transaction_timeout_ms: 1_000,
                transaction_check_interval_ms: 1_000,
                transaction_check_max: 5,
                pull_holds_max: rocketraft_broker::service::PULL_HOLDS_MAX_DEFAULT,
                admin_token: None,
                cluster_secret: None,
                connections_max: rocketraft_server_kit::connection_limit::CONNECTIONS_MAX_DEFAULT,
                streams_per_connection_max:
                    rocketraft_broker::config::STREAMS_PER_CONNECTION_MAX_DEFAULT,
                scrub_bytes_per_sec: rocketraft_broker::scrub::SCRUB_BYTES_PER_SEC_DEFAULT,
                scrub_pass_interval_ms: rocketraft_broker::scrub::SCRUB_PASS_INTERVAL_DEFAULT
                    .as_millis() as u64,
                log_format: Default::default(),
                metrics_listen: None,
                data_dir: group.dir.path().join(format!("node-{id}")),
                flush: FlushKind::Sync,
                async_flush_interval_ms: 100,
                bootstrap: id == 1,
                raft: test_timings(),
                store: StoreSizes::default(),
                // Tests must not depend on how full the machine's disk is: no early
                // deletion and no refused sends unless a test asks for them.
                retention: RetentionSettings {
                    disk_max_used_ratio: 1.0,
                    disk_full_ratio: 1.0,
                    ..RetentionSettings::default()
                },
                tls: None,
            };
            config.store.commit_log_segment_bytes = COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER;
            config.store.consume_queue_units_per_segment = 1024;
            config.store.raft_log_segment_bytes = 1024 * 1024;
            // Small index files: tests that send thousands of messages roll them.
            config.store.index_entries_per_file = 4096;
            tune(&mut config);
            if let Some(tls) = &config.tls {
                group.connector = Connector::tls(ClientTls::from_ca_file(&tls.ca)?);
            }
            let node = group.start_node_on(config.clone(), listeners).await?;
            group.nodes.insert(id, node);
            group.configs.insert(id, config);
        }
        Ok(group)
    }

    fn node_options(&self) -> NodeOptions {
        NodeOptions {
            faults: Some(self.faults.clone()),
            clock: self.clock.clone(),
            ..NodeOptions::default()
        }
    }

    /// A node's whole config: `broker`, and the group's endpoints.
    fn server_config(&self, broker: BrokerConfig) -> ServerConfig {
        ServerConfig {
            broker,
            grpc_v5: self.grpc_v5.clone(),
        }
    }

    async fn start_node_on(
        &self,
        config: BrokerConfig,
        listeners: Listeners,
    ) -> anyhow::Result<Node> {
        let config = self.server_config(config);
        Ok(Node::start_on(config, listeners, self.node_options()).await?)
    }

    pub fn node(&self, id: u64) -> &BrokerNode {
        self.nodes[&id].broker()
    }

    /// Where node `id` serves RocketMQ 5.x's gRPC API, if the group serves it.
    pub fn grpc_v5_addr(&self, id: u64) -> Option<SocketAddr> {
        self.nodes[&id].grpc_v5_addr()
    }

    pub fn running(&self) -> impl Iterator<Item = &BrokerNode> {
        self.nodes.values().map(Node::broker)
    }

    /// Some configured node other than `leader`.
    pub fn a_follower(&self, leader: u64) -> u64 {
        let follower = self.configs.keys().copied().find(|id| *id != leader);
        follower.unwrap_or_else(|| panic!("a group of one node has no follower"))
    }

    pub fn addr(&self, id: u64) -> SocketAddr {
        self.configs[&id].listen
    }

    /// The config node `id` was started with.
    pub fn config(&self, id: u64) -> BrokerConfig {
        self.configs[&id].clone()
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.configs[&id].data_dir.clone()
    }

    /// Waits until one running node is leader and every running node agrees on it.
    pub async fn wait_for_leader(&self, timeout: Duration) -> anyhow::Result<u64> {
        wait_for("an agreed leader", timeout, || async {
            let mut leaders = Vec::new();
            for node in self.running() {
                let status = self.status(node.node_id()).await.ok()?;
                leaders.push(status.leader_id?);
            }
            let first = *leaders.first()?;
            let agreed = leaders.iter().all(|leader| *leader == first);
            let leader_running = self.nodes.contains_key(&first);
            (agreed && leader_running && self.status(first).await.ok()?.role == "leader")
                .then_some(first)
        })
        .await
    }

    /// Cuts `leader` off from the rest of the group and waits until another node leads
    /// (the isolated node may still believe it leads, in an older term). Returns the new
    /// leader.
    pub async fn isolate_leader(&self, leader: u64, timeout: Duration) -> anyhow::Result<u64> {
        self.faults.isolate(leader);
        let others: Vec<u64> = self
            .configs
            .keys()
            .copied()
            .filter(|id| *id != leader)
            .collect();
        wait_for("a new leader among the others", timeout, || async {
            for id in &others {
                if self.status(*id).await.ok()?.role == "leader" {
                    return Some(*id);
                }
            }
            None
        })
        .await
    }

    pub async fn client(&self, id: u64) -> anyhow::Result<BrokerClient<Channel>> {
        Ok(self.connector.connect(self.addr(id)).await?)
    }

    pub async fn status(&self, id: u64) -> anyhow::Result<pb::NodeStatusResponse> {
        let mut client = self.client(id).await?;
        Ok(client
            .node_status(pb::NodeStatusRequest {})
            .await?
            .into_inner())
    }

    /// Waits until every running node applied what `leader` applied so far.
    pub async fn wait_all_applied(&self, leader: u64, timeout: Duration) -> anyhow::Result<()> {
        let applied = self.status(leader).await?.last_applied_index;
        for node in self.running() {
            let id = node.node_id();
            wait_for(
                "every node to apply the leader's entries",
                timeout,
                || async {
                    (self.status(id).await.ok()?.last_applied_index >= applied).then_some(())
                },
            )
            .await?;
        }
        Ok(())
    }

    /// A client of the whole group that follows its leader.
    pub fn group_client(&self) -> BrokerGroupClient {
        BrokerGroupClient::with_connector(
            self.configs.values().map(|config| config.listen).collect(),
            self.connector.clone(),
        )
    }

    /// Stops a node as a crash would leave it: nothing is flushed on the way out.
    pub async fn stop(&mut self, id: u64) {
        if let Some(node) = self.nodes.remove(&id) {
            node.shutdown().await;
        }
    }

    /// [`TestGroup::stop`], then how many holders of the node's group state are left: each
    /// would be work of the old node that outlived its shutdown, still able to touch the
    /// store after its data dir was unlocked.
    pub async fn stop_counting_survivors(&mut self, id: u64) -> usize {
        let Some(node) = self.nodes.remove(&id) else {
            return 0;
        };
        let group = Arc::downgrade(node.broker().group());
        node.shutdown().await;
        group.strong_count()
    }

    /// Starts a stopped node again on its old address and data.
    pub async fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let mut config = self.configs[&id].clone();
        config.bootstrap = false;
        let node = Node::start(self.server_config(config), self.node_options())
            .await
            .with_context(|| format!("restart node {id}"))?;
        self.nodes.insert(id, node);
        Ok(())
    }

    /// Starts a stopped node again with its config changed by `tune` (kept for later restarts).
    pub async fn restart_with(
        &mut self,
        id: u64,
        tune: impl Fn(&mut BrokerConfig),
    ) -> anyhow::Result<()> {
        if let Some(config) = self.configs.get_mut(&id) {
            tune(config);
        }
        self.restart(id).await
    }

    /// Starts a new node, the next id, on a fresh port and an empty data dir, configured as
    /// the group's first node was (but not founding it), naming only itself as a peer: it
    /// runs outside the membership until the leader adds it (`ChangeMembership`).
    pub async fn start_new_node(&mut self) -> anyhow::Result<u64> {
        let id = self.configs.keys().max().map_or(1, |last| last + 1);
        let (listeners, peer) = bind_node().await?;
        let mut config = self
            .configs
            .values()
            .next()
            .context("a group has a first node")?
            .clone();
        config.node_id = id;
        config.listen = listeners.api.local_addr()?;
        config.raft_listen = listeners
            .raft
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?;
        config.peers = BTreeMap::from([(id.to_string(), peer)]);
        config.bootstrap = false;
        config.data_dir = self.dir.path().join(format!("node-{id}"));
        let node = self.start_node_on(config.clone(), listeners).await?;
        self.nodes.insert(id, node);
        self.configs.insert(id, config);
        Ok(id)
    }

    /// Node `id` as `ChangeMembership` adds it: its broker API and Raft addresses.
    pub fn new_node(&self, id: u64) -> NewNode {
        let config = &self.configs[&id];
        NewNode {
            id,
            addr: config.listen.to_string(),
            raft_addr: config.raft_listen.map(|addr| addr.to_string()),
        }
    }

    /// Where node `id` serves Raft (a port of its own).
    pub fn raft_addr(&self, id: u64) -> SocketAddr {
        self.node(id).raft_addr()
    }

    /// Stops node `id` and forgets it: it left the group's membership.
    pub async fn forget(&mut self, id: u64) {
        self.stop(id).await;
        self.configs.remove(&id);
    }

    /// Deletes a stopped node's data, as if its disk were replaced.
    pub fn wipe(&self, id: u64) -> anyhow::Result<()> {
        assert!(!self.nodes.contains_key(&id), "wipe a stopped node only");
        std::fs::remove_dir_all(self.data_dir(id))?;
        Ok(())
    }

    pub async fn shutdown(mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

/// Binds a node's broker API and Raft ports on 127.0.0.1 (the OS picks them: Raft gets a
/// port of its own, as in production); returns them and the node's `peers` entry.
async fn bind_node() -> anyhow::Result<(Listeners, String)> {
    let api = TcpListener::bind("127.0.0.1:0").await?;
    let raft = TcpListener::bind("127.0.0.1:0").await?;
    let peer = NodeAddr::split(
        api.local_addr()?.to_string(),
        raft.local_addr()?.to_string(),
    );
    Ok((
        Listeners {
            api,
            raft: Some(raft),
        },
        peer.to_string(),
    ))
}

/// Starts a nameserver with `config` on a 127.0.0.1 port the OS picks.
pub async fn start_nameserver(config: NameServerConfig) -> anyhow::Result<NameServer> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(rocketraft_server::nameserver::start_nameserver(
        listener, config,
    )?)
}

/// A pull by group `readers` of up to 32 messages of one queue from `queue_offset`, every tag,
/// answered at once (no long polling).
pub fn pull_request(topic: &str, queue_id: i32, queue_offset: i64) -> pb::PullRequest {
    pb::PullRequest {
        group: "readers".into(),
        topic: topic.to_owned(),
        queue_id,
        queue_offset,
        max_messages: 32,
        tags: Vec::new(),
        max_wait_ms: 0,
        sql: String::new(),
        stored_records: false,
    }
}

/// XORs the byte at `pos` of the file at `path` with `mask` and syncs it: bit rot, done to
/// a node's files behind its back.
pub fn flip_byte(path: &std::path::Path, pos: u64, mask: u8) -> anyhow::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, pos)?;
    byte[0] ^= mask;
    file.write_all_at(&byte, pos)?;
    file.sync_all()?;
    Ok(())
}

/// A send of `bodies` to one queue, as the producer SDK will issue it.
pub fn send_request(
    topic: &str,
    queue_id: i32,
    bodies: impl IntoIterator<Item = Vec<u8>>,
) -> pb::SendRequest {
    pb::SendRequest {
        topic: topic.to_owned(),
        queue_id,
        messages: bodies
            .into_iter()
            .map(|body| common_pb::Message {
                topic: topic.to_owned(),
                body: body.into(),
                ..Default::default()
            })
            .collect(),
        born_timestamp_ms: 1_700_000_000_000,
        born_host: "127.0.0.1:40000".to_owned(),
        deduplicate: false,
        queue_ids: Vec::new(),
    }
}

/// The workspace binary `name` next to the test executable (it lives in
/// `target/<profile>/deps`, the binaries in `target/<profile>`).
pub fn workspace_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| anyhow::anyhow!("the test executable has no directory"))?
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    anyhow::ensure!(
        path.is_file(),
        "{} not found: build the binaries first with `cargo build --bins` (`cargo test \
         --workspace` builds them)",
        path.display()
    );
    Ok(path)
}
