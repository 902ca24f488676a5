//! Online membership changes under load, through the admin API `mqadmin` uses: a 3-node
//! group grows to 5, shrinks back to 3 (its leader among the removed), and a killed node's
//! place goes to a fresh node at a new address. A producer sends all along; every
//! acknowledged send is where it was acknowledged at the end, on the final leader and on
//! the node that joined last, and the nameserver's route names exactly the voters.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_client::admin::Admin;
use rocketraft_client::admin::AdminError;
use rocketraft_client::admin::NewNode;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::producer::SendResult;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_proto::broker as pb;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::start_nameserver;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(30);
const GROUP: &str = "broker-a";
const TOPIC: &str = "Members";
/// A route entry of a node that stopped registering expires this soon.
const BROKER_EXPIRY: Duration = Duration::from_secs(2);
/// Sends acknowledged between two changes: every change happens under load.
const SENDS_PER_STEP: usize = 40;

struct Load {
    sending: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<anyhow::Result<Vec<SendResult>>>,
}

impl Load {
    fn start(producer: Producer) -> Load {
        let sending = Arc::new(AtomicBool::new(true));
        let acked = Arc::new(AtomicUsize::new(0));
        let task = {
            let (sending, acked) = (sending.clone(), acked.clone());
            tokio::spawn(async move {
                let mut results = Vec::new();
                let mut i = 0usize;
                while sending.load(Ordering::Relaxed) {
                    // A send may fail while leadership moves; the SDK retries it, and one
                    // that still fails was not acknowledged (not counted).
                    if let Ok(result) = producer.send(Message::new(TOPIC, format!("m{i}"))).await {
                        results.push(result);
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
                Ok(results)
            })
        };
        Load {
            sending,
            acked,
            task,
        }
    }

    /// Waits until `SENDS_PER_STEP` more sends were acknowledged.
    async fn goes_on(&self, step: &str) -> anyhow::Result<()> {
        let from = self.acked.load(Ordering::Relaxed);
        wait_for(step, TIMEOUT, || async {
            (self.acked.load(Ordering::Relaxed) >= from + SENDS_PER_STEP).then_some(())
        })
        .await
    }

    async fn stop(self) -> anyhow::Result<Vec<SendResult>> {
        self.sending.store(false, Ordering::Relaxed);
        self.task.await?
    }
}

async fn voters(group: &TestGroup, id: u64) -> anyhow::Result<BTreeSet<u64>> {
    Ok(group.status(id).await?.voters.into_keys().collect())
}

/// Waits until the nameserver routes the group to exactly `nodes`.
async fn route_follows(admin: &Admin, nodes: &BTreeSet<u64>) -> anyhow::Result<()> {
    wait_for("the route to name exactly the voters", TIMEOUT, || async {
        let info = admin.cluster_info().await.ok()?;
        let route = info.groups.iter().find(|route| route.group == GROUP)?;
        let routed: BTreeSet<u64> = route.nodes.keys().copied().collect();
        (&routed == nodes && route.leader_id.is_some()).then_some(())
    })
    .await
}

/// Every acknowledged send is where it was acknowledged, read on node `id`.
async fn assert_stored_on(group: &TestGroup, id: u64, acked: &[SendResult]) -> anyhow::Result<()> {
    let mut client = group.client(id).await?;
    for result in acked {
        let request = pb::ReadConsumeQueueRequest {
            topic: TOPIC.into(),
            queue_id: result.queue_id,
            from_queue_offset: result.queue_offset,
            max_units: 1,
        };
        let units = client.read_consume_queue(request).await?.into_inner().units;
        assert_eq!(
            units.first().map(|unit| unit.commit_log_offset),
            Some(result.commit_log_offset),
            "node {id}: {result:?} is not where it was acknowledged"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_load_a_group_should_grow_shrink_and_replace_a_dead_node_losing_nothing()
-> anyhow::Result<()> {
    init_tracing();
    let nameserver = start_nameserver(NameServerConfig {
        broker_expiry: BROKER_EXPIRY,
        ..NameServerConfig::default()
    })
    .await?;
    let nameservers = vec![nameserver.addr().to_string()];
    let mut group = TestGroup::start(3, 0x5EED_1101, |config| {
        config.group = GROUP.to_owned();
        config.namesrv = nameservers.clone();
    })
    .await?;
    group.wait_for_leader(TIMEOUT).await?;
    let admin = Admin::new(nameservers.clone());
    route_follows(&admin, &BTreeSet::from([1, 2, 3])).await?;
    let load = Load::start(Producer::builder(nameservers.clone(), "members-producer").build()?);
    load.goes_on("sends before any change").await?;

    info!("--- grow 3 -> 5: each new node joins as a learner, catches up, then votes");
    for _ in 0..2 {
        // Asked before the new node runs: a node outside the group knows no leader.
        let leader = group.wait_for_leader(TIMEOUT).await?;
        let id = group.start_new_node().await?;
        assert_eq!(group.status(id).await?.role, "learner", "not added yet");
        let leader_log = group.status(leader).await?.last_log_index;
        let changed = admin
            .change_membership(GROUP, Some(group.new_node(id)), &[])
            .await?;
        info!(
            id,
            catch_up_ms = changed.catch_up_ms,
            change_ms = changed.change_ms,
            "added"
        );
        assert!(changed.voters.contains_key(&id), "{changed:?}");
        // It became a voter only once it held what the leader had when it was added.
        assert!(
            group.status(id).await?.last_log_index >= leader_log,
            "node {id} voted before it caught up"
        );
        load.goes_on("sends after an add").await?;
    }
    let five = BTreeSet::from([1, 2, 3, 4, 5]);
    let leader = group.wait_for_leader(TIMEOUT).await?;
    assert_eq!(voters(&group, leader).await?, five);
    route_follows(&admin, &five).await?;

    info!(
        leader,
        "--- shrink 5 -> 3: the leader and one follower leave"
    );
    let removed = [leader, group.a_follower(leader)];
    for id in removed {
        let changed = admin.change_membership(GROUP, None, &[id]).await?;
        assert!(!changed.voters.contains_key(&id), "{changed:?}");
        load.goes_on("sends after a removal").await?;
    }
    let three: BTreeSet<u64> = five
        .iter()
        .copied()
        .filter(|id| !removed.contains(id))
        .collect();
    // The removed nodes still run; the route leaves them out all the same.
    route_follows(&admin, &three).await?;
    for id in removed {
        group.forget(id).await;
    }
    let leader = group.wait_for_leader(TIMEOUT).await?;
    assert_eq!(voters(&group, leader).await?, three);

    info!("--- a voter is killed; a fresh node at a new address takes its place");
    let dead = group.a_follower(leader);
    group.stop(dead).await;
    let fresh = group.start_new_node().await?;
    let changed = admin
        .change_membership(GROUP, Some(group.new_node(fresh)), &[dead])
        .await?;
    info!(
        fresh,
        dead,
        catch_up_ms = changed.catch_up_ms,
        change_ms = changed.change_ms,
        "replaced"
    );
    group.forget(dead).await;
    let replaced: BTreeSet<u64> = three
        .iter()
        .copied()
        .filter(|id| *id != dead)
        .chain([fresh])
        .collect();
    assert_eq!(
        changed.voters.keys().copied().collect::<BTreeSet<_>>(),
        replaced
    );
    load.goes_on("sends after the replacement").await?;
    route_follows(&admin, &replaced).await?;

    info!("--- refused changes name the reason and change nothing");
    let refusal = |error: AdminError| match error {
        AdminError::Refused { status, .. } => status,
        other => panic!("expected a refusal, got {other}"),
    };
    let stranger = refusal(
        admin
            .change_membership(GROUP, None, &[99])
            .await
            .expect_err("no such node"),
    );
    assert_eq!(stranger.code(), tonic::Code::InvalidArgument);
    assert!(stranger.message().contains("not a member"), "{stranger:?}");
    let bad = refusal(
        admin
            .change_membership(
                GROUP,
                Some(NewNode {
                    id: 9,
                    addr: "nowhere".into(),
                    raft_addr: None,
                }),
                &[],
            )
            .await
            .expect_err("bad address"),
    );
    assert!(bad.message().contains("ip:port"), "{bad:?}");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    assert_eq!(voters(&group, leader).await?, replaced);

    let acked = load.stop().await?;
    info!(acked = acked.len(), "--- every acknowledged send is stored");
    assert_stored_on(&group, leader, &acked).await?;
    wait_for("the fresh node to apply everything", TIMEOUT, || async {
        let leader_applied = group.status(leader).await.ok()?.last_applied_index;
        (group.status(fresh).await.ok()?.last_applied_index >= leader_applied).then_some(())
    })
    .await?;
    assert_stored_on(&group, fresh, &acked).await?;
    group.shutdown().await;
    nameserver.shutdown().await;
    Ok(())
}
