//! Configuration of one broker node: a TOML file whose keys the `broker` binary's flags can
//! override, validated once at start with errors that name the offending key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::raft::control::compaction::COMPACTION_GROWTH_BYTES_DEFAULT;
use crate::raft::control::compaction::COMPACTION_INTERVAL_DEFAULT;
use crate::raft::control::compaction::RETAINED_BYTES_DEFAULT;
use crate::raft::control::compaction::RETAINED_ENTRIES_DEFAULT;
use crate::raft::control::membership::VOTERS_MAX;
use crate::raft::log::store::FlushMode;
use crate::raft::log::store::LOG_SEGMENT_SIZE_BYTES_DEFAULT;
use crate::raft::transport::node_addr::NodeAddr;
use crate::raft::types::NodeId;
use crate::retention::policy as retention;
use crate::retention::policy::RetentionPolicy;
use crate::store::record::END_FILE_MIN_BLANK_LENGTH;
use crate::store::record::RECORD_SIZE_MAX;

/// Group sizes a broker group may have: one node for development, or 3 or 5 to survive the
/// loss of 1 or 2 (an even size adds no fault tolerance).
pub const GROUP_SIZES: [usize; 3] = [1, 3, 5];
/// The smallest CommitLog segment a broker accepts: the largest record the broker API lets
/// through, plus the end-of-segment filler, rounded up to whole pages. A smaller segment
/// could not store a message that passed every check at the edge, and a Raft entry that
/// cannot be applied would stop every node of the group on the same entry.
pub const COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER: u64 =
    ((RECORD_SIZE_MAX + END_FILE_MIN_BLANK_LENGTH) as u64).next_multiple_of(4096);

