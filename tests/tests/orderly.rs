//! Orderly consumption against a real cluster (a nameserver and two 3-node broker groups on
//! loopback): every key's messages, sent with `send_ordered`, arrive in the order they were
//! sent and with no gaps through a rebalance, a consumer crash and the kill of a group's
//! leader; no two members ever consume one queue at once; a message that keeps failing
//! (or panics its listener) pauses only its queue and then goes to the dead-letter topic;
//! broadcasting members, which take no locks, each consume every key in order.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::bail;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::GroupSettings;
use rocketraft_client::consumer::ConsumeFrom;
use rocketraft_client::consumer::ConsumeOrderlyContext;
use rocketraft_client::consumer::ConsumeOrderlyResult;
use rocketraft_client::consumer::MessageModel;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::consumer::PushConsumerBuilder;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::producer::Producer;
use rocketraft_client::route::MessageQueue;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::deliveries::Deliveries;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(60);
const TOPIC: &str = "OrderEvents";
const GROUP: &str = "order-processor";
/// Locks last 4 s without renewal, so a crashed member's queues move after 4 s and a new
/// leader's grace period is 2 s.
const LOCK_EXPIRY_MS: u64 = 4_000;
const KEYS: usize = 12;
/// How long a listener call takes: long enough that two members on one queue would overlap.
const QUICK_BATCH: Duration = Duration::from_millis(2);

async fn start_cluster(seed: u64) -> anyhow::Result<(TestCluster, Producer)> {
    let cluster = TestCluster::start_with(seed, |config| {
        config.queue_lock_expiry_ms = LOCK_EXPIRY_MS;
        config.client_expiry_ms = 2_000;
    })
    .await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let producer = Producer::builder(cluster.nameservers(), "order-producer").build()?;
    Ok((cluster, producer))
}

fn consumer(cluster: &TestCluster) -> PushConsumerBuilder {
    PushConsumer::builder(cluster.nameservers(), GROUP)
        .subscribe(TOPIC, "*")
        .consume_from(ConsumeFrom::First)
        .consume_batch_max_size(4)
        .heartbeat_interval(Duration::from_millis(300))
        .rebalance_interval(Duration::from_secs(1))
        .persist_interval(Duration::from_millis(200))
        .route_ttl(Duration::from_millis(500))
        .lock_renew_interval(Duration::from_millis(500))
        .suspend_current_queue_time(Duration::from_millis(100))
}

/// Queues some listener is consuming right now, and whether two ever overlapped.
#[derive(Clone, Default)]
struct Exclusivity {
    busy: Arc<Mutex<HashSet<MessageQueue>>>,
    violated: Arc<AtomicBool>,
}

/// Marks a queue busy for the life of one listener call (also when the call is dropped).
struct Busy(Exclusivity, MessageQueue);

