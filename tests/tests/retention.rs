//! Retention on real nodes with tiny segments: old CommitLog segments go on every node while
//! readers move to what is left, a follower that slept past the leader's retained range is
//! rebuilt from a snapshot plus the retained CommitLog (a queue none of whose records it was
//! shipped keeps its end, as on every other node), a delayed message not yet delivered
//! keeps its segment whatever its age, a popped message deleted before its ack does not hold
//! up an orderly pop group, and a full disk refuses sends but keeps serving pulls.

use std::time::Duration;

use rocketraft_broker::pop::state::PopQueueKey;
use rocketraft_client::admin::Admin;
use rocketraft_client::group::GroupError;
use rocketraft_client::message::Message;
use rocketraft_client::message::encode_properties;
use rocketraft_client::producer::Producer;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MIN;
use rocketraft_domain::names::SCHEDULE_TOPIC;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_tests::TestGroup;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::pull_request;
use rocketraft_tests::send_request;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(60);
const SEND_TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "RetainedTopic";
/// 256 KiB bodies, eight to a send: a (4 MiB) test segment holds about 16.
const BODY_BYTES: usize = 256 * 1024;
const BODIES_PER_SEND: usize = 8;
/// A queue that gets messages only before and after a follower's sleep.
const QUIET_QUEUE: i32 = 1;

fn body(i: usize) -> Vec<u8> {
    let mut body = format!("message {i:06} ").into_bytes();
    body.resize(BODY_BYTES, b'.');
    body
}

/// Sends messages `from..to` to queue 0.
async fn send_range(group: &TestGroup, from: usize, to: usize) -> anyhow::Result<()> {
    let client = group.group_client();
    for start in (from..to).step_by(BODIES_PER_SEND) {
        let bodies = (start..to.min(start + BODIES_PER_SEND)).map(body);
        client
            .send(send_request(TOPIC, 0, bodies), SEND_TIMEOUT)
            .await?;
    }
    Ok(())
}

/// A pull of queue 0 from offset 0 on the leader.
async fn pull_from_start(group: &TestGroup) -> anyhow::Result<pb::PullResponse> {
    let request = pull_request(TOPIC, 0, 0);
    Ok(group
        .group_client()
        .leader()
        .await?
        .pull(request)
        .await?
        .into_inner())
}

fn offsets(group: &TestGroup, node: u64) -> ((i64, i64), (i64, i64)) {
    let store = group.node(node).group().store();
    (
        (store.commit_log_min_offset(), store.commit_log_max_offset()),
        store.consume_queue_offsets(TOPIC, 0),
    )
}

/// The body of every message `node` still serves from queue 0, in queue order.
fn retained_bodies(group: &TestGroup, node: u64) -> anyhow::Result<Vec<Vec<u8>>> {
    let store = group.node(node).group().store();
    store
        .read_consume_queue(TOPIC, 0, 0, usize::MAX)
        .into_iter()
        .map(|unit| Ok(store.read_message(unit.commit_log_offset)?.body.to_vec()))
        .collect()
}

