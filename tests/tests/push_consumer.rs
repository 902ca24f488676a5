//! The push consumer against a real cluster (a nameserver and two 3-node broker groups on
//! loopback): rebalance across members joining and leaving, long polling, tag filtering,
//! SQL92 filtering, offsets across restarts and leader changes, broadcasting.

use std::collections::BTreeSet;
use std::time::Duration;

use rocketraft_client::admin::Admin;
use rocketraft_client::consumer::ConsumeFrom;
use rocketraft_client::consumer::ConsumeResult;
use rocketraft_client::consumer::ConsumerError;
use rocketraft_client::consumer::MessageModel;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::consumer::PushConsumerBuilder;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::producer::Producer;
use rocketraft_client::route::MessageQueue;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::deliveries::Deliveries;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "Orders";

/// Short timings so rebalances and commits happen within a test.
fn consumer(cluster: &TestCluster, group: &str, expression: &str) -> PushConsumerBuilder {
    PushConsumer::builder(cluster.nameservers(), group)
        .subscribe(TOPIC, expression)
        .consume_from(ConsumeFrom::First)
        .heartbeat_interval(Duration::from_millis(300))
        .rebalance_interval(Duration::from_secs(1))
        .persist_interval(Duration::from_millis(200))
        .route_ttl(Duration::from_millis(500))
        .pull_hold(Duration::from_secs(15))
}

async fn start_recording(
    builder: PushConsumerBuilder,
    name: &str,
    deliveries: &Deliveries,
) -> Result<PushConsumer, ConsumerError> {
    let (name, deliveries) = (name.to_owned(), deliveries.clone());
    builder
        .start(move |messages: Vec<MessageExt>, _context| {
            let (name, deliveries) = (name.clone(), deliveries.clone());
            async move {
                deliveries.record(&name, &messages);
                ConsumeResult::Success
            }
        })
        .await
}

async fn start_cluster(seed: u64, queues: u32) -> anyhow::Result<(TestCluster, Producer)> {
    let cluster = TestCluster::start(seed).await?;
    cluster.create_topic(TOPIC, queues).await?;
    cluster.wait_for_route(TOPIC).await?;
    let producer = Producer::builder(cluster.nameservers(), "test-producer").build()?;
    Ok((cluster, producer))
}

async fn send(producer: &Producer, count: usize, tag: &str) -> anyhow::Result<BTreeSet<String>> {
    let mut ids = BTreeSet::new();
    for i in 0..count {
        let sent = producer
            .send(Message::new(TOPIC, format!("{tag}-{i}")).with_tags(tag))
            .await?;
        ids.insert(sent.msg_id);
    }
    Ok(ids)
}

/// The queues of [`TOPIC`] `consumer` owns (its group's retry topic is split apart).
fn topic_queues(consumer: &PushConsumer) -> Vec<MessageQueue> {
    let mut queues = consumer.assigned_queues();
    queues.retain(|queue| queue.topic == TOPIC);
    queues
}

/// Waits until `consumers` own every queue of `all` of [`TOPIC`] exactly once between them.
async fn wait_for_partition(consumers: &[&PushConsumer], all: usize) -> anyhow::Result<()> {
    wait_for("queues split among the consumers", TIMEOUT, || async {
        let mut owned: Vec<MessageQueue> = consumers
            .iter()
            .flat_map(|consumer| topic_queues(consumer))
            .collect();
        let count = owned.len();
        owned.sort();
        owned.dedup();
        let sizes: Vec<usize> = consumers
            .iter()
            .map(|consumer| topic_queues(consumer).len())
            .collect();
        let even = sizes
            .iter()
            .max()
            .zip(sizes.iter().min())
            .is_some_and(|(a, b)| a - b <= 1);
        (count == all && owned.len() == all && even).then_some(())
    })
    .await
}

