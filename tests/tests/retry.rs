//! Delayed delivery, retries and dead letters against a real cluster (a nameserver and two
//! 3-node broker groups on loopback, delay levels `1s 2s 3s 4s 5s 6s`) whose nodes read a
//! manual clock, including the hand-over of pending deliveries to a new leader. The clock
//! stands still until a test moves it, so a delay is measured exactly, on the brokers' store
//! timestamps, and no test waits out a delay level in real time.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use rocketraft_client::admin::Admin;
use rocketraft_client::consumer::ConsumeContext;
use rocketraft_client::consumer::ConsumeFrom;
use rocketraft_client::consumer::ConsumeResult;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::consumer::PushConsumerBuilder;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::message::encode_properties;
use rocketraft_client::producer::Producer;
use rocketraft_domain::clock::ManualClock;
use rocketraft_domain::names::SCHEDULE_TOPIC;
use rocketraft_proto::broker as pb;
use rocketraft_tests::Extras;
use rocketraft_tests::advance_until;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::deliveries::Deliveries;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "Orders";
/// How far the tests move the clock at once: the precision a delay is checked to.
const STEP: Duration = Duration::from_millis(250);

fn consumer(cluster: &TestCluster, group: &str) -> PushConsumerBuilder {
    PushConsumer::builder(cluster.nameservers(), group)
        .subscribe(TOPIC, "*")
        .consume_from(ConsumeFrom::First)
        .heartbeat_interval(Duration::from_millis(300))
        .rebalance_interval(Duration::from_millis(500))
        .persist_interval(Duration::from_millis(200))
        .route_ttl(Duration::from_millis(300))
}

/// A listener that records every delivery and refuses each message's first `refusals`
/// deliveries, asking for `delay_level` (0: the default).
fn refusing(
    deliveries: &Deliveries,
    refusals: usize,
    delay_level: i32,
) -> impl Fn(Vec<MessageExt>, ConsumeContext) -> std::future::Ready<ConsumeResult> + Send + Sync + 'static
{
    let deliveries = deliveries.clone();
    let seen: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    move |messages, context| {
        deliveries.record("c", &messages);
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let refuse = messages.iter().any(|message| {
            let count = seen.entry(message.msg_id.clone()).or_default();
            *count += 1;
            *count <= refusals
        });
        if refuse {
            context.set_delay_level_when_next_consume(delay_level);
            std::future::ready(ConsumeResult::ReconsumeLater)
        } else {
            std::future::ready(ConsumeResult::Success)
        }
    }
}

async fn start_cluster(
    seed: u64,
    tune: impl Fn(&mut rocketraft_broker::config::BrokerConfig),
) -> anyhow::Result<(TestCluster, Producer, ManualClock)> {
    let clock = ManualClock::starting_now();
    let extras = Extras::on_clock(&clock);
    let cluster = TestCluster::start_with_extras(seed, tune, extras).await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let producer = Producer::builder(cluster.nameservers(), "test-producer").build()?;
    Ok((cluster, producer, clock))
}

