//! Planned leadership transfer: a 3-node group hands leadership to a chosen follower while
//! a producer keeps sending; every acknowledged send is where it was acknowledged on the new
//! leader, and the longest send during the transfer is reported.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_proto::response_code;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "Moving";
const QUEUES: usize = 4;
/// Sends acknowledged before the transfer starts, and again on the new leader before the
/// producer stops: the transfer happens under load and the load goes on after it.
const SENDS_AROUND_TRANSFER: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_transfer_the_chosen_node_should_lead_and_nothing_acknowledged_is_lost()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0901, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let target = group.a_follower(leader);
    let sending = Arc::new(AtomicBool::new(true));
    let acked_count = Arc::new(AtomicUsize::new(0));
    let sender = {
        let (client, sending) = (group.group_client(), sending.clone());
        let acked_count = acked_count.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut slowest = Duration::ZERO;
            let mut i = 0usize;
            while sending.load(Ordering::Relaxed) {
                let request =
                    send_request(TOPIC, (i % QUEUES) as i32, [format!("m{i}").into_bytes()]);
                let started = Instant::now();
                let response = client.send(request, Duration::from_secs(10)).await?;
                slowest = slowest.max(started.elapsed());
                acked.extend(response.results);
                acked_count.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            anyhow::Ok((acked, slowest))
        })
    };
    let acked_at_least = |count: usize| {
        let acked_count = acked_count.clone();
        async move { (acked_count.load(Ordering::Relaxed) >= count).then_some(()) }
    };
    wait_for("sends before the transfer", TIMEOUT, || {
        acked_at_least(SENDS_AROUND_TRANSFER)
    })
    .await?;

    info!(leader, target, "--- transfer leadership under load");
    let mut client = group.client(leader).await?;
    let moved = client
        .transfer_leader(pb::TransferLeaderRequest { to_node_id: target })
        .await?
        .into_inner();
    assert_eq!(moved.leader_id, target);
    assert_eq!(group.status(target).await?.role, "leader");
    let acked_at_transfer = acked_count.load(Ordering::Relaxed);
    wait_for("sends after the transfer", TIMEOUT, || {
        acked_at_least(acked_at_transfer + SENDS_AROUND_TRANSFER)
    })
    .await?;
    sending.store(false, Ordering::Relaxed);
    let (acked, slowest) = sender.await??;
    info!(
        acked = acked.len(),
        ?slowest,
        "longest send while leadership moved"
    );

    let mut new_leader = group.client(target).await?;
    for result in &acked {
        let request = pb::ReadConsumeQueueRequest {
            topic: TOPIC.into(),
            queue_id: result.queue_id,
            from_queue_offset: result.queue_offset,
            max_units: 1,
        };
        let units = new_leader
            .read_consume_queue(request)
            .await?
            .into_inner()
            .units;
        assert_eq!(
            units.first().map(|unit| unit.commit_log_offset),
            Some(result.commit_log_offset),
            "{result:?} is not where it was acknowledged"
        );
    }

    info!("--- refusals: a node that is not a voter, and a node that does not lead");
    let stranger = new_leader
        .transfer_leader(pb::TransferLeaderRequest { to_node_id: 9 })
        .await
        .expect_err("not a voter");
    assert_eq!(stranger.code(), tonic::Code::InvalidArgument);
    let follower = group
        .client(leader)
        .await?
        .transfer_leader(pb::TransferLeaderRequest { to_node_id: leader })
        .await
        .expect_err("the old leader follows now");
    assert_eq!(response_code(&follower), Some(ResponseCode::NotLeader));
    wait_for("a stable leader", TIMEOUT, || async {
        (group.wait_for_leader(TIMEOUT).await.ok()? == target).then_some(())
    })
    .await?;
    group.shutdown().await;
    Ok(())
}
