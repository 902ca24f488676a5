//! Timer messages against a real cluster (a nameserver and two 3-node broker groups on
//! loopback) whose nodes read a manual clock: each is delivered once, never before its
//! deliver time and within one step of the clock after it, across the kill of a group's
//! leader; the limits are enforced at the send.

use std::collections::BTreeMap;
use std::time::Duration;

use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::message::property;
use rocketraft_client::producer::Producer;
use rocketraft_domain::clock::ManualClock;
use rocketraft_tests::Extras;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::deliveries::Deliveries;
use rocketraft_tests::init_tracing;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(60);
const TOPIC: &str = "Reminders";
/// How far the test moves the clock at once: the promised precision.
const STEP: Duration = Duration::from_millis(250);

async fn start_cluster(
    seed: u64,
    max_delay_ms: u64,
) -> anyhow::Result<(TestCluster, Producer, ManualClock)> {
    let clock = ManualClock::starting_now();
    let extras = Extras::on_clock(&clock);
    let cluster = TestCluster::start_with_extras(
        seed,
        |config| config.timer_max_delay_ms = max_delay_ms,
        extras,
    )
    .await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let producer = Producer::builder(cluster.nameservers(), "reminder-producer").build()?;
    Ok((cluster, producer, clock))
}

/// The deliver time a delivered timer carried.
fn deliver_ms(message: &MessageExt) -> anyhow::Result<i64> {
    Ok(message
        .properties
        .get(property::TIMER_DELIVER_MS)
        .ok_or_else(|| anyhow::anyhow!("{} has no TIMER_DELIVER_MS", message.msg_id))?
        .parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_timers_each_should_arrive_once_on_time_across_a_leader_kill() -> anyhow::Result<()> {
    init_tracing();
    let (mut cluster, producer, clock) = start_cluster(0x71AE_0001, 3_600_000).await?;
    let deliveries = Deliveries::default();
    let consumer = deliveries
        .start_reader(cluster.nameservers(), "reminder-reader", TOPIC)
        .await?;

    info!("--- timers from 1.5 s to 12 s ahead, by deliver time and by delay");
    // The clock stands still until the test moves it: every send is stored at `sent_at`.
    let sent_at = clock.now_ms();
    let mut deliver_at = BTreeMap::new();
    for i in 0..48i64 {
        let ahead_ms = 1_500 + i * 220;
        let message = Message::new(TOPIC, format!("reminder {i}"));
        let message = if i % 2 == 0 {
            message.with_deliver_time_ms(sent_at + ahead_ms)
        } else {
            message.with_delay(Duration::from_millis(ahead_ms as u64))
        };
        let result = producer.send(message).await?;
        deliver_at.insert(result.msg_id, sent_at + ahead_ms);
    }

    info!("--- broker-a's leader is killed while timers are waiting");
    let group = cluster.group_mut("broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    group.stop(leader).await;
    let new_leader = group.wait_for_leader(TIMEOUT).await?;
    info!(leader, new_leader, "new leader");

    info!("--- the clock moves on a step at a time: what is due comes, nothing else");
    deliveries
        .step_clock_through(&clock, &deliver_at, STEP, TIMEOUT)
        .await?;
    for delivery in deliveries.all() {
        let message = &delivery.message;
        assert_eq!(
            Some(&deliver_ms(message)?),
            deliver_at.get(&message.msg_id),
            "{} carries its deliver time",
            message.msg_id
        );
    }

    info!("--- each timer was restored to its topic exactly once");
    let mut stored = 0;
    for group in ["broker-a", "broker-b"] {
        for queue_id in 0..2 {
            stored += cluster.queue(group, TOPIC, queue_id).await?.len();
        }
    }
    assert_eq!(
        stored,
        deliver_at.len(),
        "one copy of each timer in the topic"
    );

    consumer.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_timer_limits_a_send_should_be_refused_clearly_or_delivered_at_once()
-> anyhow::Result<()> {
    init_tracing();
    let max_delay_ms = 60_000;
    let (cluster, producer, clock) = start_cluster(0x71AE_0002, max_delay_ms).await?;
    let at_max = Message::new(TOPIC, "at max").with_delay(Duration::from_millis(max_delay_ms));
    producer.send(at_max).await?;
    let past_max =
        Message::new(TOPIC, "past max").with_delay(Duration::from_millis(max_delay_ms + 1));
    let refused = producer.send(past_max).await.expect_err("past the maximum");
    assert!(
        refused.to_string().contains("timer_max_delay_ms"),
        "{refused}"
    );
    let both = Message::new(TOPIC, "both")
        .with_delay(Duration::from_secs(5))
        .with_delay_level(2);
    let refused = producer
        .send(both)
        .await
        .expect_err("timer and delay level");
    assert!(refused.to_string().contains("DELAY level"), "{refused}");
    let garbled = Message::new(TOPIC, "garbled").with_property(property::TIMER_DELAY_SEC, "soon");
    let refused = producer.send(garbled).await.expect_err("not a number");
    assert!(refused.to_string().contains("TIMER_DELAY_SEC"), "{refused}");

    info!("--- a deliver time already past is delivered at once");
    let past = Message::new(TOPIC, "past").with_deliver_time_ms(clock.now_ms() - 1_000);
    let result = producer.send(past).await?;
    let queue = cluster.queue(&result.group, TOPIC, result.queue_id).await?;
    assert_eq!(queue.len(), 1, "stored in its topic, not parked");
    cluster.shutdown().await;
    Ok(())
}
