//! A node shut down under load and started again at once on its own data dir: its shutdown
//! returns only when nothing of it still runs (no task, snapshot build or call of the old
//! node holds its group state, so none can touch the store once the data dir is unlocked),
//! the new node opens the same dir, and the group keeps every acknowledged message.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::wait_for;

const TIMEOUT: Duration = Duration::from_secs(20);
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// After a failed send, before the next.
const SEND_RETRY_PAUSE: Duration = Duration::from_millis(50);
const TOPIC: &str = "Restarted";
/// Shutdown-and-restart rounds, alternating the leader and a follower.
const ROUNDS: usize = 6;
/// Sends acknowledged between two rounds: the load runs through each.
const SENDS_PER_ROUND: usize = 20;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_load_a_node_restarted_at_once_should_find_nothing_of_its_old_self_running()
-> anyhow::Result<()> {
    init_tracing();
    // Snapshots every 300 ms, so builds are often in flight at a shutdown.
    let mut group = TestGroup::start(3, 0x5EED_5EA1, |config| {
        config.raft.log_compaction_interval_ms = 300;
    })
    .await?;
    group.wait_for_leader(TIMEOUT).await?;

    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (client, acked, stop) = (group.group_client(), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut sequence = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let body = format!("m{sequence}").into_bytes();
                // A send may fail while a node restarts (its leader stepped down, a
                // connection broke): the load goes on, and only what was acked must stay.
                match client
                    .send(send_request(TOPIC, 0, [body]), SEND_TIMEOUT)
                    .await
                {
                    Ok(_) => {
                        lock(&acked).insert(sequence);
                    }
                    Err(error) => {
                        tracing::info!(sequence, %error, "a send failed during a restart");
                        tokio::time::sleep(SEND_RETRY_PAUSE).await;
                    }
                }
                sequence += 1;
            }
        })
    };
    let load_goes_on = |acked: &Arc<Mutex<BTreeSet<u64>>>| {
        let before = lock(acked).len();
        let acked = acked.clone();
        wait_for("the load to go on", TIMEOUT, move || {
            let acked = acked.clone();
            async move { (lock(&acked).len() >= before + SENDS_PER_ROUND).then_some(()) }
        })
    };

    for round in 0..ROUNDS {
        load_goes_on(&acked).await?;
        let leader = group.wait_for_leader(TIMEOUT).await?;
        let node = if round % 2 == 0 {
            leader
        } else {
            group.a_follower(leader)
        };
        let survivors = group.stop_counting_survivors(node).await;
        assert_eq!(
            survivors, 0,
            "round {round}: {survivors} holders of node {node}'s state outlived its shutdown"
        );
        group.restart(node).await?;
    }
    load_goes_on(&acked).await?;
    stop.store(true, Ordering::Relaxed);
    load.await?;

    let leader = group.wait_for_leader(TIMEOUT).await?;
    group.wait_all_applied(leader, TIMEOUT).await?;
    let acked = lock(&acked).clone();
    let nodes: Vec<u64> = group.running().map(|node| node.node_id()).collect();
    for node in nodes {
        let store = group.node(node).group().store();
        let mut stored = BTreeSet::new();
        for unit in store.read_consume_queue(TOPIC, 0, 0, usize::MAX) {
            let message = store.read_message(unit.commit_log_offset)?;
            let sequence = std::str::from_utf8(&message.body)
                .ok()
                .and_then(|body| body.strip_prefix('m')?.parse::<u64>().ok());
            stored.extend(sequence);
        }
        drop(store);
        let missing: Vec<_> = acked.difference(&stored).collect();
        assert!(missing.is_empty(), "node {node} lacks acked {missing:?}");
    }
    group.shutdown().await;
    Ok(())
}