/// Waits until `group` committed every queue to its end: a filtering consumer moved past
/// everything its filter skipped.
async fn wait_for_commits_at_end(cluster: &TestCluster, group: &str) -> anyhow::Result<()> {
    wait_for("filtered queues committed to the end", TIMEOUT, || async {
        let status = Admin::new(cluster.nameservers())
            .consumer_progress(group, None)
            .await
            .ok()?;
        status
            .iter()
            .all(|queue| queue.committed_offset == Some(queue.max_offset))
            .then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_three_consumers_when_one_leaves_should_share_and_take_over_every_queue()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x5EED_0701, 4).await?;
    let deliveries = Deliveries::default();
    let mut consumers = Vec::new();
    for name in ["c1", "c2", "c3"] {
        let builder = consumer(&cluster, "billing", "*");
        consumers.push(start_recording(builder, name, &deliveries).await?);
    }
    info!("--- 8 queues over two groups split 3/3/2");
    wait_for_partition(&consumers.iter().collect::<Vec<_>>(), 8).await?;
    let listed = Admin::new(cluster.nameservers())
        .consumer_list("billing")
        .await?;
    assert_eq!(
        listed.members.len(),
        6,
        "3 members seen by each of 2 groups"
    );
    assert!(listed.subscriptions_consistent);
    let first = send(&producer, 300, "TagA").await?;
    deliveries.wait_for_all(&first, TIMEOUT).await?;
    for (id, consumers) in deliveries.by_message() {
        assert_eq!(consumers.len(), 1, "{id} consumed by {consumers:?}");
    }

    info!("--- c3 leaves: the others take its queues over");
    let leaving = consumers.pop().expect("c3");
    let leaving_queues = topic_queues(&leaving);
    leaving.shutdown().await;
    wait_for_partition(&consumers.iter().collect::<Vec<_>>(), 8).await?;
    let second = send(&producer, 300, "TagB").await?;
    deliveries.wait_for_all(&second, TIMEOUT).await?;
    let by_message = deliveries.by_message();
    for id in &second {
        let got = &by_message[id];
        assert_eq!(got.len(), 1, "{id} consumed by {got:?}");
        assert_ne!(got[0], "c3", "c3 left");
    }
    let taken_over: BTreeSet<i32> = deliveries
        .all()
        .iter()
        .filter(|d| second.contains(&d.message.msg_id))
        .filter(|d| {
            leaving_queues
                .iter()
                .any(|q| q.group == d.message.group && q.queue_id == d.message.queue_id)
        })
        .map(|d| d.message.queue_id)
        .collect();
    assert!(!taken_over.is_empty(), "c3's queues kept delivering");
    for consumer in consumers {
        consumer.shutdown().await;
    }
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_held_pull_a_new_message_should_arrive_at_once() -> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x5EED_0702, 2).await?;
    let deliveries = Deliveries::default();
    let consumer = start_recording(consumer(&cluster, "fast", "*"), "c", &deliveries).await?;
    wait_for_partition(&[&consumer], 4).await?;
    let warm_up = send(&producer, 4, "TagA").await?;
    deliveries.wait_for_all(&warm_up, TIMEOUT).await?;
    // Every queue's pull is now held by its broker for up to 15 s: an idle consumer costs
    // one pull per queue at a time, not a client re-pulling an empty queue in a loop. Its
    // queues: the topic's four and its retry topic's one in each broker group.
    let queues = 4 + GROUPS.len() as u64;
    wait_for("the idle consumer's pulls held", TIMEOUT, || async {
        let held = cluster.node_total(|status| status.pulls_held).await.ok()?;
        (held == queues).then_some(())
    })
    .await?;
    let sent_at = std::time::Instant::now();
    let late = send(&producer, 1, "TagA").await?;
    deliveries.wait_for_all(&late, TIMEOUT).await?;
    let latency = sent_at.elapsed();
    info!(?latency, "delivered while the pull was held");
    let late_id = late.iter().next().expect("one sent");
    let born_host: std::net::SocketAddr = deliveries.of(late_id)[0].message.born_host.parse()?;
    assert!(
        born_host.ip().is_loopback() && born_host.port() != 0,
        "the born host is the producer's connection, not {born_host}"
    );
    assert!(
        latency < Duration::from_secs(1),
        "a held pull answered after {latency:?}: no long polling"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_tags_with_one_hash_only_the_subscribed_tag_should_arrive() -> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x5EED_0703, 2).await?;
    let (only_aa, everything) = (Deliveries::default(), Deliveries::default());
    let aa = start_recording(consumer(&cluster, "only-aa", "Aa"), "aa", &only_aa).await?;
    let all = start_recording(consumer(&cluster, "all", "*"), "all", &everything).await?;
    // "Aa" and "BB" have the same Java hash code, so the broker lets both through.
    let aa_ids = send(&producer, 20, "Aa").await?;
    let bb_ids = send(&producer, 20, "BB").await?;
    let a_ids = send(&producer, 20, "TagA").await?;
    let every_id: BTreeSet<String> = aa_ids
        .iter()
        .chain(&bb_ids)
        .chain(&a_ids)
        .cloned()
        .collect();
    everything.wait_for_all(&every_id, TIMEOUT).await?;
    only_aa.wait_for_all(&aa_ids, TIMEOUT).await?;
    info!("--- let the filtered consumer finish its pulls and commit");
    wait_for_commits_at_end(&cluster, "only-aa").await?;
    let received: BTreeSet<String> = only_aa
        .all()
        .into_iter()
        .map(|d| d.message.msg_id)
        .collect();
    assert_eq!(received, aa_ids, "only Aa, never its hash twin BB");
    aa.shutdown().await;
    all.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_committed_offsets_a_restart_and_a_leader_change_should_not_rewind()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x5EED_0704, 2).await?;
    let deliveries = Deliveries::default();
    let first_run = start_recording(consumer(&cluster, "ledger", "*"), "run1", &deliveries).await?;
    let first = send(&producer, 100, "TagA").await?;
    deliveries.wait_for_all(&first, TIMEOUT).await?;
    first_run.shutdown().await;

    info!("--- broker-a changes leader while no consumer runs");
    let group = cluster.group("broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    group.isolate_leader(leader, TIMEOUT).await?;
    let second = send(&producer, 100, "TagB").await?;

    let second_run =
        start_recording(consumer(&cluster, "ledger", "*"), "run2", &deliveries).await?;
    deliveries.wait_for_all(&second, TIMEOUT).await?;
    let again: Vec<String> = deliveries
        .all()
        .into_iter()
        .filter(|d| d.consumer == "run2" && first.contains(&d.message.msg_id))
        .map(|d| d.message.msg_id)
        .collect();
    assert!(again.is_empty(), "consumed again after restart: {again:?}");
    second_run.shutdown().await;
    group.faults.heal();
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_broadcasting_every_consumer_should_get_every_message() -> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x5EED_0705, 2).await?;
    let offsets = tempfile::tempdir()?;
    let broadcast = |name: &str| {
        consumer(&cluster, "dashboards", "*")
            .message_model(MessageModel::Broadcasting)
            .offset_dir(offsets.path())
            .instance_name(name)
    };
    let (one, two) = (Deliveries::default(), Deliveries::default());
    let first = start_recording(broadcast("one"), "one", &one).await?;
    let second = start_recording(broadcast("two"), "two", &two).await?;
    let ids = send(&producer, 50, "TagA").await?;
    one.wait_for_all(&ids, TIMEOUT).await?;
    two.wait_for_all(&ids, TIMEOUT).await?;
    assert_eq!(
        topic_queues(&first).len(),
        4,
        "broadcasting takes every queue"
    );

    info!("--- a restarted broadcast consumer resumes from its own offset file");
    first.shutdown().await;
    let more = send(&producer, 10, "TagB").await?;
    let restarted = Deliveries::default();
    let first = start_recording(broadcast("one"), "one", &restarted).await?;
    restarted.wait_for_all(&more, TIMEOUT).await?;
    let replayed = restarted
        .all()
        .iter()
        .filter(|d| ids.contains(&d.message.msg_id))
        .count();
    assert_eq!(replayed, 0, "no message before the restart comes again");
    first.shutdown().await;
    second.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn given_bad_settings_start_should_fail_clearly() {
    let builder = || PushConsumer::builder(vec!["127.0.0.1:1".into()], "g");
    let listener = |_: Vec<MessageExt>, _| async { ConsumeResult::Success };
    let empty_tag = builder().subscribe(TOPIC, "A ||").start(listener).await;
    assert!(
        matches!(&empty_tag, Err(ConsumerError::InvalidSubscription(e)) if e.contains("empty tag")),
        "{:?}",
        empty_tag.err()
    );
    let nothing = builder().start(listener).await;
    assert!(matches!(
        nothing,
        Err(ConsumerError::InvalidSubscription(_))
    ));
    let hold = builder()
        .subscribe(TOPIC, "*")
        .pull_hold(Duration::from_secs(16))
        .start(listener)
        .await;
    assert!(matches!(hold, Err(ConsumerError::InvalidConfig(e)) if e.contains("pull_hold")));
    let batch = builder()
        .subscribe(TOPIC, "*")
        .pull_batch_size(1025)
        .start(listener)
        .await;
    assert!(matches!(batch, Err(ConsumerError::InvalidConfig(e)) if e.contains("pull_batch_size")));
    let bad_topic = builder().subscribe("a b", "*").start(listener).await;
    assert!(matches!(
        bad_topic,
        Err(ConsumerError::InvalidSubscription(_))
    ));
    let bad_sql = builder()
        .subscribe_sql(TOPIC, "price BETWEEN 1 OR 2")
        .start(listener)
        .await;
    assert!(
        matches!(&bad_sql, Err(ConsumerError::InvalidSubscription(e)) if e.contains("at byte 16")),
        "{:?}",
        bad_sql.err()
    );
}