/// Default cap on the calls open at once on one connection.
pub const STREAMS_PER_CONNECTION_MAX_DEFAULT: u32 = 4096;
/// Default interval between fsyncs of the Raft log in `flush = "async"` mode.
pub const ASYNC_FLUSH_INTERVAL_DEFAULT: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// The broker group (RocketMQ broker name) this node belongs to.
    pub group: String,
    pub node_id: NodeId,
    /// Address the broker API (clients, admin) listens on; Raft too unless `raft_listen`
    /// gives it a port of its own.
    pub listen: SocketAddr,
    /// Address the Raft service (the group's peers only) listens on. Set it, and firewall it
    /// to the group's hosts, so nobody who can reach the broker API can vote, append or
    /// install snapshots; absent: Raft shares the broker API's port.
    #[serde(default)]
    pub raft_listen: Option<SocketAddr>,
    /// Nodes of the group, this one included: node id -> addresses, `"<api ip:port>"` for a
    /// node that serves Raft on its broker API port, `"<api ip:port> raft=<ip:port>"` for one
    /// with a `raft_listen`. A founding node names the first membership; a node that joins
    /// later (`mqadmin node-add`) may name only itself. Once a node knows the group's Raft
    /// membership, the membership's addresses are used and these only give this node's own.
    pub peers: BTreeMap<String, String>,
    /// Nameserver addresses; the node registers with each of them.
    #[serde(default)]
    pub namesrv: Vec<String>,
    /// Create an unknown topic on its first send (with the default queue count) instead of
    /// refusing the send with `TOPIC_NOT_EXIST`. On for `broker dev`, off by default.
    #[serde(default)]
    pub auto_create_topic: bool,
    /// Create a consumer group's subscription config (defaults) on its first heartbeat, as
    /// RocketMQ does; off: groups must be created with `UpsertGroup` first.
    #[serde(default = "default_true")]
    pub auto_create_group: bool,
    /// Delay levels, e.g. `"1s 5s 10s 30s 1m"` (units s, m, h, d); level L is the L-th.
    #[serde(default = "default_delay_levels")]
    pub delay_levels: String,
    /// Lets `InjectFault` cut this node off from its group (failover drills only; never in
    /// production).
    #[serde(default)]
    pub enable_fault_injection: bool,
    /// A consumer not heard from for this long leaves its group.
    #[serde(default = "default_client_expiry_ms")]
    pub client_expiry_ms: u64,
    /// How long a queue lock of orderly consumption lasts without renewal.
    #[serde(default = "default_queue_lock_expiry_ms")]
    pub queue_lock_expiry_ms: u64,
    /// How far ahead a timer message may be set (`TIMER_DELIVER_MS` and friends); at most
    /// `TIMER_MAX_DELAY_MAX` (30 days).
    #[serde(default = "default_timer_max_delay_ms")]
    pub timer_max_delay_ms: u64,
    /// A transaction not ended this long after its half message is checked back with its
    /// producer group.
    #[serde(default = "default_transaction_timeout_ms")]
    pub transaction_timeout_ms: u64,
    /// Between two check-backs of one transaction.
    #[serde(default = "default_transaction_check_interval_ms")]
    pub transaction_check_interval_ms: u64,
    /// Check-backs before an unresolved transaction is discarded.
    #[serde(default = "default_transaction_check_max")]
    pub transaction_check_max: u32,
    /// How log lines are written: `"text"` or `"json"` (one object per line).
    #[serde(default)]
    pub log_format: rocketraft_server_kit::logging::LogFormat,
    /// Where Prometheus scrapes `/metrics` (its own port: the broker API's stays gRPC only);
    /// absent: no endpoint.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
    /// Pulls this node holds open at once (long polling) at most; a pull that would wait
    /// beyond them is refused with `LIMIT_EXCEEDED`, and the consumer retries after a pause.
    #[serde(default = "default_pull_holds_max")]
    pub pull_holds_max: usize,
    /// Admin calls (topic and group changes, leader transfer, node replacement, fault
    /// injection) must carry this token (`rr-admin-token`); none configured: no check.
    #[serde(default)]
    pub admin_token: Option<String>,
    /// Registrations with the nameservers carry this secret (`rr-cluster-secret`); it must
    /// match theirs.
    #[serde(default)]
    pub cluster_secret: Option<String>,
    /// Connections the node's port serves at once, at most (clients and the group's peers
    /// alike); more are refused with HTTP/2 `ENHANCE_YOUR_CALM`.
    #[serde(default = "default_connections_max")]
    pub connections_max: usize,
    /// Calls open at once on one connection (HTTP/2 `MAX_CONCURRENT_STREAMS`); a client
    /// queues further calls until one ends. Held pulls count, one per queue.
    #[serde(default = "default_streams_per_connection_max")]
    pub streams_per_connection_max: u32,
    /// CommitLog bytes the scrubber re-reads and checks per second at most (0: no scrubbing).
    #[serde(default = "default_scrub_bytes_per_sec")]
    pub scrub_bytes_per_sec: u64,
    /// Pause between the end of one scrub pass over the CommitLog and the next.
    #[serde(default = "default_scrub_pass_interval_ms")]
    pub scrub_pass_interval_ms: u64,
    /// Interval between registrations with the nameservers (a role change registers at once).
    #[serde(default = "default_register_interval_ms")]
    pub register_interval_ms: u64,
    pub data_dir: PathBuf,
    #[serde(default)]
    pub flush: FlushKind,
    #[serde(default = "default_async_flush_interval_ms")]
    pub async_flush_interval_ms: u64,
    /// Initialize the group on first start. Set on exactly one node, and only for the
    /// group's first start: a node with this flag and an empty data dir founds a new group.
    #[serde(default)]
    pub bootstrap: bool,
    #[serde(default)]
    pub raft: RaftTimings,
    #[serde(default)]
    pub store: StoreSizes,
    #[serde(default)]
    pub retention: RetentionSettings,
    /// TLS on the broker API and Raft ports; absent: plain HTTP/2.
    #[serde(default)]
    pub tls: Option<TlsSettings>,
}

/// Where a node with data dir `data_dir` keeps its message store.
pub fn store_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("store")
}

/// TLS from PEM files: the broker API serves `cert` to any client, the Raft port serves it
/// and admits only peers whose certificate `ca` signed (mutual TLS), and the node presents
/// `cert` to its peers and verifies theirs, and the nameservers', against `ca` (a TLS
/// cluster's nameservers serve TLS too). Needs a `raft_listen`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSettings {
    /// This node's certificate chain; its subject alternative names must cover the
    /// addresses clients and peers use for it (`ip:port`s: IP address SANs).
    pub cert: PathBuf,
    /// The private key of `cert`.
    pub key: PathBuf,
    /// The CA that signed every node's certificate of the group.
    pub ca: PathBuf,
}

