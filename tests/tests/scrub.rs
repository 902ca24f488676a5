//! The scrubber finds bit rot in a running node's CommitLog and ConsumeQueues and repairs it
//! from the group: real nodes, real files damaged behind their backs, real gRPC between peers.

use std::time::Duration;

use rocketraft_broker::store::CqUnit;
use rocketraft_proto::broker as pb;
use rocketraft_tests::TestGroup;
use rocketraft_tests::flip_byte;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::wait_for;
use tracing::info;

const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
const REPAIR_TIMEOUT: Duration = Duration::from_secs(30);
const SEND_TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "ScrubTopic";
const MESSAGES: i64 = 200;

/// The unit of `TOPIC` queue 0 at `queue_offset` on `node`.
fn unit(group: &TestGroup, node: u64, queue_offset: i64) -> CqUnit {
    group
        .node(node)
        .group()
        .store()
        .read_consume_queue(TOPIC, 0, queue_offset, 1)[0]
}

fn commit_log(group: &TestGroup, node: u64, unit: CqUnit) -> Vec<u8> {
    group
        .node(node)
        .group()
        .store()
        .read_commit_log(unit.commit_log_offset, unit.size as usize)
        .expect("read")
}

async fn wait_for_status(
    group: &TestGroup,
    node: u64,
    what: &str,
    done: impl Fn(&pb::NodeStatusResponse) -> bool,
) -> anyhow::Result<pb::NodeStatusResponse> {
    wait_for(what, REPAIR_TIMEOUT, || async {
        group.status(node).await.ok().filter(|status| done(status))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_bit_rot_in_a_running_group_the_scrubber_should_repair_it_from_peers()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_5C2B, |config| {
        config.scrub_bytes_per_sec = 64 * 1024 * 1024;
        config.scrub_pass_interval_ms = 50;
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    let other = (1..=3)
        .find(|id| *id != leader && *id != follower)
        .expect("3 nodes");
    let client = group.group_client();
    for i in 0..MESSAGES {
        let body = format!("message {i:06} ").repeat(64).into_bytes();
        client
            .send(send_request(TOPIC, 0, [body]), SEND_TIMEOUT)
            .await?;
    }
    let end = group.node(leader).group().store().commit_log_max_offset();
    wait_for(
        "every node applied every message",
        REPAIR_TIMEOUT,
        || async {
            (1..=3)
                .all(|id| group.node(id).group().store().commit_log_max_offset() == end)
                .then_some(())
        },
    )
    .await?;
    let commit_log_file = |node: u64| {
        group
            .data_dir(node)
            .join("store")
            .join("commitlog")
            .join(format!("{:020}", 0))
    };

    info!(follower, "--- a flipped bit in a record body of a follower");
    let body_rot = unit(&group, leader, 50);
    let intact = commit_log(&group, leader, body_rot);
    flip_byte(
        &commit_log_file(follower),
        body_rot.commit_log_offset as u64 + 400,
        0x08,
    )?;
    assert_ne!(commit_log(&group, follower, body_rot), intact);
    let status = wait_for_status(&group, follower, "the body repaired", |status| {
        status.scrub_records_repaired >= 1
    })
    .await?;
    assert_eq!(commit_log(&group, follower, body_rot), intact);
    assert!(
        status
            .scrub_last_finding
            .contains(&body_rot.commit_log_offset.to_string()),
        "{:?}",
        status.scrub_last_finding
    );

    info!(leader, "--- a record's magic code damaged on the leader");
    let header_rot = unit(&group, leader, 120);
    let intact = commit_log(&group, leader, header_rot);
    flip_byte(
        &commit_log_file(leader),
        header_rot.commit_log_offset as u64 + 5,
        0xff,
    )?;
    wait_for_status(
        &group,
        leader,
        "the header repaired from a follower",
        |status| status.scrub_records_repaired >= 1,
    )
    .await?;
    assert_eq!(commit_log(&group, leader, header_rot), intact);

    info!(
        other,
        "--- a ConsumeQueue unit's size damaged on the other follower"
    );
    let intact_unit = unit(&group, leader, 150);
    flip_byte(
        &group
            .data_dir(other)
            .join("store")
            .join("consumequeue")
            .join(TOPIC)
            .join("0")
            .join(format!("{:020}", 0)),
        150 * 20 + 11,
        0x01,
    )?;
    assert_ne!(unit(&group, other, 150), intact_unit);
    let status = wait_for_status(&group, other, "the unit rewritten", |status| {
        status.scrub_units_repaired >= 1
    })
    .await?;
    assert_eq!(unit(&group, other, 150), intact_unit);
    assert_eq!(status.scrub_records_repaired, 0, "its CommitLog was intact");

    for node in 1..=3 {
        let status = group.status(node).await?;
        assert_eq!(status.scrub_unrepaired, 0, "node {node}: {status:?}");
        assert!(status.scrub_passes >= 1 && status.scrub_bytes_checked >= end as u64);
    }
    group.shutdown().await;
    Ok(())
}
