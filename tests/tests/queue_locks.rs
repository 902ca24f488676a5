//! The leader's queue locks for orderly consumers, on a real 3-node group: one holder per
//! queue, release and expiry, followers refuse, and after a leader change the new leader
//! grants renewals at once and other locks only after its grace period. The nodes read a
//! manual clock, which the test moves past the grace period and the expiry.

use std::time::Duration;

use rocketraft_broker::queue_locks::QUEUE_LOCK_EXPIRY_DEFAULT;
use rocketraft_domain::clock::ManualClock;
use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use rocketraft_tests::Extras;
use rocketraft_tests::TestGroup;
use rocketraft_tests::advance_until;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tonic::transport::Channel;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a lock lasts without renewal: RocketMQ's 60 s, on the nodes' manual clock.
const LOCK_EXPIRY: Duration = QUEUE_LOCK_EXPIRY_DEFAULT;
/// A new leader's grace period.
const GRACE: Duration = Duration::from_secs(LOCK_EXPIRY.as_secs() / 2);

fn queues(ids: &[i32]) -> Vec<pb::QueueRef> {
    ids.iter()
        .map(|id| pb::QueueRef {
            topic: "Orders".into(),
            queue_id: *id,
        })
        .collect()
}

/// Asks for `wanted` (holding `held`) as `client`; the queue ids it holds after.
async fn lock(
    client: &mut BrokerClient<Channel>,
    member: &str,
    wanted: &[i32],
    held: &[i32],
) -> Result<Vec<i32>, tonic::Status> {
    let response = client
        .lock_queues(pb::LockQueuesRequest {
            group: "orderly".into(),
            client_id: member.into(),
            queues: queues(wanted),
            held: queues(held),
        })
        .await?
        .into_inner();
    Ok(response.locked.iter().map(|queue| queue.queue_id).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_queue_locks_one_member_should_hold_each_queue_across_a_leader_change()
-> anyhow::Result<()> {
    init_tracing();
    let clock = ManualClock::starting_now();
    let extras = Extras::on_clock(&clock);
    let group = TestGroup::start_with_extras(
        3,
        0x5EED_0C01,
        |config| config.queue_lock_expiry_ms = LOCK_EXPIRY.as_millis() as u64,
        extras,
    )
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    info!("--- the first locks come once the new leader's grace period ends");
    advance_until("c1 holds queues 0 and 1", &clock, GRACE, TIMEOUT, || {
        let mut client = client.clone();
        async move { (lock(&mut client, "c1", &[0, 1], &[]).await.ok()? == [0, 1]).then_some(()) }
    })
    .await?;
    assert_eq!(
        lock(&mut client, "c2", &[1, 2], &[]).await?,
        [2],
        "1 is c1's"
    );
    client
        .unlock_queues(pb::UnlockQueuesRequest {
            group: "orderly".into(),
            client_id: "c1".into(),
            queues: queues(&[1]),
        })
        .await?;
    assert_eq!(
        lock(&mut client, "c2", &[1, 2], &[2]).await?,
        [1, 2],
        "1 was released"
    );
    let follower = group.a_follower(leader);
    let refused = lock(&mut group.client(follower).await?, "c1", &[0], &[0]).await;
    assert!(refused.is_err(), "a follower grants nothing");

    info!("--- a new leader: renewals at once, nothing else until its grace period ends");
    let new_leader = group.isolate_leader(leader, TIMEOUT).await?;
    group.faults.heal();
    let mut client = group.client(new_leader).await?;
    wait_for("c1 renews queue 0 with the new leader", TIMEOUT, || {
        let mut client = client.clone();
        async move { (lock(&mut client, "c1", &[0], &[0]).await.ok()? == [0]).then_some(()) }
    })
    .await?;
    assert_eq!(
        lock(&mut client, "c3", &[0, 3], &[]).await?,
        Vec::<i32>::new(),
        "0 is renewed by c1, 3 is free but c3 held nothing: it waits out the grace period"
    );
    assert_eq!(lock(&mut client, "c2", &[1, 2], &[1, 2]).await?, [1, 2]);
    clock.advance(GRACE);
    assert_eq!(
        lock(&mut client, "c3", &[0, 3], &[]).await?,
        [3],
        "the grace period ended; 0 is still c1's"
    );

    info!("--- a lock not renewed for its expiry is free");
    clock.advance(LOCK_EXPIRY);
    assert_eq!(
        lock(&mut client, "c3", &[0, 3], &[3]).await?,
        [0, 3],
        "c1 let its lock on 0 expire"
    );
    let too_many: Vec<i32> = (0..=1024).collect();
    let error = lock(&mut client, "c3", &too_many, &[])
        .await
        .expect_err("1025 queues");
    assert_eq!(
        error.code(),
        tonic::Code::InvalidArgument,
        "{}",
        error.message()
    );
    group.shutdown().await;
    Ok(())
}