/// Node `node`'s first retained queue offset once retention stopped moving it: after the
/// last send, snapshots still advance for a few rounds and each lets retention delete more.
async fn settled_queue_min(group: &TestGroup, node: u64) -> anyhow::Result<i64> {
    // Several snapshot (300 ms) and retention (100 ms) rounds.
    const QUIET: Duration = Duration::from_millis(1200);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut last = offsets(group, node).1.0;
    loop {
        tokio::time::sleep(QUIET).await;
        let now = offsets(group, node).1.0;
        if now == last {
            return Ok(now);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "retention kept deleting"
        );
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_expired_segments_every_node_should_drop_them_and_a_sleeping_follower_catch_up()
-> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(3, 0x5EED_2E7A, |config| {
        config.retention.file_reserved_hours = 0;
        config.retention.check_interval_ms = 100;
        config.raft.log_compaction_interval_ms = 300;
        // A follower that misses a few entries needs a snapshot.
        config.raft.log_retained_entries = 2;
    })
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let sleeper = group.a_follower(leader);

    info!("--- two messages to a queue that then stays quiet");
    group
        .group_client()
        .send(
            send_request(TOPIC, QUIET_QUEUE, [body(0), body(1)]),
            SEND_TIMEOUT,
        )
        .await?;

    info!("--- about six segments of messages");
    send_range(&group, 0, 100).await?;
    let ((_, end), _) = offsets(&group, leader);
    wait_for(
        "every node deleted its oldest segments",
        TIMEOUT,
        || async {
            (1..=3)
                .all(|id| {
                    let ((min, max), (queue_min, _)) = offsets(&group, id);
                    max == end && min > 0 && queue_min > 0
                })
                .then_some(())
        },
    )
    .await?;
    let queue_min = settled_queue_min(&group, leader).await?;
    let ((_, _), (_, queue_max)) = offsets(&group, leader);
    assert_eq!(queue_max, 100);
    let pulled = pull_from_start(&group).await?;
    assert_eq!(pulled.status, pb::PullStatus::OffsetIllegal as i32);
    assert_eq!(
        (pulled.min_offset, pulled.next_offset),
        (queue_min, queue_min)
    );
    let kept = retained_bodies(&group, leader)?;
    let first_kept = usize::try_from(queue_min)?;
    assert_eq!(kept.len(), 100 - first_kept);
    assert!(
        kept.iter()
            .enumerate()
            .all(|(i, b)| *b == body(first_kept + i))
    );

    info!(
        sleeper,
        "--- a follower sleeps while the leader writes and deletes past its end"
    );
    let ((_, sleeper_end), _) = offsets(&group, sleeper);
    group.stop(sleeper).await;
    send_range(&group, 100, 200).await?;
    wait_for(
        "the leader deleted past the sleeper's end",
        TIMEOUT,
        || async { (offsets(&group, leader).0.0 > sleeper_end).then_some(()) },
    )
    .await?;
    group.restart(sleeper).await?;
    send_range(&group, 200, 208).await?;
    let ((_, end), (_, queue_max)) = offsets(&group, leader);
    assert_eq!(queue_max, 208);
    let quiet = |id: u64| {
        group
            .node(id)
            .group()
            .store()
            .consume_queue_offsets(TOPIC, QUIET_QUEUE)
    };
    assert_eq!(quiet(leader), (2, 2), "retention deleted both");
    // The leader may send a second snapshot while the sleeper installs the first: until an
    // install ends, its store holds the CommitLog so far and not yet every queue's end.
    info!("--- the quiet queue, none of whose records were shipped, ends where it ends elsewhere");
    wait_for(
        "the sleeper caught up, every queue included",
        TIMEOUT,
        || async {
            let ((min, max), (_, sleeper_queue_max)) = offsets(&group, sleeper);
            (max == end
                && min > sleeper_end
                && sleeper_queue_max == queue_max
                && quiet(sleeper) == quiet(leader))
            .then_some(())
        },
    )
    .await?;
    group
        .group_client()
        .send(send_request(TOPIC, QUIET_QUEUE, [body(2)]), SEND_TIMEOUT)
        .await?;
    wait_for(
        "every node stored the quiet queue's third message as its third",
        TIMEOUT,
        || async { (1..=3).all(|id| quiet(id) == (2, 3)).then_some(()) },
    )
    .await?;

    // Retention may still delete on the sleeper: compare once its first offset settled.
    let sleeper_queue_min = settled_queue_min(&group, sleeper).await?;
    let sleeper_kept = retained_bodies(&group, sleeper)?;
    let first_kept = usize::try_from(sleeper_queue_min)?;
    assert!(first_kept > 100, "the sleeper restarted past what it had");
    assert_eq!(sleeper_kept.len(), 208 - first_kept);
    assert!(
        sleeper_kept
            .iter()
            .enumerate()
            .all(|(i, b)| *b == body(first_kept + i))
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_delayed_message_in_an_expired_segment_it_should_be_kept_until_delivered()
-> anyhow::Result<()> {
    // Long enough for the sends and retention rounds below to end well before it.
    const DELAY: Duration = Duration::from_secs(15);
    const DELAYED_QUEUE: i32 = 1;
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_DE1A, |config| {
        config.retention.file_reserved_hours = 0;
        config.retention.check_interval_ms = 100;
        config.raft.log_compaction_interval_ms = 300;
        config.delay_levels = format!("{}s", DELAY.as_secs());
    })
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    send_range(&group, 0, 40).await?;
    wait_for("retention at work", TIMEOUT, || async {
        (1..=3).all(|id| offsets(&group, id).0.0 > 0).then_some(())
    })
    .await?;

    info!("--- a delayed message, then enough messages for its segment to expire");
    let mut delayed = send_request(TOPIC, DELAYED_QUEUE, [b"delayed".to_vec()]);
    delayed.messages[0].properties = encode_properties([("DELAY", "1")]);
    group.group_client().send(delayed, SEND_TIMEOUT).await?;
    let parked_at = {
        let store = group.node(leader).group().store();
        store.read_consume_queue(SCHEDULE_TOPIC, 0, 0, 1)[0].commit_log_offset
    };
    send_range(&group, 40, 100).await?;
    settled_queue_min(&group, leader).await?;
    let mins: Vec<i64> = (1..=3).map(|id| offsets(&group, id).0.0).collect();
    let (_, delivered) = group
        .node(leader)
        .group()
        .store()
        .consume_queue_offsets(TOPIC, DELAYED_QUEUE);
    anyhow::ensure!(
        delivered == 0,
        "delivered before the check: make DELAY longer"
    );
    for (id, min) in (1..=3).zip(mins) {
        assert!(
            min <= parked_at,
            "node {id} deleted from {min}, past the undelivered message at {parked_at}"
        );
    }

    info!("--- delivered when due, after which its segment may go");
    let delivered = wait_for("the delayed message delivered", TIMEOUT, || async {
        let store = group.node(leader).group().store();
        let unit = store.read_consume_queue(TOPIC, DELAYED_QUEUE, 0, 1).pop()?;
        Some(
            store
                .read_message(unit.commit_log_offset)
                .ok()?
                .body
                .to_vec(),
        )
    })
    .await?;
    assert_eq!(delivered, b"delayed");
    wait_for("every node deleted past it", TIMEOUT, || async {
        (1..=3)
            .all(|id| offsets(&group, id).0.0 > parked_at)
            .then_some(())
    })
    .await?;
    group.shutdown().await;
    Ok(())
}

/// A pop of up to 4 messages of queue 0 for `group`, invisible for the shortest time allowed.
async fn pop(group: &TestGroup, pop_group: &str) -> anyhow::Result<Vec<i64>> {
    let request = pb::PopRequest {
        group: pop_group.into(),
        topic: TOPIC.into(),
        queue_id: 0,
        max_messages: 4,
        invisible_ms: POP_INVISIBLE_MS_MIN,
        ..Default::default()
    };
    let response = group
        .group_client()
        .leader()
        .await?
        .pop(request)
        .await?
        .into_inner();
    Ok(response
        .messages
        .iter()
        .filter_map(|popped| Some(popped.message.as_ref()?.queue_offset))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_popped_message_retention_deleted_an_orderly_group_should_move_past_it()
-> anyhow::Result<()> {
    const POP_GROUP: &str = "orderly-poppers";
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_90B5, |config| {
        config.retention.file_reserved_hours = 0;
        config.retention.check_interval_ms = 100;
        config.raft.log_compaction_interval_ms = 300;
    })
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    group
        .group_client()
        .leader()
        .await?
        .upsert_group(pb::UpsertGroupRequest {
            group: POP_GROUP.into(),
            consume_orderly: true,
            ..Default::default()
        })
        .await?;
    send_range(&group, 0, 1).await?;
    assert_eq!(pop(&group, POP_GROUP).await?, vec![0]);

    info!("--- never acked; retention deletes it with the oldest segments");
    send_range(&group, 1, 100).await?;
    let queue_min = settled_queue_min(&group, leader).await?;
    assert!(queue_min > 0, "retention deleted the popped message");
    let next = pop(&group, POP_GROUP).await?;
    assert_eq!(
        next.first(),
        Some(&queue_min),
        "the orderly queue delivers the oldest kept message, not nothing"
    );
    let key = PopQueueKey {
        group: POP_GROUP.into(),
        topic: TOPIC.into(),
        queue_id: 0,
    };
    let in_flight: Vec<i64> = {
        let group_state = group.node(leader).group();
        let metadata = group_state.metadata();
        metadata
            .pops
            .queue(&key)
            .map(|queue| queue.in_flight.keys().copied().collect())
            .unwrap_or_default()
    };
    assert_eq!(in_flight, next, "the deleted message left flight");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_disk_past_its_full_mark_sends_should_be_refused_and_pulls_served()
-> anyhow::Result<()> {
    init_tracing();
    let mut group = TestGroup::start(1, 0x5EED_D15C, |config| {
        config.retention.check_interval_ms = 100;
    })
    .await?;
    group.wait_for_leader(TIMEOUT).await?;
    send_range(&group, 0, 8).await?;

    info!("--- the same disk, with the full mark below its usage");
    group.stop(1).await;
    group
        .restart_with(1, |config| {
            config.retention.disk_max_used_ratio = 1e-9;
            config.retention.disk_full_ratio = 1e-9;
        })
        .await?;
    group.wait_for_leader(TIMEOUT).await?;
    let client = group.group_client();
    let refused = wait_for("a send refused for the full disk", TIMEOUT, || async {
        match client
            .send(send_request(TOPIC, 0, [body(8)]), SEND_TIMEOUT)
            .await
        {
            Err(GroupError::Rejected(status)) => Some(status),
            _ => None,
        }
    })
    .await?;
    assert_eq!(
        rocketraft_proto::response_code(&refused),
        Some(ResponseCode::DiskFull)
    );
    assert!(refused.message().contains("disk_full_ratio"), "{refused:?}");
    let status = group.status(1).await?;
    assert!(status.disk_full);
    assert!(status.disk_used_ratio > 0.0 && status.disk_used_ratio <= 1.0);
    // The restarted leader re-applies its log's tail after it is elected, so the messages
    // may come back a moment after the refusal.
    let pulled = wait_for("the stored messages pulled", TIMEOUT, || async {
        pull_from_start(&group)
            .await
            .ok()
            .filter(|pulled| pulled.status == pb::PullStatus::Found as i32)
    })
    .await?;
    assert_eq!(pulled.messages.len(), 8);
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_one_group_with_a_full_disk_the_producer_should_send_to_the_other()
-> anyhow::Result<()> {
    init_tracing();
    let full = GROUPS[0];
    let cluster = TestCluster::start_with(0x5EED_F011, |config| {
        config.retention.check_interval_ms = 100;
        if config.group == full {
            config.retention.disk_max_used_ratio = 1e-9;
            config.retention.disk_full_ratio = 1e-9;
        }
    })
    .await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let producer = Producer::builder(cluster.nameservers(), "disk-full-producer").build()?;
    for i in 0..20 {
        let sent = producer
            .send(Message::new(TOPIC, format!("message {i}")))
            .await?;
        assert_ne!(sent.group, full, "message {i} went to the full group");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_group_behind_the_retained_range_consumer_progress_should_report_the_skip()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start_with(0x5EED_5C1B, |config| {
        config.retention.file_reserved_hours = 0;
        config.retention.check_interval_ms = 100;
        config.raft.log_compaction_interval_ms = 300;
    })
    .await?;
    cluster.create_topic(TOPIC, 1).await?;
    cluster.wait_for_route(TOPIC).await?;
    let deleting = cluster.group(GROUPS[0]);
    let leader = deleting.wait_for_leader(TIMEOUT).await?;
    let committed_at_zero = pb::CommitOffsetsRequest {
        group: "lagging".into(),
        offsets: vec![pb::QueueOffsetEntry {
            topic: TOPIC.into(),
            queue_id: 0,
            offset: 0,
        }],
    };
    deleting
        .client(leader)
        .await?
        .commit_offsets(committed_at_zero)
        .await?;
    send_range(deleting, 0, 100).await?;
    wait_for("the oldest segments deleted", TIMEOUT, || async {
        (offsets(deleting, leader).1.0 > 0).then_some(())
    })
    .await?;

    let progress = Admin::new(cluster.nameservers())
        .consumer_progress("lagging", Some(TOPIC))
        .await?;
    let behind = progress
        .iter()
        .find(|queue| queue.broker_group == GROUPS[0])
        .expect("a queue of the deleting group");
    assert_eq!(behind.committed_offset, Some(0));
    assert!(behind.min_offset > 0);
    assert_eq!(behind.skipped, behind.min_offset);
    assert_eq!(behind.lag, behind.max_offset - behind.min_offset);
    let untouched = progress
        .iter()
        .find(|queue| queue.broker_group == GROUPS[1])
        .expect("a queue of the other group");
    assert_eq!((untouched.skipped, untouched.lag), (0, 0));
    Ok(())
}