/// What the SQL92 test's consumer selects, computed in plain Rust.
const SQL: &str = "TAGS IN ('A', 'B') AND price BETWEEN 10 AND 20 AND region <> 'eu'";

fn sql_selects(tag: &str, price: Option<u32>, region: &str) -> bool {
    (tag == "A" || tag == "B") && price.is_some_and(|p| (10..=20).contains(&p)) && region != "eu"
}

/// Sends `count` messages whose tag, price and region vary; returns the ids of those the
/// SQL92 test's filter selects, and of all.
async fn send_priced(
    producer: &Producer,
    start: u32,
    count: u32,
) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let (mut selected, mut all) = (BTreeSet::new(), BTreeSet::new());
    for i in start..start + count {
        let tag = ["A", "B", "C"][(i % 3) as usize];
        let price = (i % 7 != 0).then_some(i % 25);
        let region = if i % 2 == 0 { "eu" } else { "us" };
        let mut message = Message::new(TOPIC, format!("m{i}"))
            .with_tags(tag)
            .with_property("region", region);
        if let Some(price) = price {
            message = message.with_property("price", price.to_string());
        }
        let id = producer.send(message).await?.msg_id;
        if sql_selects(tag, price, region) {
            selected.insert(id.clone());
        }
        all.insert(id);
    }
    Ok((selected, all))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_sql92_subscription_only_selected_messages_should_arrive_across_a_leader_change()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x5EED_0706, 2).await?;
    let (filtered, everything) = (Deliveries::default(), Deliveries::default());
    let builder = consumer(&cluster, "priced", "*").subscribe_sql(TOPIC, SQL);
    let sql = start_recording(builder, "sql", &filtered).await?;
    let all = start_recording(consumer(&cluster, "all", "*"), "all", &everything).await?;
    let (mut selected, mut sent) = send_priced(&producer, 0, 60).await?;
    filtered.wait_for_all(&selected, TIMEOUT).await?;
    let listed = Admin::new(cluster.nameservers())
        .consumer_list("priced")
        .await?;
    assert!(
        listed.members.iter().all(|member| member
            .subscriptions
            .iter()
            .any(|s| s.topic == TOPIC && s.expression_type == "SQL92" && s.expression == SQL)),
        "{listed:?}"
    );

    info!("--- broker-a changes leader; the filter goes on from the new one");
    let group = cluster.group("broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    group.isolate_leader(leader, TIMEOUT).await?;
    group.faults.heal();
    let (more_selected, more_sent) = send_priced(&producer, 60, 60).await?;
    selected.extend(more_selected);
    sent.extend(more_sent);
    assert!(
        selected.len() > 10 && selected.len() < sent.len() / 2,
        "{}",
        selected.len()
    );
    everything.wait_for_all(&sent, TIMEOUT).await?;
    filtered.wait_for_all(&selected, TIMEOUT).await?;
    wait_for_commits_at_end(&cluster, "priced").await?;
    let received: BTreeSet<String> = filtered
        .all()
        .into_iter()
        .map(|d| d.message.msg_id)
        .collect();
    assert_eq!(received, selected, "exactly what the filter selects");
    sql.shutdown().await;
    all.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}
