//! The broker's Prometheus metrics (`metrics_listen`): counters and latency histograms the
//! send, pull and commit paths update as they go (one update per request, not per message),
//! and gauges read from the node's state at each scrape: its Raft role, indexes and each
//! follower's replication lag, consumer lag per group and queue, the schedule backlog per
//! delay level, the store's extent and disk, and the process.
//!
//! Invariant: a scrape reads a snapshot (Raft metrics, metadata, queue offsets) and never
//! holds a lock of the node across the encoding; families filled at scrape time are cleared
//! first, so a queue or a follower that went away leaves no stale series.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use openraft::ServerState;
use openraft::async_runtime::watch::WatchReceiver;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::registry::Registry;
use rocketraft_server_kit::process_metrics::ProcessMetrics;

use crate::group_state::GroupState;
use crate::raft::log::store::LogSize;
use crate::raft::types::Raft;
use crate::throughput::Throughput;
use crate::topic::SCHEDULE_TOPIC;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabels {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FollowerLabels {
    node: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    group: String,
    topic: String,
    queue: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    level: u32,
}

/// Adds `messages` and `body_bytes` to `topic`'s series of a messages and a bytes family.
fn count(
    messages_family: &Family<TopicLabels, Counter>,
    bytes_family: &Family<TopicLabels, Counter>,
    topic: &str,
    messages: usize,
    body_bytes: usize,
) {
    let labels = TopicLabels {
        topic: topic.to_owned(),
    };
    messages_family
        .get_or_create(&labels)
        .inc_by(messages as u64);
    bytes_family
        .get_or_create(&labels)
        .inc_by(body_bytes as u64);
}

/// Latency buckets: 100 µs doubling to about 13 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

pub struct BrokerMetrics {
    registry: Registry,
    messages_in: Family<TopicLabels, Counter>,
    bytes_in: Family<TopicLabels, Counter>,
    messages_out: Family<TopicLabels, Counter>,
    bytes_out: Family<TopicLabels, Counter>,
    send_seconds: Histogram,
    commit_seconds: Histogram,
    pull_seconds: Histogram,
    retries: Counter,
    dead_letters: Counter,
    retention_deleted_bytes: Counter,
    is_leader: Gauge,
    term: Gauge,
    last_log_index: Gauge,
    applied_index: Gauge,
    committed_index: Gauge,
    raft_log_bytes: Gauge,
    replication_lag: Family<FollowerLabels, Gauge>,
    consumer_lag: Family<QueueLabels, Gauge>,
    schedule_backlog: Family<LevelLabels, Gauge>,
    commit_log_min_offset: Gauge,
    commit_log_max_offset: Gauge,
    disk_used_ratio: Gauge<f64, AtomicU64>,
    process: ProcessMetrics,
    /// The same sends and pulls, counted for the node's recent rates.
    throughput: Arc<Throughput>,
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("rocketraft_broker");
        let process = ProcessMetrics::register(&mut registry);
        let metrics = BrokerMetrics {
            registry: Registry::default(),
            messages_in: Family::default(),
            bytes_in: Family::default(),
            messages_out: Family::default(),
            bytes_out: Family::default(),
            send_seconds: latency_histogram(),
            commit_seconds: latency_histogram(),
            pull_seconds: latency_histogram(),
            retries: Counter::default(),
            dead_letters: Counter::default(),
            retention_deleted_bytes: Counter::default(),
            is_leader: Gauge::default(),
            term: Gauge::default(),
            last_log_index: Gauge::default(),
            applied_index: Gauge::default(),
            committed_index: Gauge::default(),
            raft_log_bytes: Gauge::default(),
            replication_lag: Family::default(),
            consumer_lag: Family::default(),
            schedule_backlog: Family::default(),
            commit_log_min_offset: Gauge::default(),
            commit_log_max_offset: Gauge::default(),
            disk_used_ratio: Gauge::default(),
            process,
            throughput: Arc::default(),
        };
        let r = &mut registry;
        r.register(
            "messages_in",
            "Messages stored by sends, per topic (on the leader)",
            metrics.messages_in.clone(),
        );
        r.register(
            "bytes_in",
            "Body bytes stored by sends, per topic (on the leader)",
            metrics.bytes_in.clone(),
        );
        r.register(
            "messages_out",
            "Messages returned by pulls, per topic",
            metrics.messages_out.clone(),
        );
        r.register(
            "bytes_out",
            "Body bytes returned by pulls, per topic",
            metrics.bytes_out.clone(),
        );
        r.register(
            "send_seconds",
            "Send requests, from arrival to the committed answer",
            metrics.send_seconds.clone(),
        );
        r.register(
            "commit_seconds",
            "Appends, from proposal to commit and apply",
            metrics.commit_seconds.clone(),
        );
        r.register(
            "pull_seconds",
            "Pull reads from the store (a held pull's wait excluded)",
            metrics.pull_seconds.clone(),
        );
        r.register(
            "retries",
            "Messages sent back to their group's retry topic",
            metrics.retries.clone(),
        );
        r.register(
            "dead_letters",
            "Messages moved to their group's dead-letter topic",
            metrics.dead_letters.clone(),
        );
        r.register(
            "retention_deleted_bytes",
            "CommitLog bytes retention deleted (whole segments)",
            metrics.retention_deleted_bytes.clone(),
        );
        r.register(
            "raft_is_leader",
            "1 if this node leads its group",
            metrics.is_leader.clone(),
        );
        r.register(
            "raft_term",
            "The node's current Raft term",
            metrics.term.clone(),
        );
        r.register(
            "raft_last_log_index",
            "Index of the node's last Raft log entry",
            metrics.last_log_index.clone(),
        );
        r.register(
            "raft_applied_index",
            "Index of the last entry applied to the store",
            metrics.applied_index.clone(),
        );
        r.register(
            "raft_committed_index",
            "Index of the last entry known committed",
            metrics.committed_index.clone(),
        );
        r.register(
            "raft_log_bytes",
            "Bytes of the Raft log's segments (compaction keeps it small)",
            metrics.raft_log_bytes.clone(),
        );
        r.register(
            "raft_replication_lag",
            "Entries a follower lacks of the leader's log (on the leader)",
            metrics.replication_lag.clone(),
        );
        r.register(
            "consumer_lag",
            "Messages of a queue a consumer group has not committed",
            metrics.consumer_lag.clone(),
        );
        r.register(
            "schedule_backlog",
            "Delayed messages not yet due or delivered, per delay level",
            metrics.schedule_backlog.clone(),
        );
        r.register(
            "commit_log_min_offset",
            "First byte of the CommitLog retention kept",
            metrics.commit_log_min_offset.clone(),
        );
        r.register(
            "commit_log_max_offset",
            "Byte past the CommitLog's last message",
            metrics.commit_log_max_offset.clone(),
        );
        r.register(
            "disk_used_ratio",
            "Fraction of the data dir's file system in use (retention's last reading)",
            metrics.disk_used_ratio.clone(),
        );
        BrokerMetrics {
            registry,
            ..metrics
        }
    }
}