/// Waits, with the clock held, until `copies` copies in all were parked in delay level
/// `level`'s queue of the schedule topic, on either group: a refused message was handed back.
async fn parked(cluster: &TestCluster, level: i32, copies: usize) -> anyhow::Result<()> {
    wait_for(
        &format!("{copies} copies parked at delay level {level}"),
        TIMEOUT,
        || async {
            let mut parked = 0;
            for group in GROUPS {
                parked += cluster
                    .queue(group, SCHEDULE_TOPIC, level - 1)
                    .await
                    .ok()?
                    .len();
            }
            (parked >= copies).then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_delay_level_the_message_should_arrive_after_it_and_not_before()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer, clock) = start_cluster(0x5EED_0801, |_| {}).await?;
    let deliveries = Deliveries::default();
    let recorder = deliveries.clone();
    let consumer = consumer(&cluster, "timely")
        .start(move |messages: Vec<MessageExt>, _| {
            recorder.record("c", &messages);
            async { ConsumeResult::Success }
        })
        .await?;
    // Both are stored at `sent_at`: the clock stands still until the test moves it.
    let sent_at = clock.now_ms();
    let two = producer
        .send(Message::new(TOPIC, "in 2s").with_delay_level(2))
        .await?;
    let clamped = producer
        .send(Message::new(TOPIC, "in 6s").with_delay_level(99))
        .await?;
    assert_eq!(
        clamped.queue_id, 5,
        "level 99 is clamped to the last level, 6"
    );
    let due_at = BTreeMap::from([
        (two.msg_id.clone(), sent_at + 2_000),
        (clamped.msg_id.clone(), sent_at + 6_000),
    ]);
    deliveries
        .step_clock_through(&clock, &due_at, STEP, TIMEOUT)
        .await?;
    for id in due_at.keys() {
        let delivered = &deliveries.of(id)[0];
        assert_eq!(delivered.message.topic, TOPIC);
        assert!(!delivered.message.properties.contains_key("DELAY"));
    }
    consumer.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_listener_failing_twice_the_message_should_come_back_twice_then_be_consumed_once()
-> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer, clock) = start_cluster(0x5EED_0802, |_| {}).await?;
    let deliveries = Deliveries::default();
    let consumer = consumer(&cluster, "flaky")
        .start(refusing(&deliveries, 2, 0))
        .await?;
    let sent = producer
        .send(Message::new(TOPIC, "try again").with_tags("TagA"))
        .await?;
    // Refused at delivery n, the message is parked at level 3 + (n - 1), with the clock held
    // since that delivery's store time; then the clock moves until it comes back.
    for (delivered, level) in [(1, 3), (2, 4)] {
        parked(&cluster, level, 1).await?;
        advance_until(
            &format!("delivery {}", delivered + 1),
            &clock,
            STEP,
            TIMEOUT,
            || async { (deliveries.of(&sent.msg_id).len() > delivered).then_some(()) },
        )
        .await?;
    }
    info!("--- the original queue's offset moved on while retries were pending");
    let progress = Admin::new(cluster.nameservers())
        .consumer_progress("flaky", Some(TOPIC))
        .await?;
    assert!(progress.iter().all(|q| q.lag == 0), "{progress:?}");
    // Every copy in the retry topic was consumed and committed: nothing else can come.
    retry_topic_settled(&cluster, "flaky", 2).await?;
    let got = deliveries.of(&sent.msg_id);
    assert_eq!(got.len(), 3, "consumed once after two refusals");
    let times: Vec<i32> = got.iter().map(|d| d.message.reconsume_times).collect();
    assert_eq!(times, [0, 1, 2]);
    for delivery in &got {
        assert_eq!(
            delivery.message.topic, TOPIC,
            "shown under the original topic"
        );
        assert_eq!(delivery.message.tags.as_deref(), Some("TagA"));
    }
    // Levels 3 + 0 and 3 + 1: 3 s, then 4 s, on the brokers' clock. The first refusal came
    // with the clock still at the send's store time: that delay is exact to a step.
    let stored_ms: Vec<i64> = got.iter().map(|d| d.message.store_timestamp_ms).collect();
    let (first_gap, second_gap) = (stored_ms[1] - stored_ms[0], stored_ms[2] - stored_ms[1]);
    info!(first_gap, second_gap, "retry delays, ms");
    let step_ms = STEP.as_millis() as i64;
    assert!(
        (3_000..3_000 + step_ms).contains(&first_gap),
        "{first_gap} ms"
    );
    assert!(second_gap >= 4_000, "{second_gap} ms: growing delays");
    consumer.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_max_reconsume_times_reached_the_message_should_land_in_the_dlq() -> anyhow::Result<()>
{
    init_tracing();
    let (cluster, producer, clock) = start_cluster(0x5EED_0803, |_| {}).await?;
    let deliveries = Deliveries::default();
    let consumer = consumer(&cluster, "doomed")
        .max_reconsume_times(1)
        .start(refusing(&deliveries, usize::MAX, 1))
        .await?;
    let sent = producer
        .send(
            Message::new(TOPIC, "poison")
                .with_tags("TagP")
                .with_keys(["order-9"]),
        )
        .await?;
    let dead = Deliveries::default();
    let recorder = dead.clone();
    let dlq_reader = PushConsumer::builder(cluster.nameservers(), "dlq-reader")
        .subscribe("%DLQ%doomed", "*")
        .consume_from(ConsumeFrom::First)
        .rebalance_interval(Duration::from_millis(500))
        .route_ttl(Duration::from_millis(300))
        .start(move |messages: Vec<MessageExt>, _| {
            recorder.record("dlq", &messages);
            async { ConsumeResult::Success }
        })
        .await?;
    advance_until("the dead letter", &clock, STEP, TIMEOUT, || async {
        (!dead.of(&sent.msg_id).is_empty()).then_some(())
    })
    .await?;
    let letter = &dead.of(&sent.msg_id)[0].message;
    assert_eq!(letter.topic, "%DLQ%doomed");
    assert_eq!(letter.tags.as_deref(), Some("TagP"));
    assert_eq!(letter.keys, ["order-9"]);
    assert_eq!(
        letter.properties.get("ORIGIN_MESSAGE_ID"),
        Some(sent.msg_id.as_str())
    );
    assert_eq!(letter.properties.get("RETRY_TOPIC"), Some(TOPIC));
    assert_eq!(letter.reconsume_times, 2);
    info!("--- a dead letter is not redelivered");
    // The one retry copy was handed back (to the DLQ) and committed; no other copy exists.
    retry_topic_settled(&cluster, "doomed", 1).await?;
    assert_eq!(
        deliveries.of(&sent.msg_id).len(),
        2,
        "the original and one retry"
    );
    consumer.shutdown().await;
    dlq_reader.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_send_back_failing_the_client_fallback_should_bring_the_message_back()
-> anyhow::Result<()> {
    init_tracing();
    // No group configs are created: SendMessageBack answers SUBSCRIPTION_GROUP_NOT_EXIST.
    let (cluster, producer, clock) =
        start_cluster(0x5EED_0804, |config| config.auto_create_group = false).await?;
    let deliveries = Deliveries::default();
    let consumer = consumer(&cluster, "orphan")
        .start(refusing(&deliveries, 1, 1))
        .await?;
    let sent = producer.send(Message::new(TOPIC, "again")).await?;
    // The client sends the retry copy itself, delayed by level 1; the clock was held since
    // the message was stored.
    parked(&cluster, 1, 1).await?;
    advance_until("the message back", &clock, STEP, TIMEOUT, || async {
        (deliveries.of(&sent.msg_id).len() >= 2).then_some(())
    })
    .await?;
    let got = deliveries.of(&sent.msg_id);
    assert_eq!(got[1].message.reconsume_times, 1);
    assert_eq!(got[1].message.topic, TOPIC);
    let delay_ms = got[1].message.store_timestamp_ms - got[0].message.store_timestamp_ms;
    assert!(
        (1_000..1_000 + STEP.as_millis() as i64).contains(&delay_ms),
        "delayed by level 1: {delay_ms} ms"
    );
    consumer.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

/// Waits until `%RETRY%<group>` holds exactly `copies` messages in all and the group has
/// committed past every one of them: no retry is pending any more.
async fn retry_topic_settled(
    cluster: &TestCluster,
    group: &str,
    copies: i64,
) -> anyhow::Result<()> {
    let admin = Admin::new(cluster.nameservers());
    let retry_topic = format!("%RETRY%{group}");
    let settled = wait_for("the retry topic consumed to its end", TIMEOUT, || async {
        let progress = admin
            .consumer_progress(group, Some(&retry_topic))
            .await
            .ok()?;
        progress
            .iter()
            .all(|queue| queue.lag == 0)
            .then_some(progress)
    })
    .await?;
    let stored: i64 = settled.iter().map(|queue| queue.max_offset).sum();
    assert_eq!(stored, copies, "retry copies stored: {settled:?}");
    Ok(())
}

/// Every `UNIQ_KEY` stored in `topic` of `group`, once per stored copy, read on its leader.
async fn stored_ids(
    cluster: &TestCluster,
    group: &str,
    topic: &str,
) -> anyhow::Result<Vec<String>> {
    let test_group = cluster.group(group);
    let leader = test_group.wait_for_leader(TIMEOUT).await?;
    let mut client = test_group.client(leader).await?;
    let mut ids = Vec::new();
    for queue_id in 0..8 {
        let mut offset = 0;
        loop {
            let request = pb::PullRequest {
                group: "audit".into(),
                topic: topic.into(),
                queue_id,
                queue_offset: offset,
                max_messages: 1024,
                tags: Vec::new(),
                max_wait_ms: 0,
                sql: String::new(),
                stored_records: false,
            };
            let response = client.pull(request).await?.into_inner();
            if response.messages.is_empty() {
                break;
            }
            offset = response.next_offset;
            ids.extend(response.messages.into_iter().filter_map(|m| {
                rocketraft_domain::properties::find(&m.properties, "UNIQ_KEY")
                    .ok()
                    .flatten()
                    .map(str::to_owned)
            }));
        }
    }
    Ok(ids)
}

fn assert_once(ids: &[String], expected: &BTreeSet<String>, what: &str) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for id in ids {
        *counts.entry(id).or_default() += 1;
    }
    for id in expected {
        assert_eq!(
            counts.get(id.as_str()),
            Some(&1),
            "{what}: {id} stored {:?} times",
            counts.get(id.as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_pending_deliveries_when_the_leader_dies_each_should_be_delivered_exactly_once()
-> anyhow::Result<()> {
    init_tracing();
    let (mut cluster, producer, clock) = start_cluster(0x5EED_0805, |_| {}).await?;
    let deliveries = Deliveries::default();
    // Each message is refused once (retry at level 3: 3 s), then consumed.
    let consumer = consumer(&cluster, "survivor")
        .start(refusing(&deliveries, 1, 0))
        .await?;
    let mut immediate = BTreeSet::new();
    let mut delayed = BTreeSet::new();
    for i in 0..20 {
        immediate.insert(
            producer
                .send(Message::new(TOPIC, format!("now {i}")))
                .await?
                .msg_id,
        );
        let later = Message::new(TOPIC, format!("later {i}")).with_delay_level(4);
        delayed.insert(producer.send(later).await?.msg_id);
    }
    wait_for(
        "every immediate message refused and handed back",
        TIMEOUT,
        || async {
            let progress = Admin::new(cluster.nameservers())
                .consumer_progress("survivor", Some(TOPIC))
                .await
                .ok()?;
            let refused = immediate.iter().all(|id| !deliveries.of(id).is_empty());
            (refused && progress.iter().all(|q| q.lag == 0)).then_some(())
        },
    )
    .await?;

    let group = cluster.group_mut("broker-a");
    let old_leader = group.wait_for_leader(TIMEOUT).await?;
    info!(
        old_leader,
        "--- stop broker-a's leader with retries and delayed messages pending"
    );
    group.stop(old_leader).await;
    let new_leader = group.wait_for_leader(TIMEOUT).await?;
    assert_ne!(new_leader, old_leader);

    let all: BTreeSet<String> = immediate.union(&delayed).cloned().collect();
    advance_until(
        "every message consumed after its retry or delay",
        &clock,
        STEP,
        TIMEOUT,
        || async {
            all.iter()
                .all(|id| {
                    let got = deliveries.of(id);
                    if immediate.contains(id) {
                        got.len() >= 2
                    } else {
                        !got.is_empty()
                    }
                })
                .then_some(())
        },
    )
    .await?;

    info!("--- the old leader comes back as a follower and delivers nothing");
    let group = cluster.group_mut("broker-a");
    group.restart(old_leader).await?;
    let status = group.status(new_leader).await?;
    wait_for("the old leader caught up", TIMEOUT, || async {
        let old = group.status(old_leader).await.ok()?;
        (old.last_applied_index >= status.last_applied_index).then_some(())
    })
    .await?;
    wait_for(
        "the old leader following in the new term",
        TIMEOUT,
        || async {
            let old = group.status(old_leader).await.ok()?;
            (old.role == "follower" && old.term == status.term).then_some(())
        },
    )
    .await?;
    let running: Vec<u64> = {
        let mut running = Vec::new();
        for id in 1..=3 {
            if group.status(id).await?.schedule_service_running {
                running.push(id);
            }
        }
        running
    };
    assert_eq!(
        running,
        [new_leader],
        "the schedule service runs on the leader only"
    );

    for name in GROUPS {
        let in_topic = stored_ids(&cluster, name, TOPIC).await?;
        let in_retry = stored_ids(&cluster, name, "%RETRY%survivor").await?;
        let mine = |ids: &BTreeSet<String>| -> BTreeSet<String> {
            ids.iter()
                .filter(|id| in_topic.contains(id))
                .cloned()
                .collect()
        };
        assert_once(&in_topic, &mine(&all), "topic");
        assert_once(&in_retry, &mine(&immediate), "retry topic");
    }
    consumer.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_deleted_topic_its_delayed_messages_are_dropped_and_the_level_goes_on()
-> anyhow::Result<()> {
    init_tracing();
    let clock = ManualClock::starting_now();
    let extras = Extras::on_clock(&clock);
    let group =
        rocketraft_tests::TestGroup::start_with_extras(3, 0x5EED_0806, |_| {}, extras).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    let delayed = |topic: &str, body: &str| {
        let mut request = rocketraft_tests::send_request(topic, 0, [body.as_bytes().to_vec()]);
        request.messages[0].properties = encode_properties([("DELAY", "1")]);
        request
    };
    client.send(delayed("Doomed", "never")).await?;
    client.send(delayed("Kept", "arrives")).await?;
    let delete = pb::DeleteTopicRequest {
        topic: "Doomed".into(),
    };
    client.delete_topic(delete).await?;
    advance_until("the kept message delivered", &clock, STEP, TIMEOUT, || {
        let mut client = client.clone();
        async move {
            let request = pb::ReadConsumeQueueRequest {
                topic: "Kept".into(),
                queue_id: 0,
                from_queue_offset: 0,
                max_units: 10,
            };
            let units = client.read_consume_queue(request).await.ok()?.into_inner();
            (units.max_queue_offset == 1).then_some(())
        }
    })
    .await?;
    let doomed = pb::ReadConsumeQueueRequest {
        topic: "Doomed".into(),
        queue_id: 0,
        from_queue_offset: 0,
        max_units: 10,
    };
    let doomed = client.read_consume_queue(doomed).await?.into_inner();
    assert_eq!(
        doomed.max_queue_offset, 0,
        "nothing delivered to a deleted topic"
    );

    info!("--- send back: unknown offsets and bad limits are clear errors");
    let back = |offset: i64, max: i32| pb::SendMessageBackRequest {
        group: "g".into(),
        commit_log_offset: offset,
        delay_level: 0,
        max_reconsume_times: max,
        deduplicate: false,
    };
    let missing = client
        .send_message_back(back(1 << 40, 0))
        .await
        .expect_err("no message there");
    assert_eq!(
        rocketraft_proto::response_code(&missing),
        Some(rocketraft_proto::common::ResponseCode::MessageNotFound),
        "{missing}"
    );
    let too_many = client
        .send_message_back(back(0, 65))
        .await
        .expect_err("over the limit");
    assert_eq!(too_many.code(), tonic::Code::InvalidArgument);
    let follower = group.a_follower(leader);
    let refused = group
        .client(follower)
        .await?
        .send_message_back(back(0, 0))
        .await
        .expect_err("follower");
    assert_eq!(
        rocketraft_proto::response_code(&refused),
        Some(rocketraft_proto::common::ResponseCode::NotLeader)
    );

    info!("--- a repeated hand-back with deduplicate stores no second copy");
    let mut keyed = rocketraft_tests::send_request("Kept", 0, [b"handed back".to_vec()]);
    keyed.messages[0].properties = encode_properties([("UNIQ_KEY", "0A0B0C0D")]);
    let sent = client.send(keyed).await?.into_inner();
    let offset = sent.results[0].commit_log_offset;
    let first = client
        .send_message_back(back(offset, 0))
        .await?
        .into_inner();
    let repeated = pb::SendMessageBackRequest {
        deduplicate: true,
        ..back(offset, 0)
    };
    let again = client.send_message_back(repeated).await?.into_inner();
    assert_eq!(
        again.commit_log_offset, first.commit_log_offset,
        "the first copy answers"
    );
    let fresh = client
        .send_message_back(back(offset, 0))
        .await?
        .into_inner();
    assert_ne!(
        fresh.commit_log_offset, first.commit_log_offset,
        "without deduplicate, a new copy"
    );
    group.shutdown().await;
    Ok(())
}