/// When CommitLog segments are deleted, and when the disk is too full for sends
/// (`crate::retention`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// A sealed segment older than this is deleted (RocketMQ's `fileReservedTime`); 0: as
    /// soon as it is sealed and no restart can need it.
    pub file_reserved_hours: u64,
    /// The hour of the day (local time, 0-23) expired segments are deleted (RocketMQ's
    /// `deleteWhen`); unset: any hour.
    pub delete_when: Option<u8>,
    /// Disk usage above which expired segments go at any hour, and the oldest segment even
    /// before it expires.
    pub disk_max_used_ratio: f64,
    /// Disk usage at which sends are refused with `DISK_FULL`; pulls go on.
    pub disk_full_ratio: f64,
    /// Interval between retention rounds.
    pub check_interval_ms: u64,
}

/// Longest `file_reserved_hours`: ten years.
pub const FILE_RESERVED_HOURS_MAX: u64 = 10 * 365 * 24;

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            file_reserved_hours: retention::FILE_RESERVED_DEFAULT.as_secs() / 3600,
            delete_when: None,
            disk_max_used_ratio: retention::DISK_MAX_USED_RATIO_DEFAULT,
            disk_full_ratio: retention::DISK_FULL_RATIO_DEFAULT,
            check_interval_ms: crate::retention::RETENTION_INTERVAL_DEFAULT.as_millis() as u64,
        }
    }
}