impl BrokerMetrics {
    /// A send stored `messages` messages of `body_bytes` to `topic`, answered in `took`.
    pub fn sent(&self, topic: &str, messages: usize, body_bytes: usize, took: Duration) {
        self.send_seconds.observe(took.as_secs_f64());
        self.throughput.stored(messages);
        count(
            &self.messages_in,
            &self.bytes_in,
            topic,
            messages,
            body_bytes,
        );
    }

    /// What sends and pulls counted, for the node's recent rates.
    pub fn throughput(&self) -> &Arc<Throughput> {
        &self.throughput
    }

    /// An append was committed and applied `took` after it was proposed.
    pub fn committed(&self, took: Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
    }

    /// A pull read `messages` messages of `body_bytes` from `topic` in `took`.
    pub fn pulled(&self, topic: &str, messages: usize, body_bytes: usize, took: Duration) {
        self.pull_seconds.observe(took.as_secs_f64());
        if messages > 0 {
            self.throughput.served(messages);
            count(
                &self.messages_out,
                &self.bytes_out,
                topic,
                messages,
                body_bytes,
            );
        }
    }

    /// Messages sent back for a retry, and those moved to a dead-letter topic.
    pub fn sent_back(&self, retries: usize, dead_letters: usize) {
        self.retries.inc_by(retries as u64);
        self.dead_letters.inc_by(dead_letters as u64);
    }