impl Exclusivity {
    fn enter(&self, queue: &MessageQueue) -> Busy {
        if !self.lock().insert(queue.clone()) {
            tracing::error!(%queue, "two members consume one queue at once");
            self.violated.store(true, Ordering::SeqCst);
        }
        Busy(self.clone(), queue.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<MessageQueue>> {
        self.busy
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

/// An orderly listener that records each batch as `name` and succeeds after `batch_time`.
fn recording(
    name: &str,
    deliveries: &Deliveries,
    exclusivity: &Exclusivity,
    batch_time: Duration,
) -> impl Fn(
    Vec<MessageExt>,
    ConsumeOrderlyContext,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ConsumeOrderlyResult> + Send>>
+ Send
+ Sync
+ 'static {
    let (name, deliveries, exclusivity) =
        (name.to_owned(), deliveries.clone(), exclusivity.clone());
    move |messages: Vec<MessageExt>, context: ConsumeOrderlyContext| {
        let (name, deliveries, exclusivity) =
            (name.clone(), deliveries.clone(), exclusivity.clone());
        Box::pin(async move {
            let _busy = exclusivity.enter(&context.message_queue);
            deliveries.record(&name, &messages);
            tokio::time::sleep(batch_time).await;
            ConsumeOrderlyResult::Success
        })
    }
}

/// A member running on its own runtime, so that it can crash: its tasks stop at once,
/// with no commit, unlock or goodbye.
struct CrashableMember {
    runtime: tokio::runtime::Runtime,
    consumer: PushConsumer,
}

impl CrashableMember {
    async fn start(
        builder: PushConsumerBuilder,
        listener: impl Fn(
            Vec<MessageExt>,
            ConsumeOrderlyContext,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = ConsumeOrderlyResult> + Send>,
        > + Send
        + Sync
        + 'static,
    ) -> anyhow::Result<CrashableMember> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let consumer = runtime.spawn(builder.start_orderly(listener)).await??;
        Ok(CrashableMember { runtime, consumer })
    }

    fn crash(self) {
        drop(self.consumer);
        self.runtime.shutdown_background();
    }
}

/// Sends sequence numbers `from..to` of every key, each key's in order, one round at a
/// time; a send that fails (a leader change) is sent again until it is stored, so a key may
/// hold a message twice.
/// The queues of [`TOPIC`] `consumer` owns (its group's retry topic is split apart).
fn topic_queue_count(consumer: &PushConsumer) -> usize {
    consumer
        .assigned_queues()
        .iter()
        .filter(|queue| queue.topic == TOPIC)
        .count()
}

async fn send_rounds(producer: &Producer, from: usize, to: usize) -> anyhow::Result<()> {
    for seq in from..to {
        for key in 0..KEYS {
            let key = format!("key-{key}");
            let message = Message::new(TOPIC, format!("{key}:{seq}")).with_keys([key.clone()]);
            let deadline = tokio::time::Instant::now() + TIMEOUT;
            while let Err(error) = producer.send_ordered(message.clone(), &key).await {
                if tokio::time::Instant::now() > deadline {
                    bail!("{key}:{seq} not stored: {error}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Ok(())
}

/// What the deliveries of each key show.
#[derive(Debug, Default)]
struct KeyOrder {
    /// key -> the highest sequence number delivered.
    highest: BTreeMap<String, usize>,
    /// Deliveries that went back to an earlier sequence number (a replay after a crash).
    replays: usize,
}

/// Checks that every key's deliveries, in the order they happened, only ever go to the
/// next sequence number or back to an earlier one (a replay, which then continues in
/// order): never past a gap, never out of order.
fn key_order(deliveries: &Deliveries) -> anyhow::Result<KeyOrder> {
    let mut last: BTreeMap<String, usize> = BTreeMap::new();
    let mut order = KeyOrder::default();
    for delivery in deliveries.all() {
        let body = String::from_utf8_lossy(&delivery.message.body).into_owned();
        let Some((key, seq)) = body.split_once(':') else {
            bail!("unexpected body {body:?}");
        };
        let seq: usize = seq.parse()?;
        match last.get(key) {
            None if seq != 0 => bail!("{key} started at {seq}, not 0"),
            Some(&prev) if seq > prev + 1 => {
                bail!("{key}: {seq} delivered right after {prev} (a gap or out of order)")
            }
            Some(&prev) if seq <= prev => order.replays += 1,
            _ => {}
        }
        last.insert(key.to_owned(), seq);
        let highest = order.highest.entry(key.to_owned()).or_default();
        *highest = (*highest).max(seq);
    }
    Ok(order)
}

async fn wait_for_rounds(deliveries: &Deliveries, rounds: usize) -> anyhow::Result<()> {
    wait_for("every key's rounds consumed", TIMEOUT, || async {
        let order = key_order(deliveries).ok()?;
        (order.highest.len() == KEYS && order.highest.values().all(|h| *h + 1 >= rounds))
            .then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_ordered_sends_each_key_should_arrive_in_order_through_rebalance_crash_and_leader_kill()
-> anyhow::Result<()> {
    init_tracing();
    let (mut cluster, producer) = start_cluster(0x0DE1_0001).await?;
    let deliveries = Deliveries::default();
    let exclusivity = Exclusivity::default();

    info!("--- one member consumes every queue");
    let first = CrashableMember::start(
        consumer(&cluster).instance_name("first"),
        recording("first", &deliveries, &exclusivity, QUICK_BATCH),
    )
    .await?;
    send_rounds(&producer, 0, 10).await?;
    wait_for_rounds(&deliveries, 10).await?;

    info!("--- a second member joins: the queues are split and handed over");
    let second = consumer(&cluster)
        .instance_name("second")
        .start_orderly(recording("second", &deliveries, &exclusivity, QUICK_BATCH))
        .await?;
    wait_for("both members consume", TIMEOUT, || async {
        let queues = topic_queue_count(&second);
        (queues > 0 && queues < 4).then_some(())
    })
    .await?;
    send_rounds(&producer, 10, 20).await?;
    wait_for_rounds(&deliveries, 20).await?;
    let handed_over = key_order(&deliveries)?;
    assert_eq!(
        handed_over.replays, 0,
        "a graceful hand-over commits before it unlocks: nothing comes twice"
    );
    let consumers: BTreeSet<String> = deliveries
        .all()
        .into_iter()
        .map(|delivery| delivery.consumer)
        .collect();
    assert_eq!(consumers.len(), 2, "both members consumed");

    info!("--- the first member crashes: its queues move once their locks expire");
    first.crash();
    send_rounds(&producer, 20, 30).await?;
    wait_for_rounds(&deliveries, 30).await?;
    wait_for("the second member holds every queue", TIMEOUT, || async {
        (topic_queue_count(&second) == 4).then_some(())
    })
    .await?;

    info!("--- a group's leader is killed while keys are sent and consumed");
    let group = cluster.group_mut("broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let sending = {
        let producer = producer.clone();
        tokio::spawn(async move { send_rounds(&producer, 30, 45).await })
    };
    group.stop(leader).await;
    sending.await??;
    wait_for_rounds(&deliveries, 45).await?;

    let order = key_order(&deliveries)?;
    info!(
        replays = order.replays,
        deliveries = deliveries.all().len(),
        "every key in order"
    );
    assert!(
        !exclusivity.violated.load(Ordering::SeqCst),
        "two members consumed one queue at once"
    );
    second.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_message_that_keeps_failing_its_queue_should_pause_then_move_it_to_the_dlq()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x0DE1_0002).await?;
    let key = "poisoned-key";
    for seq in 0..4 {
        let message = Message::new(TOPIC, format!("{key}:{seq}")).with_keys([key]);
        producer.send_ordered(message, key).await?;
    }
    let deliveries = Deliveries::default();
    let listener = {
        let deliveries = deliveries.clone();
        move |messages: Vec<MessageExt>, _context: ConsumeOrderlyContext| {
            let deliveries = deliveries.clone();
            async move {
                deliveries.record("member", &messages);
                match messages
                    .iter()
                    .find(|message| message.body.ends_with(b":1"))
                {
                    // A panicking listener counts as a suspended batch.
                    Some(failing) if failing.reconsume_times == 1 => panic!("listener bug"),
                    Some(_) => ConsumeOrderlyResult::SuspendCurrentQueueAMoment,
                    None => ConsumeOrderlyResult::Success,
                }
            }
        }
    };
    let member = consumer(&cluster)
        .consume_batch_max_size(1)
        .max_reconsume_times(2)
        .start_orderly(listener)
        .await?;
    wait_for(
        "the queue moved past the failing message",
        TIMEOUT,
        || async {
            deliveries
                .all()
                .iter()
                .any(|delivery| delivery.message.body.ends_with(b":3"))
                .then_some(())
        },
    )
    .await?;
    let seen: Vec<(String, i32)> = deliveries
        .all()
        .into_iter()
        .map(|delivery| {
            let body = String::from_utf8_lossy(&delivery.message.body).into_owned();
            (body, delivery.message.reconsume_times)
        })
        .collect();
    let expected: Vec<(String, i32)> = [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (3, 0)]
        .into_iter()
        .map(|(seq, times)| (format!("{key}:{seq}"), times))
        .collect();
    assert_eq!(
        seen, expected,
        "the queue waits for the failing message: three tries (max 2 reconsumes, one of them \
         a panic), then on"
    );
    let admin = Admin::new(cluster.nameservers());
    let dead = wait_for("the failing message in the DLQ", TIMEOUT, || async {
        let dead = admin.dlq_list(GROUP, 10).await.ok()?;
        (!dead.is_empty()).then_some(dead)
    })
    .await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body, format!("{key}:1"));
    member.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_slow_batch_a_moved_queue_should_stay_with_its_member_until_the_batch_ends()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x0DE1_0003).await?;
    send_rounds(&producer, 0, 3).await?;
    let deliveries = Deliveries::default();
    let exclusivity = Exclusivity::default();
    // Longer than a release waits for a batch (1 s).
    let slow = Duration::from_millis(1_500);
    let first = consumer(&cluster)
        .instance_name("first")
        .consume_batch_max_size(1)
        .start_orderly(recording("first", &deliveries, &exclusivity, slow))
        .await?;
    wait_for("the first member consumes", TIMEOUT, || async {
        (!deliveries.all().is_empty()).then_some(())
    })
    .await?;
    info!("--- a second member joins while every queue is in a slow batch");
    let second = consumer(&cluster)
        .instance_name("second")
        .consume_batch_max_size(1)
        .start_orderly(recording("second", &deliveries, &exclusivity, slow))
        .await?;
    wait_for_rounds(&deliveries, 3).await?;
    let order = key_order(&deliveries)?;
    assert_eq!(
        order.replays, 0,
        "a hand-over after a slow batch repeats nothing"
    );
    assert!(
        !exclusivity.violated.load(Ordering::SeqCst),
        "the new owner consumed alongside the slow batch"
    );
    assert!(
        deliveries
            .all()
            .iter()
            .any(|delivery| delivery.consumer == "second"),
        "the queues moved"
    );
    second.shutdown().await;
    first.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_broadcasting_orderly_members_each_should_consume_every_key_in_order()
-> anyhow::Result<()> {
    const ROUNDS: usize = 5;
    init_tracing();
    let (cluster, producer) = start_cluster(0x0DE1_0004).await?;
    send_rounds(&producer, 0, ROUNDS).await?;
    let offsets = tempfile::tempdir()?;
    let mut members = Vec::new();
    for name in ["east", "west"] {
        // Both members consume every queue: only each one's own calls must not overlap.
        let (deliveries, exclusivity) = (Deliveries::default(), Exclusivity::default());
        let member = consumer(&cluster)
            .instance_name(name)
            .message_model(MessageModel::Broadcasting)
            .offset_dir(offsets.path())
            .start_orderly(recording(name, &deliveries, &exclusivity, QUICK_BATCH))
            .await?;
        members.push((member, deliveries, exclusivity));
    }
    for (_, deliveries, _) in &members {
        wait_for_rounds(deliveries, ROUNDS).await?;
        let order = key_order(deliveries)?;
        assert_eq!(order.replays, 0, "nothing comes twice to one member");
        assert_eq!(deliveries.all().len(), KEYS * ROUNDS, "every message, once");
    }
    for (_, _, exclusivity) in &members {
        assert!(!exclusivity.violated.load(Ordering::SeqCst));
    }
    for (member, _, _) in members {
        member.shutdown().await;
    }
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_broker_groups_with_different_retry_maximums_each_queue_should_use_its_own()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start_cluster(0x0DE1_0005).await?;
    let maximums = BTreeMap::from([("broker-a".to_owned(), 1), ("broker-b".to_owned(), 3)]);
    let admin = Admin::new(cluster.nameservers());
    for (name, times) in &maximums {
        let settings = GroupSettings {
            retry_max_times: *times,
            ..GroupSettings::default()
        };
        admin.update_group(GROUP, settings, Some(name)).await?;
    }
    // Keys until each broker group holds one; every message fails.
    let mut failing_in: BTreeMap<String, usize> = BTreeMap::new();
    for key in (0..).map(|i| format!("failing-{i}")) {
        let message = Message::new(TOPIC, format!("{key}:0")).with_keys([key.clone()]);
        let sent = producer.send_ordered(message, &key).await?;
        *failing_in.entry(sent.group).or_default() += 1;
        if failing_in.len() == maximums.len() {
            break;
        }
    }
    let deliveries = Deliveries::default();
    let listener = {
        let deliveries = deliveries.clone();
        move |messages: Vec<MessageExt>, _context: ConsumeOrderlyContext| {
            deliveries.record("member", &messages);
            async { ConsumeOrderlyResult::SuspendCurrentQueueAMoment }
        }
    };
    let member = consumer(&cluster)
        .consume_batch_max_size(1)
        .start_orderly(listener)
        .await?;
    let sent: usize = failing_in.values().sum();
    wait_for("every failing message in the DLQ", TIMEOUT, || async {
        let dead = admin.dlq_list(GROUP, 100).await.ok()?;
        (dead.len() == sent).then_some(())
    })
    .await?;
    let mut most_tries: BTreeMap<String, i32> = BTreeMap::new();
    for delivery in deliveries.all() {
        let tries = most_tries
            .entry(delivery.message.group.clone())
            .or_default();
        *tries = (*tries).max(delivery.message.reconsume_times);
    }
    let expected: BTreeMap<String, i32> = maximums
        .iter()
        .map(|(group, times)| (group.clone(), *times as i32))
        .collect();
    assert_eq!(
        most_tries, expected,
        "each broker group's queues dead-letter after that group's maximum"
    );
    member.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}
