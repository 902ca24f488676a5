//! Running a drill: a producer at a steady rate, a push consumer, faults on a schedule, and a
//! monitor that watches committed offsets and the leader-only services; then a drain and the
//! verdict.
//!
//! Every `delay_every`-th message is sent with delay level 1, and the consumer refuses every
//! `refuse_every`-th message once, so delayed and retried messages are pending when faults
//! hit. Each fault is healed (the node restarted or resumed) `heal_after` later. The run is
//! bounded: the drain after the last send waits at most `drain_timeout`.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::drill::checker::Acked;
use crate::drill::checker::Consumed;
use crate::drill::checker::check;
use crate::drill::cluster::ClusterError;
use crate::drill::cluster::LocalCluster;
use crate::drill::cluster::NetworkFault;
use crate::drill::report::DrillReport;
use crate::drill::report::FaultOutcome;
use crate::drill::report::fault_kinds;
use crate::drill::report::median_and_max;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::AdminError;
use rocketraft_client::admin::MembershipChanged;
use rocketraft_client::admin::NewNode;
use rocketraft_client::consumer::ConsumeFrom;
use rocketraft_client::consumer::ConsumeResult;
use rocketraft_client::consumer::ConsumerError;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::error::ProducerError;
use rocketraft_client::group::BrokerGroupClient;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::producer::Producer;

/// The drill's topic and consumer group.
pub const DRILL_TOPIC: &str = "DrillTopic";
pub const DRILL_CONSUMER_GROUP: &str = "drill-consumer";
/// Queues of the drill topic in each group.
const DRILL_QUEUES: u32 = 4;
/// Sends in flight at most.
const SENDS_IN_FLIGHT_MAX: usize = 256;
/// How long the cluster may take to elect leaders and route the topic at start.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the monitor samples the cluster.
const MONITOR_PERIOD: Duration = Duration::from_millis(250);
/// Tries of a drill's membership change before the drill fails.
const MEMBERSHIP_ATTEMPTS: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error(transparent)]
    Consumer(#[from] ConsumerError),
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error("{0}")]
    Setup(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    KillLeader,
    KillFollower,
    RestartAll,
    /// Every node is killed and loses what a power cut would take (its CommitLog past the
    /// last checkpoint's flush), then all restart.
    CrashAllUnsynced,
    PauseLeader,
    PartitionLeader,
    /// The leader answers nothing, to peers or clients, as when its host drops off the
    /// network: calls to it hang instead of failing.
    BlackholeLeader,
    CorruptFollower,
    /// A follower is killed for good (a dead machine); a fresh node at a new address takes
    /// its place in one joint membership change.
    ReplaceFollower,
    /// A fresh node joins (3 -> 4 voters), then the leader leaves (it hands leadership on
    /// first; 4 -> 3).
    ReplaceLeader,
}

impl FaultKind {
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KillLeader => "kill-leader",
            FaultKind::KillFollower => "kill-follower",
            FaultKind::RestartAll => "restart-all",
            FaultKind::CrashAllUnsynced => "crash-all-unsynced",
            FaultKind::PauseLeader => "pause-leader",
            FaultKind::PartitionLeader => "partition-leader",
            FaultKind::BlackholeLeader => "blackhole-leader",
            FaultKind::CorruptFollower => "corrupt-follower",
            FaultKind::ReplaceFollower => "replace-follower",
            FaultKind::ReplaceLeader => "replace-leader",
        }
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;

    fn from_str(text: &str) -> Result<FaultKind, String> {
        [
            FaultKind::KillLeader,
            FaultKind::KillFollower,
            FaultKind::RestartAll,
            FaultKind::CrashAllUnsynced,
            FaultKind::PauseLeader,
            FaultKind::PartitionLeader,
            FaultKind::BlackholeLeader,
            FaultKind::CorruptFollower,
            FaultKind::ReplaceFollower,
            FaultKind::ReplaceLeader,
        ]
        .into_iter()
        .find(|kind| kind.name() == text)
        .ok_or_else(|| {
            format!(
                "unknown fault {text:?}: kill-leader, kill-follower, restart-all, \
                 crash-all-unsynced, pause-leader, partition-leader, blackhole-leader, \
                 corrupt-follower, \
                 replace-follower or replace-leader"
            )
        })
    }
}