impl RetentionSettings {
    pub fn policy(&self) -> RetentionPolicy {
        RetentionPolicy {
            file_reserved: Duration::from_secs(self.file_reserved_hours * 3600),
            delete_hour: self.delete_when,
            disk_max_used_ratio: self.disk_max_used_ratio,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.file_reserved_hours > FILE_RESERVED_HOURS_MAX {
            return Err(ConfigError::new(
                "retention.file_reserved_hours",
                "must be at most 87600 (ten years)",
            ));
        }
        if self.delete_when.is_some_and(|hour| hour > 23) {
            return Err(ConfigError::new(
                "retention.delete_when",
                "must be an hour of the day, 0 to 23",
            ));
        }
        if !(self.disk_max_used_ratio > 0.0 && self.disk_max_used_ratio <= 1.0) {
            return Err(ConfigError::new(
                "retention.disk_max_used_ratio",
                "must be above 0 and at most 1",
            ));
        }
        if !(self.disk_full_ratio >= self.disk_max_used_ratio && self.disk_full_ratio <= 1.0) {
            return Err(ConfigError::new(
                "retention.disk_full_ratio",
                "must be at least disk_max_used_ratio and at most 1",
            ));
        }
        if self.check_interval_ms == 0 {
            return Err(ConfigError::new(
                "retention.check_interval_ms",
                "must be positive",
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushKind {
    /// fsync the Raft log before acknowledging an append.
    #[default]
    Sync,
    /// fsync on an interval; durability comes from replication.
    Async,
}

/// How often a leader tells its followers it is alive.
pub const HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 50;
/// A follower that heard nothing for a random time between these two asks to be elected. The
/// upper bound is also openraft's leader lease: a follower that heard from its leader within it
/// refuses to vote, so a candidate's first (pre-)vote after a leader dies is refused and its
/// second, one election timeout later, wins. With the minimum at half the maximum, a dead
/// leader is replaced within [max, 2 max) (measured: 1.0 s with 300/600). Shorter timings
/// fail over faster but elect spuriously when a busy machine delays heartbeats by more than the
/// minimum at both followers at once (pre-vote keeps one stalled follower from disrupting).
pub const ELECTION_TIMEOUT_MIN_MS_DEFAULT: u64 = 250;
pub const ELECTION_TIMEOUT_MAX_MS_DEFAULT: u64 = 500;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftTimings {
    pub heartbeat_interval_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Period of Raft log compaction (snapshot, then purge behind it).
    pub log_compaction_interval_ms: u64,
    /// Growth of the Raft log, in bytes, that starts a compaction before the period ends.
    pub log_compaction_growth_bytes: u64,
    /// Entries kept behind the snapshot when the log is purged, at most,
    pub log_retained_entries: u64,
    /// and bytes of whole log segments kept behind it, at most.
    pub log_retained_bytes: u64,
}

impl Default for RaftTimings {
    fn default() -> Self {
        RaftTimings {
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS_DEFAULT,
            election_timeout_min_ms: ELECTION_TIMEOUT_MIN_MS_DEFAULT,
            election_timeout_max_ms: ELECTION_TIMEOUT_MAX_MS_DEFAULT,
            log_compaction_interval_ms: COMPACTION_INTERVAL_DEFAULT.as_millis() as u64,
            log_compaction_growth_bytes: COMPACTION_GROWTH_BYTES_DEFAULT,
            log_retained_entries: RETAINED_ENTRIES_DEFAULT,
            log_retained_bytes: RETAINED_BYTES_DEFAULT,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSizes {
    /// The same on every node of a group: where a record lands depends on it (peers refuse
    /// the Raft requests of a node set otherwise, `raft::layout_check`).
    pub commit_log_segment_bytes: u64,
    pub consume_queue_units_per_segment: u64,
    pub index_entries_per_file: u32,
    pub raft_log_segment_bytes: u64,
}

impl Default for StoreSizes {
    fn default() -> Self {
        StoreSizes {
            commit_log_segment_bytes: crate::store::config::COMMIT_LOG_SEGMENT_BYTES_DEFAULT,
            consume_queue_units_per_segment:
                crate::store::config::CONSUME_QUEUE_UNITS_PER_SEGMENT_DEFAULT,
            index_entries_per_file: crate::store::config::INDEX_ENTRIES_PER_FILE_DEFAULT,
            raft_log_segment_bytes: LOG_SEGMENT_SIZE_BYTES_DEFAULT,
        }
    }
}

fn default_cluster() -> String {
    "DefaultCluster".to_owned()
}

fn default_true() -> bool {
    true
}

fn default_delay_levels() -> String {
    crate::schedule::delay_levels::DELAY_LEVELS_DEFAULT.to_owned()
}

fn default_client_expiry_ms() -> u64 {
    crate::consumer_registry::CLIENT_EXPIRY_DEFAULT.as_millis() as u64
}

fn default_queue_lock_expiry_ms() -> u64 {
    crate::queue_locks::QUEUE_LOCK_EXPIRY_DEFAULT.as_millis() as u64
}

fn default_timer_max_delay_ms() -> u64 {
    crate::schedule::timer::TIMER_MAX_DELAY_DEFAULT.as_millis() as u64
}

fn default_transaction_timeout_ms() -> u64 {
    crate::transaction::TRANSACTION_TIMEOUT_DEFAULT.as_millis() as u64
}

fn default_transaction_check_interval_ms() -> u64 {
    crate::transaction::TRANSACTION_CHECK_INTERVAL_DEFAULT.as_millis() as u64
}

fn default_transaction_check_max() -> u32 {
    crate::transaction::TRANSACTION_CHECK_MAX_DEFAULT
}

fn default_pull_holds_max() -> usize {
    crate::service::PULL_HOLDS_MAX_DEFAULT
}

fn default_connections_max() -> usize {
    rocketraft_server_kit::connection_limit::CONNECTIONS_MAX_DEFAULT
}

fn default_streams_per_connection_max() -> u32 {
    STREAMS_PER_CONNECTION_MAX_DEFAULT
}

fn default_scrub_bytes_per_sec() -> u64 {
    crate::scrub::SCRUB_BYTES_PER_SEC_DEFAULT
}

fn default_scrub_pass_interval_ms() -> u64 {
    crate::scrub::SCRUB_PASS_INTERVAL_DEFAULT.as_millis() as u64
}

fn default_register_interval_ms() -> u64 {
    crate::registration::REGISTER_INTERVAL_DEFAULT.as_millis() as u64
}

fn default_async_flush_interval_ms() -> u64 {
    ASYNC_FLUSH_INTERVAL_DEFAULT.as_millis() as u64
}

pub use rocketraft_server_kit::config_file::ConfigError;

impl BrokerConfig {
    /// When the leader checks unresolved transactions back.
    pub fn transaction_checks(&self) -> crate::transaction::CheckSettings {
        crate::transaction::CheckSettings {
            timeout: std::time::Duration::from_millis(self.transaction_timeout_ms),
            interval: std::time::Duration::from_millis(self.transaction_check_interval_ms),
            max_checks: self.transaction_check_max,
        }
    }

    /// Parses a TOML document; unknown keys are errors so a typo never goes unnoticed.
    pub fn from_toml(text: &str) -> Result<BrokerConfig, ConfigError> {
        rocketraft_server_kit::config_file::parse_toml(text)
    }

    /// The peers with parsed node ids and addresses.
    pub fn peer_map(&self) -> Result<BTreeMap<NodeId, NodeAddr>, ConfigError> {
        self.peers
            .iter()
            .map(|(id, addr)| {
                let key = || format!("peers.{id}");
                let node_id = id.parse::<NodeId>().map_err(|_| {
                    ConfigError::new(key(), "a node id must be an unsigned integer")
                })?;
                let addr = addr
                    .parse::<NodeAddr>()
                    .map_err(|error| ConfigError::new(key(), error.to_string()))?;
                Ok((node_id, addr))
            })
            .collect()
    }

    pub fn flush_mode(&self) -> FlushMode {
        match self.flush {
            FlushKind::Sync => FlushMode::Sync,
            FlushKind::Async => FlushMode::Async {
                interval: Duration::from_millis(self.async_flush_interval_ms),
            },
        }
    }

    /// The message store's configuration under this node's data dir.
    pub fn store_config(&self) -> crate::store::StoreConfig {
        let mut config = crate::store::StoreConfig::new(store_dir(&self.data_dir));
        config.commit_log_segment_bytes = self.store.commit_log_segment_bytes;
        config.consume_queue_units_per_segment = self.store.consume_queue_units_per_segment;
        config.index_entries_per_file = self.store.index_entries_per_file;
        config.tags_code_fn = crate::schedule::delayed::broker_tags_code;
        config
    }

    /// The delay levels, parsed.
    pub fn parsed_delay_levels(
        &self,
    ) -> Result<crate::schedule::delay_levels::DelayLevels, ConfigError> {
        crate::schedule::delay_levels::DelayLevels::parse(&self.delay_levels)
            .map_err(|reason| ConfigError::new("delay_levels", reason))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.group.is_empty() || self.group.len() > 127 {
            return Err(ConfigError::new("group", "must be 1 to 127 characters"));
        }
        let peers = self.peer_map()?;
        // A founding node names the group's first membership; a node that joins a running
        // group later (`mqadmin node-add`) may name only itself.
        if self.bootstrap && !GROUP_SIZES.contains(&peers.len()) {
            return Err(ConfigError::new(
                "peers",
                format!(
                    "a group is founded with 1, 3 or 5 nodes, found {}",
                    peers.len()
                ),
            ));
        }
        if peers.len() > VOTERS_MAX {
            return Err(ConfigError::new(
                "peers",
                format!(
                    "a group has at most {VOTERS_MAX} nodes, found {}",
                    peers.len()
                ),
            ));
        }
        let Some(own) = peers.get(&self.node_id) else {
            return Err(ConfigError::new(
                "node_id",
                format!("{} is not one of the peers", self.node_id),
            ));
        };
        if own.has_own_raft_addr() != self.raft_listen.is_some() {
            return Err(ConfigError::new(
                "raft_listen",
                format!(
                    "must be set exactly when this node's entry in peers names a Raft address \
                     (\"<api> raft=<ip:port>\"); peers.{} is {:?}",
                    self.node_id,
                    own.to_string()
                ),
            ));
        }
        if self.tls.is_some() && self.raft_listen.is_none() {
            return Err(ConfigError::new(
                "tls",
                "needs a raft_listen: the Raft port requires peers' certificates, which the \
                 broker API's clients do not have",
            ));
        }
        // Port 0 is any free port: two of them are two ports.
        if self.raft_listen == Some(self.listen) && self.listen.port() != 0 {
            return Err(ConfigError::new(
                "raft_listen",
                "must differ from listen (leave it out to serve Raft on the broker API's port)",
            ));
        }
        self.parsed_delay_levels()?;
        if self.client_expiry_ms == 0 {
            return Err(ConfigError::new("client_expiry_ms", "must be positive"));
        }
        if self.queue_lock_expiry_ms == 0 {
            return Err(ConfigError::new("queue_lock_expiry_ms", "must be positive"));
        }
        let timer_max = crate::schedule::timer::TIMER_MAX_DELAY_MAX;
        if self.timer_max_delay_ms == 0 || self.timer_max_delay_ms > timer_max.as_millis() as u64 {
            return Err(ConfigError::new(
                "timer_max_delay_ms",
                "must be positive and at most 30 days (2592000000)",
            ));
        }
        let wait_max = crate::transaction::TRANSACTION_WAIT_MAX.as_millis() as u64;
        for (key, value) in [
            ("transaction_timeout_ms", self.transaction_timeout_ms),
            (
                "transaction_check_interval_ms",
                self.transaction_check_interval_ms,
            ),
        ] {
            if value == 0 || value > wait_max {
                return Err(ConfigError::new(key, "must be 1 to 86400000 (one day)"));
            }
        }
        if !(1..=crate::transaction::TRANSACTION_CHECK_MAX_LIMIT)
            .contains(&self.transaction_check_max)
        {
            return Err(ConfigError::new(
                "transaction_check_max",
                "must be 1 to 1000",
            ));
        }
        if self.pull_holds_max == 0 {
            return Err(ConfigError::new("pull_holds_max", "must be positive"));
        }
        for (key, secret) in [
            ("admin_token", &self.admin_token),
            ("cluster_secret", &self.cluster_secret),
        ] {
            if let Some(secret) = secret {
                rocketraft_domain::secrets::validate_secret(secret)
                    .map_err(|error| ConfigError::new(key, error.to_string()))?;
            }
        }
        if self.connections_max == 0 {
            return Err(ConfigError::new("connections_max", "must be positive"));
        }
        if self.streams_per_connection_max == 0 {
            return Err(ConfigError::new(
                "streams_per_connection_max",
                "must be positive",
            ));
        }
        if self.scrub_bytes_per_sec > 0 && self.scrub_pass_interval_ms == 0 {
            return Err(ConfigError::new(
                "scrub_pass_interval_ms",
                "must be positive while scrubbing (scrub_bytes_per_sec > 0)",
            ));
        }
        if self.register_interval_ms == 0 {
            return Err(ConfigError::new("register_interval_ms", "must be positive"));
        }
        if self.flush == FlushKind::Async && self.async_flush_interval_ms == 0 {
            return Err(ConfigError::new(
                "async_flush_interval_ms",
                "must be positive",
            ));
        }
        self.validate_raft_timings()?;
        self.retention.validate()?;
        self.store_config()
            .validate()
            .map_err(|error| ConfigError::new("store", error.to_string()))?;
        if self.store.commit_log_segment_bytes < COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER {
            return Err(ConfigError::new(
                "store.commit_log_segment_bytes",
                format!(
                    "must be at least {COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER} to hold the largest message"
                ),
            ));
        }
        if self.store.raft_log_segment_bytes < 4096 {
            return Err(ConfigError::new(
                "store.raft_log_segment_bytes",
                "must be at least 4096",
            ));
        }
        Ok(())
    }

    fn validate_raft_timings(&self) -> Result<(), ConfigError> {
        let timings = &self.raft;
        if timings.heartbeat_interval_ms == 0 {
            return Err(ConfigError::new(
                "raft.heartbeat_interval_ms",
                "must be positive",
            ));
        }
        if timings.election_timeout_min_ms <= 2 * timings.heartbeat_interval_ms {
            return Err(ConfigError::new(
                "raft.election_timeout_min_ms",
                "must exceed twice raft.heartbeat_interval_ms, or followers time out between heartbeats",
            ));
        }
        if timings.log_compaction_interval_ms == 0 {
            return Err(ConfigError::new(
                "raft.log_compaction_interval_ms",
                "must be positive",
            ));
        }
        if timings.log_compaction_growth_bytes == 0 {
            return Err(ConfigError::new(
                "raft.log_compaction_growth_bytes",
                "must be positive",
            ));
        }
        if timings.election_timeout_max_ms <= timings.election_timeout_min_ms {
            return Err(ConfigError::new(
                "raft.election_timeout_max_ms",
                "must exceed raft.election_timeout_min_ms",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = r#"
        group = "broker-a"
        node_id = 1
        listen = "127.0.0.1:10911"
        data_dir = "/tmp/rr"
        [peers]
        1 = "127.0.0.1:10911"
        2 = "127.0.0.1:10912"
        3 = "127.0.0.1:10913"
    "#;

    #[test]
    fn valid_config_parses_with_defaults() {
        let config = BrokerConfig::from_toml(VALID).expect("valid");
        config.validate().expect("validates");
        assert_eq!(config.flush, FlushKind::Sync);
        assert_eq!(config.cluster, "DefaultCluster");
        assert_eq!(config.peer_map().expect("peers").len(), 3);
        assert_eq!(
            config.parsed_delay_levels().expect("levels").max_level(),
            18
        );
        assert!(config.auto_create_group);
    }

    #[test]
    fn a_raft_listen_goes_with_a_raft_address_in_peers() {
        let split = VALID
            .replace(
                "1 = \"127.0.0.1:10911\"",
                "1 = \"127.0.0.1:10911 raft=127.0.0.1:20911\"",
            )
            .replace(
                "data_dir",
                "raft_listen = \"127.0.0.1:20911\"\n        data_dir",
            );
        let config = BrokerConfig::from_toml(&split).expect("valid");
        config.validate().expect("validates");
        assert_eq!(
            config.peer_map().expect("peers")[&1],
            NodeAddr::split("127.0.0.1:10911", "127.0.0.1:20911")
        );
        let mut alone = config.clone();
        alone.raft_listen = None;
        assert_eq!(
            alone.validate().expect_err("no listener").key,
            "raft_listen"
        );
        let mut same = config.clone();
        same.raft_listen = Some(same.listen);
        assert_eq!(same.validate().expect_err("same port").key, "raft_listen");
        let mut without_raft_port = alone.clone();
        without_raft_port
            .peers
            .insert("1".into(), "127.0.0.1:10911".into());
        without_raft_port.tls = Some(TlsSettings {
            cert: "node.pem".into(),
            key: "node.key".into(),
            ca: "ca.pem".into(),
        });
        assert_eq!(
            without_raft_port
                .validate()
                .expect_err("tls, no raft port")
                .key,
            "tls"
        );
        let mut with_tls = config.clone();
        with_tls.tls = without_raft_port.tls.clone();
        with_tls.validate().expect("tls with a raft port");
        let mut unnamed = BrokerConfig::from_toml(VALID).expect("valid");
        unnamed.raft_listen = config.raft_listen;
        assert_eq!(
            unnamed.validate().expect_err("no address in peers").key,
            "raft_listen"
        );
    }

    #[test]
    fn wrong_type_names_the_key() {
        let error = BrokerConfig::from_toml(&VALID.replace("node_id = 1", "node_id = \"one\""))
            .expect_err("type");
        assert!(error.to_string().contains("node_id"), "{error}");
    }

    #[test]
    fn errors_name_the_key() {
        let unknown =
            BrokerConfig::from_toml(&format!("bogus = 1\n{VALID}")).expect_err("unknown key");
        assert_eq!(unknown.key, "bogus", "{unknown}");

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.node_id = 9;
        assert_eq!(config.validate().expect_err("not a peer").key, "node_id");

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.peers.insert("x".into(), "127.0.0.1:1".into());
        assert_eq!(config.validate().expect_err("bad id").key, "peers.x");
        for bad in ["host:1", "127.0.0.1:1 raft=host:2"] {
            let mut config = BrokerConfig::from_toml(VALID).expect("valid");
            config.peers.insert("2".into(), bad.into());
            assert_eq!(config.validate().expect_err(bad).key, "peers.2");
        }

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.bootstrap = true;
        config.peers.remove("3");
        assert_eq!(config.validate().expect_err("even group").key, "peers");
        // A node that joins a running group may name only itself, and a group may have
        // VOTERS_MAX nodes, not one more.
        config.bootstrap = false;
        config.peers.remove("2");
        config.validate().expect("a joining node alone");
        for id in 2..=VOTERS_MAX {
            config
                .peers
                .insert(id.to_string(), format!("127.0.0.1:{}", 10910 + id));
        }
        config.validate().expect("the most nodes");
        config.peers.insert("99".into(), "127.0.0.1:10999".into());
        assert_eq!(config.validate().expect_err("too many").key, "peers");

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.raft.log_compaction_growth_bytes = 1;
        config.validate().expect("any growth");
        config.raft.log_compaction_growth_bytes = 0;
        assert_eq!(
            config.validate().expect_err("no growth").key,
            "raft.log_compaction_growth_bytes"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.store.commit_log_segment_bytes = COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER;
        config.validate().expect("the minimum segment is accepted");
        config.store.commit_log_segment_bytes = COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER - 4096;
        assert_eq!(
            config.validate().expect_err("small segment").key,
            "store.commit_log_segment_bytes"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.pull_holds_max = 1;
        config.validate().expect("one held pull is a bound");
        config.pull_holds_max = 0;
        assert_eq!(
            config.validate().expect_err("no held pull").key,
            "pull_holds_max"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.queue_lock_expiry_ms = 1;
        config.validate().expect("a 1 ms lock is short but valid");
        config.queue_lock_expiry_ms = 0;
        assert_eq!(
            config.validate().expect_err("no lock time").key,
            "queue_lock_expiry_ms"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.timer_max_delay_ms = crate::schedule::timer::TIMER_MAX_DELAY_MAX.as_millis() as u64;
        config.validate().expect("timers up to 30 days");
        config.timer_max_delay_ms += 1;
        assert_eq!(
            config.validate().expect_err("past 30 days").key,
            "timer_max_delay_ms"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        let day = crate::transaction::TRANSACTION_WAIT_MAX.as_millis() as u64;
        config.transaction_check_interval_ms = day;
        config.transaction_check_max = crate::transaction::TRANSACTION_CHECK_MAX_LIMIT;
        config
            .validate()
            .expect("a day between checks, 1000 checks");
        config.transaction_check_interval_ms = day + 1;
        assert_eq!(
            config.validate().expect_err("past a day").key,
            "transaction_check_interval_ms"
        );
        config.transaction_check_interval_ms = day;
        config.transaction_check_max = 0;
        assert_eq!(
            config.validate().expect_err("no check").key,
            "transaction_check_max"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.connections_max = 1;
        config.streams_per_connection_max = 1;
        config
            .validate()
            .expect("one connection of one call is a bound");
        config.connections_max = 0;
        assert_eq!(config.validate().expect_err("none").key, "connections_max");
        config.connections_max = 1;
        config.streams_per_connection_max = 0;
        assert_eq!(
            config.validate().expect_err("none").key,
            "streams_per_connection_max"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.admin_token = Some("t0ken".into());
        config.cluster_secret = Some("s".repeat(rocketraft_domain::secrets::SECRET_LEN_MAX));
        config.validate().expect("secrets within bounds");
        config.admin_token = Some("two words".into());
        assert_eq!(config.validate().expect_err("spaced").key, "admin_token");
        config.admin_token = None;
        config.cluster_secret = Some("s".repeat(rocketraft_domain::secrets::SECRET_LEN_MAX + 1));
        assert_eq!(config.validate().expect_err("long").key, "cluster_secret");

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.scrub_bytes_per_sec = 0;
        config.scrub_pass_interval_ms = 0;
        config.validate().expect("no scrubbing needs no interval");
        config.scrub_bytes_per_sec = 1;
        assert_eq!(
            config.validate().expect_err("scrubbing without pause").key,
            "scrub_pass_interval_ms"
        );

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.delay_levels = "1s 5x".into();
        let error = config.validate().expect_err("bad level");
        assert_eq!(error.key, "delay_levels");
        assert!(error.to_string().contains("5x"), "{error}");

        let mut config = BrokerConfig::from_toml(VALID).expect("valid");
        config.raft.election_timeout_max_ms = config.raft.election_timeout_min_ms;
        assert_eq!(
            config.validate().expect_err("timeouts").key,
            "raft.election_timeout_max_ms"
        );
    }

    #[test]
    fn retention_settings_parse_and_are_checked_at_their_bounds() {
        let config = BrokerConfig::from_toml(&format!(
            "{VALID}\n[retention]\nfile_reserved_hours = 48\ndelete_when = 4\n"
        ))
        .expect("valid");
        let policy = config.retention.policy();
        assert_eq!(policy.file_reserved, Duration::from_secs(48 * 3600));
        assert_eq!(policy.delete_hour, Some(4));
        assert_eq!(config.retention.disk_full_ratio, 0.90);

        let rejected = |tune: &dyn Fn(&mut RetentionSettings)| {
            let mut config = BrokerConfig::from_toml(VALID).expect("valid");
            tune(&mut config.retention);
            config.validate().err().map(|error| error.key)
        };
        assert_eq!(rejected(&|r| r.file_reserved_hours = 0), None);
        assert_eq!(
            rejected(&|r| r.file_reserved_hours = FILE_RESERVED_HOURS_MAX),
            None
        );
        assert_eq!(
            rejected(&|r| r.file_reserved_hours = FILE_RESERVED_HOURS_MAX + 1).as_deref(),
            Some("retention.file_reserved_hours")
        );
        assert_eq!(rejected(&|r| r.delete_when = Some(23)), None);
        assert_eq!(
            rejected(&|r| r.delete_when = Some(24)).as_deref(),
            Some("retention.delete_when")
        );
        assert_eq!(
            rejected(&|r| r.disk_max_used_ratio = 0.0).as_deref(),
            Some("retention.disk_max_used_ratio")
        );
        assert_eq!(
            rejected(&|r| r.disk_max_used_ratio = 0.95).as_deref(),
            Some("retention.disk_full_ratio")
        );
        assert_eq!(
            rejected(&|r| {
                r.disk_max_used_ratio = 1.0;
                r.disk_full_ratio = 1.0;
            }),
            None
        );
        assert_eq!(
            rejected(&|r| r.disk_full_ratio = 1.01).as_deref(),
            Some("retention.disk_full_ratio")
        );
        assert_eq!(
            rejected(&|r| r.check_interval_ms = 0).as_deref(),
            Some("retention.check_interval_ms")
        );
    }
}
