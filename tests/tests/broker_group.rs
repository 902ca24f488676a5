//! A broker group of real nodes agrees on one CommitLog through Raft.
//!
//! Each test starts nodes on 127.0.0.1 port 0 with real files under a temp dir and talks to
//! them over real gRPC; the Raft transport carries a seeded fault plan (printed at start).
//! A follower whose Raft log is damaged on disk repairs it from the leader before it votes.

use std::time::Duration;

use anyhow::Context;

use rocketraft_broker::data_dir_lock::LockError;
use rocketraft_broker::node::BrokerNode;
use rocketraft_broker::node::NodeOptions;
use rocketraft_broker::node::StartError;
use rocketraft_broker::store::record::MESSAGE_BODY_SIZE_MAX;
use rocketraft_client::group::BrokerGroupClient;
use rocketraft_domain::limits::SEND_REQUEST_BYTES_MAX;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_proto::leader_addr;
use rocketraft_proto::response_code;
use rocketraft_tests::TestGroup;
use rocketraft_tests::flip_byte;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::wait_for;
use tracing::info;

const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);
const SEND_TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "TopicTest";
const QUEUES: i32 = 4;

/// Sends `count` 1 KiB-ish messages to the leader from `concurrency` tasks, one message per
/// send, so group commit has concurrent sends to coalesce. Returns the results.
async fn send_many(
    group: &TestGroup,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<pb::SendResult>> {
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let group = group.group_client();
        tasks.push(tokio::spawn(async move {
            let mut results = Vec::new();
            for i in (task..count).step_by(concurrency) {
                let body = format!("message {i:06} ").repeat(64).into_bytes();
                let request = send_request(TOPIC, (i % QUEUES as usize) as i32, [body]);
                results.extend(group.send(request, SEND_TIMEOUT).await?.results);
            }
            anyhow::Ok(results)
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.extend(task.await??);
    }
    Ok(results)
}

/// The whole CommitLog of a node.
fn commit_log_bytes(node: &BrokerNode) -> anyhow::Result<Vec<u8>> {
    let store = node.group().store();
    let end = store.commit_log_max_offset();
    let mut bytes = Vec::new();
    while (bytes.len() as i64) < end {
        let chunk = store.read_commit_log(
            bytes.len() as i64,
            (end as usize - bytes.len()).min(1 << 20),
        )?;
        anyhow::ensure!(!chunk.is_empty(), "no CommitLog bytes at {}", bytes.len());
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

fn consume_queues(node: &BrokerNode) -> Vec<Vec<(i64, i32, i64)>> {
    let store = node.group().store();
    (0..QUEUES)
        .map(|queue| {
            store
                .read_consume_queue(TOPIC, queue, 0, usize::MAX)
                .into_iter()
                .map(|unit| (unit.commit_log_offset, unit.size, unit.tags_code))
                .collect()
        })
        .collect()
}

/// Waits until every running node holds the leader's CommitLog end, then checks bytes and
/// consume queues are identical.
async fn assert_converged(group: &TestGroup, leader: u64) -> anyhow::Result<()> {
    let target = group.node(leader).group().store().commit_log_max_offset();
    wait_for(
        "every node to apply the leader's CommitLog",
        CONVERGE_TIMEOUT,
        || async {
            group
                .running()
                .all(|node| node.group().store().commit_log_max_offset() == target)
                .then_some(())
        },
    )
    .await?;
    let reference = commit_log_bytes(group.node(leader))?;
    let reference_queues = consume_queues(group.node(leader));
    for node in group.running() {
        assert_eq!(
            commit_log_bytes(node)?,
            reference,
            "CommitLog of node {} differs",
            node.node_id()
        );
        assert_eq!(
            consume_queues(node),
            reference_queues,
            "ConsumeQueues of node {} differ",
            node.node_id()
        );
    }
    Ok(())
}

fn assert_offsets_dense(results: &[pb::SendResult], per_queue: usize) {
    for queue in 0..QUEUES {
        let mut offsets: Vec<i64> = results
            .iter()
            .filter(|r| r.queue_id == queue)
            .map(|r| r.queue_offset)
            .collect();
        offsets.sort_unstable();
        let expected: Vec<i64> = (0..per_queue as i64).collect();
        assert_eq!(
            offsets, expected,
            "queue {queue} offsets are not 0..{per_queue}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_three_nodes_when_ten_thousand_appends_should_hold_identical_commit_logs()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0001, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    info!(leader, "--- send 10,000 messages through the leader");
    let results = send_many(&group, 10_000, 32).await?;
    assert_eq!(results.len(), 10_000);
    assert_offsets_dense(&results, 2_500);
    info!("--- every node ends with the same bytes");
    assert_converged(&group, leader).await?;
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_node_with_another_commit_log_segment_size_it_should_get_nothing_until_set_alike()
-> anyhow::Result<()> {
    init_tracing();
    // Offsets depend on where segments end: a node laid out otherwise would diverge.
    let odd = 3;
    let mut group = TestGroup::start(3, 0x5EED_0010, |config| {
        if config.node_id == odd {
            config.store.commit_log_segment_bytes *= 2;
        }
    })
    .await?;
    info!("--- nodes 1 and 2 elect a leader and serve; node 3 is refused every Raft request");
    let leader = wait_for(
        "a leader among the nodes laid out alike",
        LEADER_TIMEOUT,
        || async {
            let leader = group.status(1).await.ok()?.leader_id?;
            let agreed = group.status(2).await.ok()?.leader_id == Some(leader);
            (agreed && leader != odd).then_some(leader)
        },
    )
    .await?;
    let results = send_many(&group, 200, 8).await?;
    assert_eq!(results.len(), 200);
    let applied = group.status(leader).await?.last_applied_index;
    let other = 3 - leader;
    wait_for(
        "the other node laid out alike to apply",
        CONVERGE_TIMEOUT,
        || async { (group.status(other).await.ok()?.last_applied_index >= applied).then_some(()) },
    )
    .await?;
    assert_eq!(
        group.node(odd).group().store().commit_log_max_offset(),
        0,
        "node {odd} was given no entry"
    );
    info!("--- set alike, node 3 catches up to the same bytes");
    group.stop(odd).await;
    group
        .restart_with(odd, |config| config.store.commit_log_segment_bytes /= 2)
        .await?;
    assert_converged(&group, leader).await?;
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_running_node_when_another_starts_on_its_data_dir_should_refuse_it()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_00D1, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let mut intruder = group.config(leader);
    intruder.listen = "127.0.0.1:0".parse()?;
    intruder.raft_listen = Some("127.0.0.1:0".parse()?);
    intruder.bootstrap = false;
    let error = BrokerNode::start(intruder, NodeOptions::default())
        .await
        .err()
        .context("a second node started on a data dir in use")?;
    assert!(
        matches!(&error, StartError::DataDir(LockError::InUse { .. })),
        "{error:?}"
    );
    let mut client = group.client(leader).await?;
    let response = client
        .send(send_request(TOPIC, 0, [b"still served".to_vec()]))
        .await?
        .into_inner();
    assert_eq!(response.results.len(), 1, "the running node still serves");
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_follower_when_sending_should_reject_with_leader_address() -> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0002, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    let mut client = group.client(follower).await?;
    let status = client
        .send(send_request(TOPIC, 0, [b"hello".to_vec()]))
        .await
        .expect_err("a follower must refuse");
    assert_eq!(response_code(&status), Some(ResponseCode::NotLeader));
    assert_eq!(
        leader_addr(&status),
        Some(group.addr(leader).to_string().as_str())
    );
    assert_eq!(
        group.node(follower).group().store().commit_log_max_offset(),
        0,
        "nothing was written"
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_follower_stopped_when_restarted_should_catch_up() -> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(3, 0x5EED_0003, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    send_many(&group, 400, 8).await?;
    info!(follower, "--- stop a follower, keep sending");
    group.stop(follower).await;
    send_many(&group, 800, 8).await?;
    info!(follower, "--- restart it");
    group.restart(follower).await?;
    assert_converged(&group, leader).await?;
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_log_purged_when_wiped_node_restarts_should_be_rebuilt_by_snapshot()
-> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(3, 0x5EED_0004, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    send_many(&group, 600, 8).await?;
    info!(follower, "--- stop and wipe a follower");
    group.stop(follower).await;
    let request = pb::PrepareNodeReplacementRequest { node_id: follower };
    group
        .client(leader)
        .await?
        .prepare_node_replacement(request)
        .await?;
    group.wipe(follower)?;
    send_many(&group, 200, 4).await?;
    info!("--- snapshot and purge the leader's log");
    let purged_upto = group
        .node(leader)
        .snapshot_and_purge(LEADER_TIMEOUT)
        .await?;
    assert!(
        purged_upto.is_some_and(|index| index > 0),
        "the log was purged"
    );
    info!(
        follower,
        "--- restart the wiped follower: only a snapshot can rebuild it"
    );
    group.restart(follower).await?;
    assert_converged(&group, leader).await?;
    send_many(&group, 100, 4).await?;
    assert_converged(&group, leader).await?;
    info!("--- NodeStatus reports the CPU its process spent, for the benchmark's accounting");
    let status = group.status(leader).await?;
    assert_eq!(
        status.process_id,
        std::process::id(),
        "nodes run in this process"
    );
    let spent = status.process_cpu_micros;
    assert!(spent > 0, "the sends so far cost CPU");
    send_many(&group, 100, 4).await?;
    assert!(group.status(leader).await?.process_cpu_micros > spent);
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_leader_partitioned_when_healed_should_converge_on_new_leader() -> anyhow::Result<()>
{
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0005, |_| {}).await?;
    let old_leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    send_many(&group, 200, 4).await?;
    info!(old_leader, "--- isolate the leader");
    let new_leader = group.isolate_leader(old_leader, LEADER_TIMEOUT).await?;
    send_many(&group, 200, 4).await?;
    info!(new_leader, "--- heal with lossy links");
    group.faults.heal();
    group.faults.set_lossy(50_000, Duration::from_millis(3));
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    group.faults.heal();
    assert_converged(&group, leader).await?;
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_largest_message_when_sent_should_replicate_and_one_byte_more_should_be_refused()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0006, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let client = group.group_client();
    info!("--- a body of exactly the maximum is stored on every node");
    let largest = send_request(TOPIC, 0, [vec![7u8; MESSAGE_BODY_SIZE_MAX]]);
    let result = client.send(largest, SEND_TIMEOUT).await?;
    assert_eq!(result.results.len(), 1);
    assert_converged(&group, leader).await?;
    info!("--- one byte more is refused with MESSAGE_ILLEGAL and stores nothing");
    let end_before = group.node(leader).group().store().commit_log_max_offset();
    let too_large = send_request(TOPIC, 0, [vec![7u8; MESSAGE_BODY_SIZE_MAX + 1]]);
    let status = group
        .client(leader)
        .await?
        .send(too_large)
        .await
        .expect_err("over the limit");
    assert_eq!(
        response_code(&status),
        Some(ResponseCode::MessageIllegal),
        "{status}"
    );
    assert_eq!(
        group.node(leader).group().store().commit_log_max_offset(),
        end_before
    );
    info!("--- a request past the largest legal one is refused before it is read whole");
    let oversized = send_request(TOPIC, 0, [vec![7u8; SEND_REQUEST_BYTES_MAX + 1]]);
    let status = group
        .client(leader)
        .await?
        .send(oversized)
        .await
        .expect_err("over the request limit");
    assert!(
        status.message().contains("too large"),
        "the error says why: {status}"
    );
    assert_eq!(
        group.node(leader).group().store().commit_log_max_offset(),
        end_before
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_short_compaction_interval_should_purge_every_log_and_keep_serving()
-> anyhow::Result<()> {
    purges_every_log_and_keeps_serving(0x5EED_0007, |config| {
        config.raft.log_compaction_interval_ms = 200;
        config.raft.log_retained_entries = 8;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_log_growth_past_the_compaction_bytes_should_purge_before_the_interval()
-> anyhow::Result<()> {
    // An hour-long interval: only the log's growth can start these compactions.
    purges_every_log_and_keeps_serving(0x5EED_0017, |config| {
        config.raft.log_compaction_interval_ms = 3_600_000;
        config.raft.log_compaction_growth_bytes = 64 * 1024;
        config.raft.log_retained_entries = 8;
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_byte_budget_for_the_retained_log_should_purge_more_than_the_entry_count_keeps()
-> anyhow::Result<()> {
    init_tracing();
    const SEGMENT_BYTES: u64 = 16 * 1024;
    const RETAINED_BYTES: u64 = 64 * 1024;
    let group = TestGroup::start(3, 0x5EED_0027, |config| {
        config.raft.log_compaction_interval_ms = 200;
        // The entry count alone would keep every entry of this test.
        config.raft.log_retained_entries = 1_000_000;
        config.raft.log_retained_bytes = RETAINED_BYTES;
        config.store.raft_log_segment_bytes = SEGMENT_BYTES;
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    // About 700 KB of log, ten times the budget.
    send_many(&group, 600, 8).await?;
    group.wait_all_applied(leader, CONVERGE_TIMEOUT).await?;
    info!("--- every log shrinks to the budget, the segment straddling the snapshot and one more");
    let log_bytes = |id: u64| -> u64 {
        let segments = group.data_dir(id).join("raft").join("log").join("segments");
        std::fs::read_dir(segments)
            .map(|files| {
                files
                    .filter_map(|file| file.ok()?.metadata().ok())
                    .map(|meta| meta.len())
                    .sum()
            })
            .unwrap_or(u64::MAX)
    };
    for id in 1..=3 {
        wait_for(
            "the log to shrink to its byte budget",
            CONVERGE_TIMEOUT,
            || async { (log_bytes(id) <= RETAINED_BYTES + 2 * SEGMENT_BYTES).then_some(()) },
        )
        .await?;
    }
    send_many(&group, 100, 4).await?;
    assert_converged(&group, leader).await?;
    group.shutdown().await;
    Ok(())
}

async fn purges_every_log_and_keeps_serving(
    seed: u64,
    configure: impl Fn(&mut rocketraft_broker::config::BrokerConfig),
) -> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(3, seed, configure).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    send_many(&group, 600, 8).await?;
    info!("--- every node compacts its own log behind its snapshot");
    for id in 1..=3 {
        wait_for("the log to be purged", CONVERGE_TIMEOUT, || async {
            let status = group.status(id).await.ok()?;
            (status.last_purged_index? > 0).then_some(())
        })
        .await?;
    }
    info!(
        "--- a follower whose purge mark rotted counts its log purged up to its snapshot, and \
         one whose vote's first copy rotted reads it from the second"
    );
    // Entries past the last snapshot, applied (and checkpointed at the stop): the damaged
    // mark must not be replaced by the applied point, which openraft refuses (the purge
    // point may not pass the snapshot).
    send_many(&group, 50, 4).await?;
    group.wait_all_applied(leader, CONVERGE_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    group.stop(follower).await;
    let mark = group
        .data_dir(follower)
        .join("raft")
        .join("log")
        .join("purged");
    flip_byte(&mark, std::fs::metadata(&mark)?.len() - 1, 0x01)?;
    let log_dir = group.data_dir(follower).join("raft").join("log");
    let (vote, mirror) = (log_dir.join("vote"), log_dir.join("vote-mirror"));
    flip_byte(&vote, std::fs::metadata(&vote)?.len() - 1, 0x01)?;
    assert_ne!(std::fs::read(&vote)?, std::fs::read(&mirror)?);
    group.restart(follower).await?;
    send_many(&group, 100, 4).await?;
    assert_converged(&group, leader).await?;
    group.stop(follower).await;
    assert_eq!(
        std::fs::read(&vote)?,
        std::fs::read(&mirror)?,
        "the damaged copy was restored"
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_auto_create_off_should_send_only_to_created_topics_and_queues() -> anyhow::Result<()>
{
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0008, |config| config.auto_create_topic = false).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    let code_of = |status: tonic::Status| response_code(&status);
    let send = |queue_id| send_request("Orders", queue_id, [b"x".to_vec()]);

    info!("--- an unknown topic is refused");
    assert_eq!(
        code_of(client.send(send(0)).await.expect_err("unknown")),
        Some(ResponseCode::TopicNotExist)
    );

    info!("--- once created, its queues take sends and others are refused");
    let create = pb::CreateTopicRequest {
        topic: "Orders".into(),
        read_queue_count: 2,
        write_queue_count: 2,
        perm: 0,
        ..Default::default()
    };
    let follower = group.a_follower(leader);
    let refused = group
        .client(follower)
        .await?
        .create_topic(create.clone())
        .await
        .expect_err("follower");
    assert_eq!(code_of(refused), Some(ResponseCode::NotLeader));
    client.create_topic(create).await?;
    assert_eq!(
        client.send(send(1)).await?.into_inner().results[0].queue_offset,
        0
    );
    assert_eq!(
        code_of(client.send(send(2)).await.expect_err("queue 2")),
        Some(ResponseCode::QueueIllegal)
    );

    info!("--- one send to several queues: each message is stored in its own");
    let mut to_both = send_request("Orders", 0, (0..3).map(|i| vec![i]));
    to_both.queue_ids = vec![1, 0, 1];
    let results = client.send(to_both.clone()).await?.into_inner().results;
    let placed: Vec<_> = results
        .iter()
        .map(|result| (result.queue_id, result.queue_offset))
        .collect();
    assert_eq!(placed, [(1, 1), (0, 0), (1, 2)]);

    info!("--- ... and is refused whole if one names a queue the topic lacks, or the count is off");
    to_both.queue_ids = vec![1, 2, 0];
    assert_eq!(
        code_of(client.send(to_both.clone()).await.expect_err("queue 2")),
        Some(ResponseCode::QueueIllegal)
    );
    to_both.queue_ids = vec![1, 0];
    assert_eq!(
        code_of(client.send(to_both).await.expect_err("2 ids, 3 messages")),
        Some(ResponseCode::MessageIllegal)
    );
    let next = client.send(send(0)).await?.into_inner().results;
    assert_eq!(
        (next[0].queue_id, next[0].queue_offset),
        (0, 1),
        "the refused sends stored nothing"
    );

    info!("--- system topics cannot be created or sent to");
    let system = pb::CreateTopicRequest {
        topic: "%RETRY%g".into(),
        read_queue_count: 1,
        write_queue_count: 1,
        perm: 0,
        ..Default::default()
    };
    assert_eq!(
        code_of(client.create_topic(system).await.expect_err("system")),
        Some(ResponseCode::TopicIllegal)
    );
    let to_system = send_request("SCHEDULE_TOPIC_XXXX", 0, [b"x".to_vec()]);
    assert_eq!(
        code_of(client.send(to_system).await.expect_err("system")),
        Some(ResponseCode::TopicIllegal)
    );

    info!("--- the topic config is replicated, and deleting it refuses sends again");
    wait_for("every node to know the topic", LEADER_TIMEOUT, || async {
        group
            .running()
            .all(|node| node.group().metadata().topics.contains_key("Orders"))
            .then_some(())
    })
    .await?;
    client
        .delete_topic(pb::DeleteTopicRequest {
            topic: "Orders".into(),
        })
        .await?;
    assert_eq!(
        code_of(client.send(send(0)).await.expect_err("deleted")),
        Some(ResponseCode::TopicNotExist)
    );
    group.shutdown().await;
    Ok(())
}

/// Stops `leader`, sends `more` messages through the two nodes left, and checks they converge
/// holding all `expected` messages: nothing acknowledged was lost with the leader.
async fn stop_leader_and_count(
    group: &mut TestGroup,
    leader: u64,
    more: usize,
    expected: usize,
) -> anyhow::Result<()> {
    group.stop(leader).await;
    let new_leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    send_many(group, more, 4).await?;
    assert_converged(group, new_leader).await?;
    let units: usize = consume_queues(group.node(new_leader))
        .iter()
        .map(Vec::len)
        .sum();
    assert_eq!(
        units, expected,
        "every acknowledged message is in the queues"
    );
    Ok(())
}

/// Flips one byte a third into `node`'s largest Raft log segment, where entries follow it.
fn damage_raft_log(group: &TestGroup, node: u64) -> anyhow::Result<()> {
    let dir = group
        .data_dir(node)
        .join("raft")
        .join("log")
        .join("segments");
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "log") {
            segments.push((path.metadata()?.len(), path));
        }
    }
    let (_, largest) = segments.into_iter().max().context("no raft log segment")?;
    let mut bytes = std::fs::read(&largest)?;
    let at = bytes.len() / 3;
    bytes[at] ^= 0x40;
    std::fs::write(&largest, bytes)?;
    info!(path = %largest.display(), at, "flipped a byte");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_follower_raft_log_damaged_should_repair_it_before_it_votes_and_lose_nothing()
-> anyhow::Result<()> {
    init_tracing();
    // With an admin token: the repair's request for the leader's consent is an admin call.
    let mut group = TestGroup::start(3, 0x5EED_000A, |config| {
        config.admin_token = Some("group-admin-token".into());
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    send_many(&group, 600, 8).await?;
    assert_converged(&group, leader).await?;
    let held = group
        .status(follower)
        .await?
        .last_log_index
        .context("follower log index")?;

    info!(
        follower,
        "--- stop a follower and flip a byte in its raft log"
    );
    group.stop(follower).await;
    damage_raft_log(&group, follower)?;
    group.restart(follower).await?;
    let status = group.status(follower).await?;
    assert!(
        status.raft_log_repair.contains("damaged from entry"),
        "the status says what was found: {:?}",
        status.raft_log_repair
    );

    info!("--- it takes the lost entries back from the leader, then votes again");
    let repaired = wait_for("the follower's repair", CONVERGE_TIMEOUT, || async {
        let status = group.status(follower).await.ok()?;
        (status.raft_log_repair_up_to == 0).then_some(status)
    })
    .await?;
    assert!(
        repaired.raft_log_repair.ends_with("(done)"),
        "{:?}",
        repaired.raft_log_repair
    );
    assert!(repaired.last_log_index.is_some_and(|index| index >= held));

    info!(
        leader,
        "--- stop the leader: the other two elect one and lose nothing"
    );
    stop_leader_and_count(&mut group, leader, 100, 700).await?;
    group.shutdown().await;
    Ok(())
}

/// Copies the directory tree `from` to `to`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_an_async_follower_that_forgot_acked_entries_in_a_reboot_should_rejoin_and_lose_nothing()
-> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(3, 0x5EED_001A, |config| {
        config.flush = rocketraft_broker::config::FlushKind::Async;
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    send_many(&group, 200, 8).await?;
    assert_converged(&group, leader).await?;

    info!(follower, "--- keep the follower's files as they are now");
    let data_dir = group.data_dir(follower);
    let earlier = tempfile::tempdir()?;
    group.stop(follower).await;
    copy_tree(&data_dir, earlier.path())?;
    group.restart(follower).await?;

    info!("--- it acknowledges more entries, then loses them as a power loss would");
    send_many(&group, 400, 8).await?;
    assert_converged(&group, leader).await?;
    group.stop(follower).await;
    std::fs::remove_dir_all(&data_dir)?;
    copy_tree(earlier.path(), &data_dir)?;
    written_before_a_reboot(&data_dir)?;
    group.restart(follower).await?;
    let status = group.status(follower).await?;
    assert!(
        status.raft_log_after_power_loss,
        "it knows it may have forgotten entries"
    );

    info!("--- the leader accepts the shorter log instead of stopping, and nothing is lost");
    let settled = wait_for("the follower's catch-up", CONVERGE_TIMEOUT, || async {
        let status = group.status(follower).await.ok()?;
        (!status.raft_log_after_power_loss).then_some(status)
    })
    .await?;
    assert!(
        settled.raft_log_repair.contains("flush = async")
            && settled.raft_log_repair.ends_with("(done)"),
        "the status says what happened: {:?}",
        settled.raft_log_repair
    );
    send_many(&group, 100, 4).await?;
    assert_eq!(group.wait_for_leader(LEADER_TIMEOUT).await?, leader);
    assert_converged(&group, leader).await?;

    info!(
        "--- the whole group restarts after a reboot: most voters are in the same state, so they vote"
    );
    for id in 1..=3 {
        group.stop(id).await;
        written_before_a_reboot(&group.data_dir(id))?;
    }
    for id in 1..=3 {
        group.restart(id).await?;
    }
    let leader = group.wait_for_leader(CONVERGE_TIMEOUT).await?;
    send_many(&group, 100, 4).await?;
    assert_converged(&group, leader).await?;
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_forgetful_follower_whose_consenting_leader_stops_before_it_caught_up_the_two_left_should_still_elect()
-> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(3, 0x5EED_002A, |config| {
        config.flush = rocketraft_broker::config::FlushKind::Async;
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    let other = (1..=3)
        .find(|id| *id != leader && *id != follower)
        .context("a third node")?;
    send_many(&group, 200, 8).await?;
    assert_converged(&group, leader).await?;

    info!(
        follower,
        "--- the follower stops and misses messages; it restarts after a reboot, cut off from \
         the group's Raft traffic"
    );
    group.stop(follower).await;
    // Without them its log would hold all the leader's, and it could stand as soon as it
    // applied them: electing it would then be right.
    send_many(&group, 100, 4).await?;
    written_before_a_reboot(&group.data_dir(follower))?;
    group.faults.isolate(follower);
    group.restart(follower).await?;
    // The consent is an admin call on the broker API, which the cut leaves alone.
    let consented = wait_for("the leader's consent", CONVERGE_TIMEOUT, || async {
        let status = group.status(follower).await.ok()?;
        status
            .raft_log_repair
            .contains("votes for a candidate whose log reaches")
            .then_some(status)
    })
    .await?;
    assert!(
        consented.raft_log_after_power_loss,
        "it has not caught up: {:?}",
        consented.raft_log_repair
    );
    let leader_last = group.status(leader).await?.last_log_index;
    wait_for(
        "the other node holding the leader's log",
        CONVERGE_TIMEOUT,
        || async { (group.status(other).await.ok()?.last_log_index >= leader_last).then_some(()) },
    )
    .await?;

    info!(
        leader,
        "--- the leader stops before the follower caught up: the two left elect the other node"
    );
    group.stop(leader).await;
    group.faults.heal();
    assert_eq!(group.wait_for_leader(CONVERGE_TIMEOUT).await?, other);
    send_many(&group, 100, 4).await?;
    wait_for("the follower's catch-up", CONVERGE_TIMEOUT, || async {
        (!group.status(follower).await.ok()?.raft_log_after_power_loss).then_some(())
    })
    .await?;
    assert_converged(&group, other).await?;
    let units: usize = consume_queues(group.node(follower))
        .iter()
        .map(Vec::len)
        .sum();
    assert_eq!(units, 400, "every acknowledged message is in the queues");
    group.shutdown().await;
    Ok(())
}

/// Makes `data_dir`'s Raft log look written with `flush = async` under an earlier boot of the
/// machine, as after a power loss.
fn written_before_a_reboot(data_dir: &std::path::Path) -> anyhow::Result<()> {
    rocketraft_broker::durable_file::write_atomic(
        &data_dir.join("raft").join("log").join("boot"),
        b"00000000-0000-0000-0000-000000000000",
    )?;
    Ok(())
}

/// Flips one byte in the body of the first record of `node`'s CommitLog.
fn damage_commit_log(group: &TestGroup, node: u64) -> anyhow::Result<()> {
    let path = group
        .data_dir(node)
        .join("store")
        .join("commitlog")
        .join(format!("{:020}", 0));
    flip_byte(&path, 500, 0x40)?;
    info!(path = %path.display(), "flipped a byte in the first record");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_follower_commit_log_damaged_should_rebuild_it_from_the_group_and_lose_nothing()
-> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(3, 0x5EED_000B, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    send_many(&group, 300, 8).await?;
    let sent_at = std::time::SystemTime::now();
    info!("--- wait until the follower checkpointed the first record as flushed");
    let checkpoint = group
        .data_dir(follower)
        .join("raft")
        .join("state")
        .join("checkpoint");
    wait_for("a checkpoint after the sends", CONVERGE_TIMEOUT, || {
        let checkpoint = checkpoint.clone();
        let group = &group;
        async move {
            // An apply after the checkpoint interval writes the next checkpoint.
            group
                .group_client()
                .send(send_request("Ticks", 0, [b"tick".to_vec()]), SEND_TIMEOUT)
                .await
                .ok()?;
            let written = checkpoint.metadata().ok()?.modified().ok()?;
            (written > sent_at).then_some(())
        }
    })
    .await?;
    assert_converged(&group, leader).await?;
    let expected = group.node(leader).group().store().commit_log_max_offset();

    info!(
        follower,
        "--- stop the follower and flip a byte in its CommitLog"
    );
    group.stop(follower).await;
    damage_commit_log(&group, follower)?;
    group.restart(follower).await?;
    let repaired = wait_for("the follower's rebuild", CONVERGE_TIMEOUT, || async {
        let status = group.status(follower).await.ok()?;
        (status.raft_log_repair_up_to == 0 && !status.raft_log_repair.is_empty()).then_some(status)
    })
    .await?;
    assert!(
        repaired.raft_log_repair.ends_with("(done)"),
        "{:?}",
        repaired.raft_log_repair
    );
    let aside = std::fs::read_dir(group.data_dir(follower))?
        .filter_map(Result::ok)
        .any(|entry| entry.file_name().to_string_lossy().starts_with("damaged-"));
    assert!(aside, "the damaged state is kept aside for inspection");
    assert_converged(&group, leader).await?;
    assert!(group.node(follower).group().store().commit_log_max_offset() >= expected);

    info!(
        leader,
        "--- stop the leader: the rebuilt follower and the third node lose nothing"
    );
    stop_leader_and_count(&mut group, leader, 50, 350).await?;
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_single_node_with_a_damaged_raft_log_should_refuse_to_start() -> anyhow::Result<()>
{
    init_tracing();
    let mut group = TestGroup::start(1, 0x5EED_000C, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    send_many(&group, 300, 8).await?;
    group.stop(leader).await;
    damage_raft_log(&group, leader)?;
    let error = group
        .restart(leader)
        .await
        .expect_err("no other node holds the lost entries");
    assert!(
        format!("{error:#}").contains("no other node"),
        "the error says why: {error:#}"
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_node_that_never_answers_the_leader_should_still_be_found_at_once()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_000D, |_| {}).await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    // Accepts connections and never answers, as a paused (SIGSTOP) process does.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let silent_addr = silent.local_addr()?;
    let client =
        BrokerGroupClient::new(vec![silent_addr, group.addr(follower), group.addr(leader)]);
    let started = std::time::Instant::now();
    let report = client.find_leader_report().await.context("a leader")?;
    let took = started.elapsed();
    assert_eq!(report.addr, group.addr(leader));
    assert!(report.answered_itself);
    // Waiting for the silent node would take its whole status timeout (500 ms).
    assert!(
        took < Duration::from_millis(500),
        "a majority answered, yet the lookup took {took:?}"
    );

    info!("--- a majority naming a leader that does not answer itself is not waited on either");
    // The followers name the leader, which this search does not ask: as when the leader is
    // paused and they have not elected another yet.
    let others: Vec<_> = (1..=3)
        .filter(|id| *id != leader)
        .map(|id| group.addr(id))
        .collect();
    let hearsay = BrokerGroupClient::new([vec![silent_addr], others].concat());
    let started = std::time::Instant::now();
    let report = hearsay.find_leader_report().await.context("hearsay")?;
    let took = started.elapsed();
    assert_eq!(report.addr, group.addr(leader));
    assert!(!report.answered_itself);
    assert!(
        took < Duration::from_millis(500),
        "a majority answered, yet the lookup waited {took:?} for the silent node"
    );
    drop(silent);
    group.shutdown().await;
    Ok(())
}