    pub fn retention_deleted(&self, commit_log_bytes: u64) {
        self.retention_deleted_bytes.inc_by(commit_log_bytes);
    }

    /// The text of one scrape, with the node's state read now.
    pub fn render(&self, raft: &Raft, log_size: &LogSize, group: &GroupState) -> String {
        self.read_raft(raft);
        self.raft_log_bytes
            .set(i64::try_from(log_size.bytes()).unwrap_or(i64::MAX));
        self.read_store(group);
        self.process.refresh();
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%error, "metrics could not be encoded");
        }
        text
    }

    fn read_raft(&self, raft: &Raft) {
        // Clone at once: the metrics guard must not be held (it blocks the Raft core).
        let metrics = raft.metrics().borrow_watched().clone();
        let index = |log_id: Option<u64>| log_id.map_or(0, |index| index as i64);
        self.is_leader
            .set(i64::from(metrics.state == ServerState::Leader));
        self.term.set(metrics.current_term as i64);
        self.last_log_index.set(index(metrics.last_log_index));
        self.applied_index
            .set(index(metrics.last_applied.map(|log_id| log_id.index)));
        self.committed_index
            .set(index(metrics.cluster_committed.map(|log_id| log_id.index)));
        self.replication_lag.clear();
        let last = index(metrics.last_log_index);
        for (node, matched) in metrics.replication.iter().flatten() {
            if *node != metrics.id {
                let matched = index(matched.as_ref().map(|log_id| log_id.index));
                self.replication_lag
                    .get_or_create(&FollowerLabels { node: *node })
                    .set((last - matched).max(0));
            }
        }
    }

    fn read_store(&self, group: &GroupState) {
        // Copied out so no two of the node's locks are held at once.
        let (offsets, schedule_queues, progress) = {
            let metadata = group.metadata();
            let schedule_queues = metadata
                .topics
                .get(SCHEDULE_TOPIC)
                .map_or(0, |topic| topic.write_queue_count);
            (
                metadata.offsets.clone(),
                schedule_queues,
                metadata.schedule_progress.clone(),
            )
        };
        self.disk_used_ratio.set(group.disk_used_ratio());
        self.consumer_lag.clear();
        self.schedule_backlog.clear();
        let store = group.store();
        self.commit_log_min_offset
            .set(store.commit_log_min_offset());
        self.commit_log_max_offset
            .set(store.commit_log_max_offset());
        for (consumer_group, offsets) in offsets {
            for ((topic, queue), committed) in offsets {
                let (_, max_offset) = store.consume_queue_offsets(&topic, queue);
                let labels = QueueLabels {
                    group: consumer_group.clone(),
                    topic,
                    queue,
                };
                self.consumer_lag
                    .get_or_create(&labels)
                    .set((max_offset - committed).max(0));
            }
        }
        // Delay level L is queue L - 1 of the schedule topic.
        for queue in 0..schedule_queues {
            let level = queue + 1;
            let delivered = progress.get(&level).copied().unwrap_or(0);
            let (_, max_offset) = store.consume_queue_offsets(SCHEDULE_TOPIC, queue as i32);
            self.schedule_backlog
                .get_or_create(&LevelLabels { level })
                .set((max_offset - delivered).max(0));
        }
    }
}