#[derive(Debug, Clone)]
pub struct DrillConfig {
    pub duration: Duration,
    pub fault_every: Duration,
    pub faults: Vec<FaultKind>,
    pub heal_after: Duration,
    pub rate: u32,
    pub delay_every: u32,
    pub refuse_every: u32,
    pub drain_timeout: Duration,
    pub progress: bool,
}

/// What the producer and consumer saw, shared with their tasks.
#[derive(Default)]
struct Record {
    /// Each acknowledged send with when it started and when it was acknowledged.
    acked: Mutex<Vec<(Acked, Instant, Instant)>>,
    consumed: Mutex<Vec<Consumed>>,
    /// When the listener was first handed each message (whatever it answered).
    first_delivered: Mutex<HashMap<String, Instant>>,
    send_failures: AtomicUsize,
    refused: Mutex<HashSet<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub async fn run_drill(
    cluster: &mut LocalCluster,
    config: &DrillConfig,
) -> Result<DrillReport, DrillError> {
    let admin = cluster.access().admin(cluster.nameservers());
    prepare(cluster, &admin).await?;
    let record = Arc::new(Record::default());
    let consumer = start_consumer(cluster, config, &record).await?;
    let producer = Producer::builder(cluster.nameservers(), "drill-producer").build()?;
    let started = Instant::now();
    let stop_sending = CancellationToken::new();
    let sending = tokio::spawn(produce(
        producer,
        config.clone(),
        record.clone(),
        stop_sending.clone(),
    ));
    let stop_monitor = CancellationToken::new();
    let monitor = tokio::spawn(monitor(admin, stop_monitor.clone()));
    let progress = config.progress.then(|| {
        tokio::spawn(show_progress(
            record.clone(),
            started,
            config.duration,
            stop_monitor.clone(),
        ))
    });
    let faults = inject_faults(cluster, config, started).await?;
    stop_sending.cancel();
    let _ = sending.await;
    let acked_ids: Vec<String> = lock(&record.acked)
        .iter()
        .map(|(acked, _, _)| acked.msg_id.clone())
        .collect();
    let drain_deadline = Instant::now() + config.drain_timeout;
    while Instant::now() < drain_deadline {
        let consumed: HashSet<String> = lock(&record.consumed)
            .iter()
            .map(|c| c.msg_id.clone())
            .collect();
        if acked_ids.iter().all(|id| consumed.contains(id)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    consumer.shutdown().await;
    stop_monitor.cancel();
    let (offset_regressions, schedule_service_overlaps) = monitor.await.unwrap_or((0, 0));
    if let Some(progress) = progress {
        let _ = progress.await;
    }
    Ok(report(
        config,
        cluster,
        &record,
        faults,
        started,
        offset_regressions,
        schedule_service_overlaps,
    ))
}

/// Waits for every group's leader, creates the topic everywhere and waits for its route.
async fn prepare(cluster: &LocalCluster, admin: &Admin) -> Result<(), DrillError> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    for group in cluster.group_names() {
        while cluster.leader(&group).await.is_none() {
            if Instant::now() > deadline {
                return Err(DrillError::Setup(format!("{group} elected no leader")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    loop {
        let created = admin.create_topic(DRILL_TOPIC, DRILL_QUEUES, None).await;
        let routed = admin.topic_route(DRILL_TOPIC).await;
        match (created, routed) {
            (Ok(groups), Ok(route))
                if route.queues.len() == groups.len()
                    && groups.len() == cluster.group_names().len() =>
            {
                return Ok(());
            }
            (created, routed) => {
                if Instant::now() > deadline {
                    return Err(DrillError::Setup(format!(
                        "the drill topic is not routed: {:?} / {:?}",
                        created.err(),
                        routed.err()
                    )));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start_consumer(
    cluster: &LocalCluster,
    config: &DrillConfig,
    record: &Arc<Record>,
) -> Result<PushConsumer, DrillError> {
    let record = record.clone();
    let refuse_every = config.refuse_every as u64;
    let seen = Arc::new(AtomicUsize::new(0));
    let consumer = PushConsumer::builder(cluster.nameservers(), DRILL_CONSUMER_GROUP)
        .subscribe(DRILL_TOPIC, "*")
        .consume_from(ConsumeFrom::First)
        .heartbeat_interval(Duration::from_secs(1))
        .rebalance_interval(Duration::from_secs(5))
        .persist_interval(Duration::from_secs(1))
        .route_ttl(Duration::from_secs(2))
        .start(move |messages: Vec<MessageExt>, _context| {
            let now = Instant::now();
            let mut first_delivered = lock(&record.first_delivered);
            for message in &messages {
                first_delivered.entry(message.msg_id.clone()).or_insert(now);
            }
            drop(first_delivered);
            let mut result = ConsumeResult::Success;
            for message in &messages {
                let nth = seen.fetch_add(1, Ordering::Relaxed) as u64 + 1;
                let first_time = message.reconsume_times == 0;
                if refuse_every > 0 && first_time && nth.is_multiple_of(refuse_every) {
                    lock(&record.refused).insert(message.msg_id.clone());
                    result = ConsumeResult::ReconsumeLater;
                }
            }
            if result == ConsumeResult::Success {
                lock(&record.consumed).extend(messages.iter().map(|m| Consumed {
                    msg_id: m.msg_id.clone(),
                    group: m.group.clone(),
                    queue_id: m.queue_id,
                    queue_offset: m.queue_offset,
                    reconsume_times: m.reconsume_times,
                }));
            }
            std::future::ready(result)
        })
        .await?;
    Ok(consumer)
}

/// Sends at `config.rate` until `stop`; waits for the sends in flight.
async fn produce(
    producer: Producer,
    config: DrillConfig,
    record: Arc<Record>,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(SENDS_IN_FLIGHT_MAX));
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / config.rate.max(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sends = tokio::task::JoinSet::new();
    for sequence in 0u64.. {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let delayed =
            config.delay_every > 0 && sequence.is_multiple_of(u64::from(config.delay_every));
        let mut message = Message::new(DRILL_TOPIC, format!("drill {sequence}"));
        if delayed {
            message = message.with_delay_level(1);
        }
        let (producer, record) = (producer.clone(), record.clone());
        sends.spawn(async move {
            let started = Instant::now();
            match producer.send(message).await {
                Ok(sent) => lock(&record.acked).push((
                    Acked {
                        msg_id: sent.msg_id,
                        group: sent.group,
                        queue_id: sent.queue_id,
                        queue_offset: sent.queue_offset,
                        delayed,
                    },
                    started,
                    Instant::now(),
                )),
                Err(error) => {
                    tracing::debug!(%error, "drill send failed");
                    record.send_failures.fetch_add(1, Ordering::Relaxed);
                }
            }
            drop(permit);
        });
        while sends.try_join_next().is_some() {}
    }
    while sends.join_next().await.is_some() {}
}

/// A fault the drill injected.
struct InjectedFault {
    kind: FaultKind,
    group: String,
    node: Option<u64>,
    at: Instant,
    /// What was damaged, and what the node said it repaired.
    detail: Vec<String>,
}

/// One fault every `fault_every`, healed `heal_after` later; returns what was done when.
async fn inject_faults(
    cluster: &mut LocalCluster,
    config: &DrillConfig,
    started: Instant,
) -> Result<Vec<InjectedFault>, DrillError> {
    let groups = cluster.group_names();
    let admin = cluster.access().admin(cluster.nameservers());
    let mut done = Vec::new();
    let mut round = 0usize;
    loop {
        let at = started + config.fault_every * (round as u32 + 1);
        if at + config.heal_after >= started + config.duration || config.faults.is_empty() {
            break;
        }
        tokio::time::sleep_until(at.into()).await;
        let kind = config.faults[round % config.faults.len()];
        let group = groups[round % groups.len()].clone();
        round += 1;
        let leader = cluster.leader(&group).await;
        let node = match kind {
            FaultKind::KillLeader => leader.inspect(|id| {
                let _ = cluster.kill(&group, *id);
            }),
            FaultKind::PauseLeader => leader.inspect(|id| {
                let _ = cluster.pause(&group, *id);
            }),
            FaultKind::PartitionLeader | FaultKind::BlackholeLeader => match leader {
                Some(id) => {
                    let fault = match kind {
                        FaultKind::PartitionLeader => NetworkFault::Partition,
                        _ => NetworkFault::Blackhole,
                    };
                    cluster.inject_fault(&group, id, fault).await?;
                    Some(id)
                }
                None => None,
            },
            FaultKind::KillFollower | FaultKind::CorruptFollower => cluster
                .node_ids(&group)
                .into_iter()
                .find(|id| Some(*id) != leader)
                .inspect(|id| {
                    let _ = cluster.kill(&group, *id);
                }),
            FaultKind::RestartAll | FaultKind::CrashAllUnsynced => {
                for id in cluster.node_ids(&group) {
                    cluster.kill(&group, id)?;
                }
                None
            }
            FaultKind::ReplaceFollower => cluster
                .node_ids(&group)
                .into_iter()
                .find(|id| Some(*id) != leader)
                .inspect(|id| {
                    let _ = cluster.kill(&group, *id);
                }),
            FaultKind::ReplaceLeader => leader,
        };
        let detail = match (kind, node) {
            (FaultKind::CorruptFollower, Some(id)) => cluster.damage(&group, id)?,
            (FaultKind::CrashAllUnsynced, _) => {
                let mut lost = Vec::new();
                for id in cluster.node_ids(&group) {
                    lost.push(format!("node {id}: {}", cluster.lose_unsynced(&group, id)?));
                }
                lost
            }
            (FaultKind::ReplaceFollower | FaultKind::ReplaceLeader, Some(id)) => {
                replace(
                    cluster,
                    &admin,
                    &group,
                    id,
                    kind == FaultKind::ReplaceFollower,
                )
                .await?
            }
            _ => Vec::new(),
        };
        // Timed once the fault is done: sends started before could still be acknowledged.
        let now = Instant::now();
        tracing::info!(fault = kind.name(), group, ?node, ?detail, "fault injected");
        done.push(InjectedFault {
            kind,
            group: group.clone(),
            node,
            at: now,
            detail,
        });
        if matches!(kind, FaultKind::RestartAll | FaultKind::CrashAllUnsynced) {
            for id in cluster.node_ids(&group) {
                cluster.restart(&group, id)?;
            }
        }
        tokio::time::sleep(config.heal_after).await;
        if let Some(id) = node {
            match kind {
                FaultKind::PauseLeader => cluster.resume(&group, id)?,
                FaultKind::PartitionLeader | FaultKind::BlackholeLeader => {
                    cluster.inject_fault(&group, id, NetworkFault::Heal).await?
                }
                FaultKind::KillLeader | FaultKind::KillFollower => cluster.restart(&group, id)?,
                FaultKind::CorruptFollower => {
                    cluster.restart(&group, id)?;
                    let next_fault = started + config.fault_every * (round as u32 + 1);
                    let report = repair_report(cluster, &group, id, next_fault).await;
                    if let Some(fault) = done.last_mut() {
                        fault.detail.push(report);
                    }
                }
                // The node left the group; its place is taken already.
                FaultKind::RestartAll
                | FaultKind::CrashAllUnsynced
                | FaultKind::ReplaceFollower
                | FaultKind::ReplaceLeader => {}
            }
        }
    }
    tokio::time::sleep_until((started + config.duration).into()).await;
    Ok(done)
}

/// Gives node `old`'s place in `group` to a fresh node: in one joint change if `old` is dead
/// (`joint`), else by adding the fresh node and then removing `old` (the leader hands its
/// leadership on first). Says what changed and how long it took; the old node is stopped
/// and forgotten.
async fn replace(
    cluster: &mut LocalCluster,
    admin: &Admin,
    group: &str,
    old: u64,
    joint: bool,
) -> Result<Vec<String>, DrillError> {
    let (fresh, addr) = cluster.start_new_node(group)?;
    let add = Some(NewNode {
        id: fresh,
        addr: addr.to_string(),
        // The drill's nodes serve Raft on their broker port.
        raft_addr: None,
    });
    let steps = if joint {
        vec![(add, vec![old])]
    } else {
        vec![(add, Vec::new()), (None, vec![old])]
    };
    let mut detail = Vec::new();
    for (add, remove) in steps {
        let changed = change_membership(admin, group, add, &remove).await?;
        detail.push(format!(
            "voters {:?} (caught up in {} ms, changed in {} ms)",
            changed.voters.keys().collect::<Vec<_>>(),
            changed.catch_up_ms,
            changed.change_ms
        ));
    }
    cluster.forget(group, old)?;
    Ok(detail)
}

/// A membership change, tried again a few times while the group has no leader at hand (a
/// fault before this one may have just moved it).
async fn change_membership(
    admin: &Admin,
    group: &str,
    add: Option<NewNode>,
    remove: &[u64],
) -> Result<MembershipChanged, DrillError> {
    let mut attempt = 1;
    loop {
        match admin.change_membership(group, add.clone(), remove).await {
            Ok(changed) => return Ok(changed),
            Err(error) if attempt < MEMBERSHIP_ATTEMPTS => {
                tracing::warn!(%error, attempt, "membership change failed; trying again");
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// What a restarted, damaged node reports it repaired, once it reports the repair done (or
/// where it stands at `deadline`).
async fn repair_report(
    cluster: &LocalCluster,
    group: &str,
    node: u64,
    deadline: Instant,
) -> String {
    loop {
        let status = cluster
            .statuses(group)
            .await
            .into_iter()
            .find(|(id, _)| *id == node)
            .map(|(_, status)| status);
        let done = status
            .as_ref()
            .is_some_and(|status| status.raft_log_repair_up_to == 0);
        if done || Instant::now() >= deadline {
            return match status {
                Some(status) if status.raft_log_repair.is_empty() => {
                    "node reports: nothing to repair".to_owned()
                }
                Some(status) => format!("node reports: {}", status.raft_log_repair),
                None => "node reports nothing: no status".to_owned(),
            };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Samples committed offsets (they must never go back) and which nodes run the schedule
/// service (at most one per group and term); returns (regressions, overlaps).
async fn monitor(admin: Admin, stop: CancellationToken) -> (usize, usize) {
    let mut committed: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let (mut regressions, mut overlaps) = (0, 0);
    loop {
        tokio::select! {
            () = stop.cancelled() => return (regressions, overlaps),
            () = tokio::time::sleep(MONITOR_PERIOD) => {}
        }
        if let Ok(progress) = admin
            .consumer_progress(DRILL_CONSUMER_GROUP, Some(DRILL_TOPIC))
            .await
        {
            for queue in progress {
                let Some(offset) = queue.committed_offset else {
                    continue;
                };
                let key = (queue.broker_group.clone(), queue.queue_id);
                if let Some(before) = committed.insert(key, offset)
                    && offset < before
                {
                    tracing::warn!(
                        group = queue.broker_group,
                        queue = queue.queue_id,
                        before,
                        offset,
                        "committed offset went back"
                    );
                    regressions += 1;
                }
            }
        }
        // The groups' nodes as routed now: membership changes add and remove nodes.
        let groups = admin
            .cluster_info()
            .await
            .map_or_else(|_| Vec::new(), |info| info.groups);
        for group in groups {
            let mut running_terms = Vec::new();
            for addr in group
                .nodes
                .values()
                .filter_map(|addr| addr.parse::<SocketAddr>().ok())
            {
                let client = BrokerGroupClient::new(vec![addr]);
                let status =
                    tokio::time::timeout(Duration::from_millis(300), client.node_status(addr))
                        .await;
                if let Ok(Ok(status)) = status
                    && status.schedule_service_running
                    && status.role == "leader"
                {
                    running_terms.push(status.term);
                }
            }
            running_terms.sort_unstable();
            if running_terms.windows(2).any(|pair| pair[0] == pair[1]) {
                overlaps += 1;
            }
        }
    }
}

async fn show_progress(
    record: Arc<Record>,
    started: Instant,
    duration: Duration,
    stop: CancellationToken,
) {
    const WIDTH: usize = 30;
    loop {
        let elapsed = started.elapsed().min(duration);
        let done = (elapsed.as_secs_f64() / duration.as_secs_f64() * WIDTH as f64) as usize;
        eprint!(
            "\r[{}{}] {:>4}/{} s  acked {}  consumed {}  failed sends {}   ",
            "#".repeat(done),
            ".".repeat(WIDTH - done),
            elapsed.as_secs(),
            duration.as_secs(),
            lock(&record.acked).len(),
            lock(&record.consumed).len(),
            record.send_failures.load(Ordering::Relaxed),
        );
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    eprintln!();
}

fn report(
    config: &DrillConfig,
    cluster: &LocalCluster,
    record: &Record,
    faults: Vec<InjectedFault>,
    started: Instant,
    offset_regressions: usize,
    schedule_service_overlaps: usize,
) -> DrillReport {
    let acked = lock(&record.acked).clone();
    let consumed = lock(&record.consumed).clone();
    let acked_only: Vec<Acked> = acked.iter().map(|(a, _, _)| a.clone()).collect();
    let verdict = check(&acked_only, &consumed);
    let consumed_ids: HashSet<&str> = consumed.iter().map(|c| c.msg_id.as_str()).collect();
    let delayed: Vec<&Acked> = acked_only.iter().filter(|a| a.delayed).collect();
    let refused = lock(&record.refused).clone();
    let first_delivered = lock(&record.first_delivered).clone();
    let faults: Vec<FaultOutcome> = faults
        .into_iter()
        .map(|fault| {
            let InjectedFault {
                kind,
                group,
                node,
                at,
                detail,
            } = fault;
            // Sends to the faulted group started after the fault (delayed ones wait by design).
            let after = || {
                acked
                    .iter()
                    .filter(|(a, started, _)| a.group == group && !a.delayed && *started >= at)
            };
            FaultOutcome {
                at_s: (at - started).as_secs_f64(),
                kind: kind.name().to_owned(),
                // The first acknowledgement of a send started after the fault: the group
                // accepts writes again (through a new leader, when the fault took the old one).
                recovery_ms: after()
                    .map(|(_, _, acked_at)| *acked_at)
                    .min()
                    .map(|first| (first - at).as_millis() as u64),
                // The first delivery of such a send to the listener: the consumer reads from
                // the group again.
                consumer_resume_ms: after()
                    .filter_map(|(a, _, _)| first_delivered.get(&a.msg_id))
                    .min()
                    .map(|first| (*first - at).as_millis() as u64),
                group,
                node,
                detail,
            }
        })
        .collect();
    let (recovery_ms_median, recovery_ms_max) = median_and_max(faults.iter(), |f| f.recovery_ms);
    let (consumer_resume_ms_median, consumer_resume_ms_max) =
        median_and_max(faults.iter(), |f| f.consumer_resume_ms);
    let kinds = fault_kinds(&faults);
    let passed = verdict.passed() && offset_regressions == 0 && schedule_service_overlaps == 0;
    DrillReport {
        duration_s: config.duration.as_secs_f64(),
        groups: cluster.group_names().len(),
        rate_per_s: config.rate,
        send_failures: record.send_failures.load(Ordering::Relaxed),
        delayed_sent: delayed.len(),
        delayed_delivered: delayed
            .iter()
            .filter(|a| consumed_ids.contains(a.msg_id.as_str()))
            .count(),
        retries_refused: refused.len(),
        retries_delivered: refused
            .iter()
            .filter(|id| consumed_ids.contains(id.as_str()))
            .count(),
        offset_regressions,
        schedule_service_overlaps,
        recovery_ms_median,
        recovery_ms_max,
        consumer_resume_ms_median,
        consumer_resume_ms_max,
        kinds,
        faults,
        verdict,
        passed,
    }
}
