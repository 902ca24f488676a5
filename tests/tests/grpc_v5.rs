//! RocketMQ 5.x's official Rust client (`rocketmq` 5.0.0, unmodified) against the 5.x gRPC
//! endpoint of real broker nodes (a nameserver and two 3-node groups on loopback): what it
//! sends is stored with its system properties, whichever node it was given; its transactions
//! end as it says, by its own call or by its answer to a check-back; its simple consumer pops
//! by tag, acks, and sees what it did not ack again (beside a rocketraft push consumer of
//! another group on the same topic), across a leader's crash, into the dead-letter topic after
//! the last attempt, and in order for a FIFO group.

use rocketraft_server::config::GrpcV5Config;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;

use rocketmq::Producer as V5Producer;
use rocketmq::SimpleConsumer;
use rocketmq::conf::ClientOption;
use rocketmq::conf::ProducerOption;
use rocketmq::conf::SimpleConsumerOption;
use rocketmq::model::common::FilterExpression;
use rocketmq::model::common::FilterType;
use rocketmq::model::message::AckMessageEntry;
use rocketmq::model::message::MessageBuilder;
use rocketmq::model::message::MessageView;
use rocketmq::model::transaction::Transaction;
use rocketmq::model::transaction::TransactionResolution;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::GroupSettings;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::message::property;
use rocketraft_client::producer::Producer;
use rocketraft_client::producer::SendResult;
use rocketraft_domain::clock::Clock;
use rocketraft_domain::clock::ManualClock;
use rocketraft_domain::time::now_ms;
use rocketraft_proto::common::TopicMessageType;
use rocketraft_proto::v5;
use rocketraft_proto::v5::messaging_service_client::MessagingServiceClient;
use rocketraft_tests::Extras;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::deliveries::Deliveries;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(60);
const TOPIC: &str = "V5Orders";
/// A topic of FIFO messages only.
const FIFO_TOPIC: &str = "V5Sequence";

async fn start_cluster(seed: u64) -> anyhow::Result<TestCluster> {
    start_cluster_with(seed, BTreeMap::new(), Clock::system()).await
}

/// A cluster whose 5.x endpoints accept only calls signed with `access_keys`, if any, and
/// whose nodes read `clock`.
async fn start_cluster_with(
    seed: u64,
    access_keys: BTreeMap<String, String>,
    clock: Clock,
) -> anyhow::Result<TestCluster> {
    let grpc_v5 = GrpcV5Config {
        listen: Some("127.0.0.1:0".parse()?),
        access_keys,
        ..GrpcV5Config::default()
    };
    let cluster = TestCluster::start_with_extras(seed, |_| {}, Extras { grpc_v5, clock }).await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    Ok(cluster)
}

/// The 5.x endpoint of a follower of `group`: any node serves every topic.
async fn follower_endpoint(cluster: &TestCluster, group: &str) -> anyhow::Result<SocketAddr> {
    let group = cluster.group(group);
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let follower = group.a_follower(leader);
    group
        .grpc_v5_addr(follower)
        .ok_or_else(|| anyhow::anyhow!("node {follower} serves no 5.x endpoint"))
}

/// A 5.x resource name without a namespace.
fn resource(name: &str) -> Option<v5::Resource> {
    Some(v5::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

fn v5_options(endpoint: SocketAddr) -> (ProducerOption, ClientOption) {
    let mut producer_option = ProducerOption::default();
    producer_option.set_topics(vec![TOPIC]);
    let mut client_option = ClientOption::default();
    client_option.set_access_url(endpoint.to_string());
    (producer_option, client_option)
}

async fn start_v5_producer(endpoint: SocketAddr) -> anyhow::Result<V5Producer> {
    let (producer_option, client_option) = v5_options(endpoint);
    let producer = V5Producer::new(producer_option, client_option)?;
    start(producer).await
}

async fn start(mut producer: V5Producer) -> anyhow::Result<V5Producer> {
    producer.start().await.context("start the 5.x producer")?;
    Ok(producer)
}

fn delivered(deliveries: &Deliveries, id: &str) -> anyhow::Result<MessageExt> {
    deliveries
        .of(id)
        .into_iter()
        .next()
        .map(|delivery| delivery.message)
        .ok_or_else(|| anyhow::anyhow!("{id} was not delivered"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_the_official_5x_producer_its_messages_should_be_stored_with_their_system_properties()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = start_cluster(0x5005_0001).await?;
    let endpoint = follower_endpoint(&cluster, "broker-b").await?;
    info!(%endpoint, "--- the official 5.x producer, given a follower's endpoint");
    let producer = start_v5_producer(endpoint).await?;
    let deliveries = Deliveries::default();
    let reader = deliveries
        .start_reader(cluster.nameservers(), "v5-reader", TOPIC)
        .await?;
    let send = |message| async {
        producer
            .send(message)
            .await
            .map(|receipt| receipt.message_id().to_owned())
            .context("5.x send")
    };

    let mut normal = Vec::new();
    for i in 0..10 {
        let message = MessageBuilder::builder()
            .set_topic(TOPIC)
            .set_tag("TagA")
            .set_keys(vec![format!("key-{i}")])
            .set_properties(
                BTreeMap::from([("shop", "north")])
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
            )
            .set_body(format!("normal {i}").into_bytes())
            .build()?;
        normal.push(send(message).await?);
    }
    let mut fifo = Vec::new();
    for i in 0..10 {
        let message = MessageBuilder::fifo_message_builder(
            TOPIC,
            format!("fifo {i}").into_bytes(),
            "order-42",
        )
        .build()?;
        fifo.push(send(message).await?);
    }
    let deliver_at_s = now_ms() / 1000 + 3;
    let mut delayed = Vec::new();
    for i in 0..3 {
        let message = MessageBuilder::delay_message_builder(
            TOPIC,
            format!("delayed {i}").into_bytes(),
            deliver_at_s,
        )
        .build()?;
        delayed.push(send(message).await?);
    }
    let all: BTreeSet<String> = normal
        .iter()
        .chain(&fifo)
        .chain(&delayed)
        .cloned()
        .collect();
    assert_eq!(all.len(), 23, "every send got an id of its own");
    deliveries.wait_for_all(&all, TIMEOUT).await?;

    info!("--- what was stored");
    for (i, id) in normal.iter().enumerate() {
        let message = delivered(&deliveries, id)?;
        assert_eq!(&message.msg_id, id, "the client's message id is kept");
        assert_eq!(message.tags.as_deref(), Some("TagA"));
        assert_eq!(message.keys, [format!("key-{i}")]);
        assert_eq!(message.properties.get("shop"), Some("north"));
        assert!(
            message
                .properties
                .get(property::BORN_HOST)
                .is_some_and(|host| !host.is_empty()),
            "the born host name is kept: {:?}",
            message.properties
        );
        assert!(
            (now_ms() - message.born_timestamp_ms).abs() < 60_000,
            "born now: {}",
            message.born_timestamp_ms
        );
        assert_eq!(message.body, format!("normal {i}").into_bytes());
    }
    let fifo_stored: Vec<MessageExt> = fifo
        .iter()
        .map(|id| delivered(&deliveries, id))
        .collect::<anyhow::Result<_>>()?;
    let queue = (&fifo_stored[0].group, fifo_stored[0].queue_id);
    assert!(
        fifo_stored
            .iter()
            .all(|message| (&message.group, message.queue_id) == queue),
        "one message group, one queue"
    );
    assert!(
        fifo_stored
            .windows(2)
            .all(|pair| pair[0].queue_offset < pair[1].queue_offset),
        "in send order"
    );
    assert!(
        fifo_stored
            .iter()
            .all(|message| { message.properties.get(property::SHARDING_KEY) == Some("order-42") })
    );
    for id in &delayed {
        let message = delivered(&deliveries, id)?;
        let deliver_at_ms = deliver_at_s * 1000;
        assert_eq!(
            message.properties.get(property::TIMER_DELIVER_MS),
            Some(deliver_at_ms.to_string().as_str())
        );
        assert!(
            message.store_timestamp_ms >= deliver_at_ms,
            "delivered at {} ms, not before {deliver_at_ms} ms",
            message.store_timestamp_ms
        );
    }
    let duplicates: Vec<_> = deliveries
        .by_message()
        .into_iter()
        .filter(|(_, consumers)| consumers.len() > 1)
        .collect();
    assert!(duplicates.is_empty(), "stored once each: {duplicates:?}");

    info!("--- an unknown topic is TOPIC_NOT_FOUND");
    let unknown = MessageBuilder::builder()
        .set_topic("NoSuchTopic")
        .set_body(b"lost?".to_vec())
        .build()?;
    let error = producer
        .send(unknown)
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("a send to an unknown topic succeeded"))?;
    assert!(
        format!("{error:?}").contains("TOPIC_NOT_FOUND"),
        "{error:?}"
    );

    info!("--- a FIFO topic's queues take FIFO messages only");
    cluster
        .create_typed_topic(FIFO_TOPIC, 1, TopicMessageType::Fifo)
        .await?;
    cluster.wait_for_route(FIFO_TOPIC).await?;
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    let route = raw
        .query_route(v5::QueryRouteRequest {
            topic: resource(FIFO_TOPIC),
            endpoints: None,
        })
        .await?
        .into_inner();
    assert_eq!(route.message_queues.len(), GROUPS.len());
    for queue in &route.message_queues {
        assert_eq!(queue.accept_message_types, [v5::MessageType::Fifo as i32]);
    }
    let plain = MessageBuilder::builder()
        .set_topic(FIFO_TOPIC)
        .set_body(b"not in order".to_vec())
        .build()?;
    let error = producer
        .send(plain)
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("a NORMAL message went to a FIFO topic"))?;
    assert!(
        format!("{error:?}").contains("MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"),
        "{error:?}"
    );
    let ordered = MessageBuilder::fifo_message_builder(FIFO_TOPIC, b"in order".to_vec(), "order-1")
        .build()?;
    send(ordered).await?;
    let mixed = raw
        .query_route(v5::QueryRouteRequest {
            topic: resource(TOPIC),
            endpoints: None,
        })
        .await?
        .into_inner();
    assert!(
        mixed
            .message_queues
            .iter()
            .all(|queue| queue.accept_message_types.len() == 4),
        "a topic created without a type takes all four"
    );

    producer.shutdown().await?;
    reader.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_access_keys_only_a_client_signing_with_one_should_be_served() -> anyhow::Result<()> {
    init_tracing();
    let keys = BTreeMap::from([("orders-app".to_owned(), "s3cret".to_owned())]);
    let cluster = start_cluster_with(0x5005_0007, keys, Clock::system()).await?;
    let endpoint = follower_endpoint(&cluster, GROUPS[0]).await?;
    let producer_with = |secret: Option<&str>| {
        let (producer_option, mut client_option) = v5_options(endpoint);
        if let Some(secret) = secret {
            client_option.set_access_key("orders-app");
            client_option.set_secret_key(secret);
        }
        V5Producer::new(producer_option, client_option)
    };

    info!("--- signed with the key's secret: served");
    let producer = start(producer_with(Some("s3cret"))?).await?;
    let message = MessageBuilder::builder()
        .set_topic(TOPIC)
        .set_body(b"signed".to_vec())
        .build()?;
    producer.send(message).await.context("a signed send")?;

    info!("--- unsigned, or signed with another secret: UNAUTHORIZED");
    for secret in [None, Some("guess")] {
        let refused = start(producer_with(secret)?)
            .await
            .expect_err("an unsigned or wrongly signed client is refused");
        let refused = format!("{refused:#}");
        assert!(refused.contains("UNAUTHORIZED"), "{refused}");
    }
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_5x_transactions_each_should_end_as_its_client_or_its_check_back_says()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = start_cluster(0x5005_0002).await?;
    let endpoint = follower_endpoint(&cluster, "broker-a").await?;
    let checked = Arc::new(Mutex::new(Vec::<String>::new()));
    let checker = {
        let checked = checked.clone();
        move |_transaction_id: String, message: MessageView| {
            checked
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(message.message_id().to_owned());
            if message.body().starts_with(b"commit") {
                TransactionResolution::COMMIT
            } else {
                TransactionResolution::ROLLBACK
            }
        }
    };
    let (producer_option, client_option) = v5_options(endpoint);
    let producer =
        V5Producer::new_transaction_producer(producer_option, client_option, Box::new(checker))?;
    let producer = start(producer).await?;
    let deliveries = Deliveries::default();
    let reader = deliveries
        .start_reader(cluster.nameservers(), "v5-tx-reader", TOPIC)
        .await?;
    let half = |body: &str| {
        MessageBuilder::transaction_message_builder(TOPIC, body.as_bytes().to_vec()).build()
    };
    let send = |body: &'static str| {
        let producer = &producer;
        async move {
            producer
                .send_transaction_message(half(body)?)
                .await
                .context("5.x transactional send")
        }
    };

    info!("--- committed and rolled back by the client, two left open for the check-back");
    let committed = send("committed by the client").await?;
    let committed_id = committed.message_id().to_owned();
    committed.commit().await.context("commit")?;
    let rolled_back = send("commit? no: rolled back by the client").await?;
    let rolled_back_id = rolled_back.message_id().to_owned();
    rolled_back.rollback().await.context("rollback")?;
    let open_commit = send("commit when checked").await?;
    let open_commit_id = open_commit.message_id().to_owned();
    let open_rollback = send("roll back when checked").await?;
    let open_rollback_id = open_rollback.message_id().to_owned();
    drop((open_commit, open_rollback));

    deliveries
        .wait_for_all(
            &BTreeSet::from([committed_id.clone(), open_commit_id.clone()]),
            TIMEOUT,
        )
        .await?;
    wait_for("both open transactions checked back", TIMEOUT, || async {
        let checked = checked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        (checked.contains(&open_commit_id) && checked.contains(&open_rollback_id)).then_some(())
    })
    .await?;
    // Once all four ended, nothing more can reach the topic: exactly the two committed.
    wait_for("all four transactions ended", TIMEOUT, || async {
        (cluster.transactions_ended().await.ok()? == 4).then_some(())
    })
    .await?;
    let mut stored = 0;
    for group in GROUPS {
        for queue_id in 0..2 {
            stored += cluster.queue(group, TOPIC, queue_id).await?.len();
        }
    }
    assert_eq!(stored, 2, "only the committed reach the topic");
    let seen = deliveries.by_message();
    assert!(
        !seen.contains_key(&rolled_back_id),
        "rolled back by the client, yet delivered"
    );
    assert!(
        !seen.contains_key(&open_rollback_id),
        "rolled back when checked, yet delivered"
    );
    assert_eq!(seen[&committed_id].len(), 1);
    assert_eq!(seen[&open_commit_id].len(), 1);
    let checked = checked
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone();
    assert!(
        !checked.contains(&committed_id) && !checked.contains(&rolled_back_id),
        "ended transactions are not checked back: {checked:?}"
    );

    producer.shutdown().await?;
    reader.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

/// Receives with the official simple consumer until `wanted` messages came or `timeout`.
async fn receive_until(
    consumer: &SimpleConsumer,
    expression: &FilterExpression,
    invisible: Duration,
    wanted: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<MessageView>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut received = Vec::new();
    while received.len() < wanted {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "received {} of {wanted} messages in {timeout:?}",
            received.len()
        );
        let batch = consumer
            .receive_with(TOPIC, expression, 32, invisible)
            .await
            .context("5.x receive")?;
        received.extend(batch);
    }
    Ok(received)
}

async fn start_simple_consumer(
    endpoint: SocketAddr,
    group: &str,
) -> anyhow::Result<SimpleConsumer> {
    let (option, client_option) = simple_consumer_options(endpoint, group);
    let mut consumer = SimpleConsumer::new(option, client_option)?;
    consumer
        .start()
        .await
        .context("start the simple consumer")?;
    Ok(consumer)
}

async fn ack_all(consumer: &SimpleConsumer, messages: &[MessageView]) -> anyhow::Result<()> {
    for message in messages {
        consumer.ack(message).await.context("ack")?;
    }
    Ok(())
}

/// Receives the messages `expected` with `expression`, each once, acks them, and then finds
/// nothing more to receive.
async fn receive_exactly(
    consumer: &SimpleConsumer,
    expression: &FilterExpression,
    expected: &BTreeSet<String>,
) -> anyhow::Result<Vec<MessageView>> {
    let invisible = Duration::from_secs(30);
    let received = receive_until(consumer, expression, invisible, expected.len(), TIMEOUT).await?;
    let ids: BTreeSet<String> = received.iter().map(|m| m.message_id().to_owned()).collect();
    assert_eq!(&ids, expected, "exactly the matching messages");
    assert_eq!(received.len(), expected.len(), "each once");
    ack_all(consumer, &received).await?;
    assert_nothing_to_receive(consumer, expression).await?;
    Ok(received)
}

/// Receives once from each of the topic's four queues: nothing comes.
async fn assert_nothing_to_receive(
    consumer: &SimpleConsumer,
    expression: &FilterExpression,
) -> anyhow::Result<()> {
    for _ in 0..4 {
        let more = consumer
            .receive_with(TOPIC, expression, 32, Duration::from_secs(30))
            .await
            .context("5.x receive")?;
        assert!(more.is_empty(), "acked, yet delivered again: {more:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_the_official_simple_consumer_it_should_receive_by_tag_and_see_unacked_messages_again()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = start_cluster(0x5005_0003).await?;
    let endpoint = follower_endpoint(&cluster, "broker-a").await?;
    let producer = Producer::builder(cluster.nameservers(), "v5-pop-producer").build()?;
    // A rocketraft push consumer reads the same topic under a group of its own.
    let pushed = Deliveries::default();
    let push_consumer = pushed
        .start_reader(cluster.nameservers(), "v5-push-beside-pop", TOPIC)
        .await?;
    let mut tag_a = BTreeSet::new();
    let mut n_15_to_17 = BTreeSet::new();
    let mut all_sent = BTreeSet::new();
    for i in 0..20 {
        let tag = if i % 2 == 0 { "TagA" } else { "TagB" };
        let message = Message::new(TOPIC, format!("pop {i}"))
            .with_tags(tag)
            .with_property("n", i.to_string());
        let sent = producer.send(message).await?;
        all_sent.insert(sent.msg_id.clone());
        if (15..18).contains(&i) {
            n_15_to_17.insert(sent.msg_id.clone());
        }
        if tag == "TagA" {
            tag_a.insert(sent.msg_id);
        }
    }
    let consumer = start_simple_consumer(endpoint, "v5-pop").await?;
    let only_a = FilterExpression::new(FilterType::Tag, "TagA");

    info!("--- every TagA message once, acked; no TagB");
    let received = receive_exactly(&consumer, &only_a, &tag_a).await?;
    for message in &received {
        assert_eq!(message.tag(), Some("TagA"));
        assert_eq!(message.delivery_attempt(), 1);
    }
    pushed.wait_for_all(&all_sent, TIMEOUT).await?;
    push_consumer.shutdown().await;

    info!("--- another group receives by an SQL92 filter on a property: only its matches");
    let sql_consumer = start_simple_consumer(endpoint, "v5-sql").await?;
    let n_filter = FilterExpression::new(FilterType::Sql, "n >= 15 AND n < 18");
    receive_exactly(&sql_consumer, &n_filter, &n_15_to_17).await?;
    sql_consumer.shutdown().await?;

    info!("--- a message not acked within its invisible time comes back with attempt 2");
    let late = producer
        .send(Message::new(TOPIC, "not acked in time").with_tags("TagA"))
        .await?;
    let first = receive_until(&consumer, &only_a, Duration::from_secs(1), 1, TIMEOUT).await?;
    assert_eq!(first[0].message_id(), late.msg_id);
    let second = receive_until(&consumer, &only_a, Duration::from_secs(30), 1, TIMEOUT).await?;
    assert_eq!(second[0].message_id(), late.msg_id);
    assert_eq!(second[0].delivery_attempt(), 2);
    let stale = consumer.ack(&first[0]).await;
    assert!(
        format!("{stale:?}").contains("INVALID_RECEIPT_HANDLE"),
        "the first delivery's handle no longer acks: {stale:?}"
    );
    consumer.ack(&second[0]).await.context("ack")?;

    info!("--- a changed invisible duration brings a message back early (the client's nack)");
    let nacked = producer
        .send(Message::new(TOPIC, "nacked").with_tags("TagA"))
        .await?;
    let first = receive_until(&consumer, &only_a, Duration::from_secs(60), 1, TIMEOUT).await?;
    assert_eq!(first[0].message_id(), nacked.msg_id);
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    let back_in_a_second = change_invisible(&first[0], 1);
    let changed = raw
        .change_invisible_duration(back_in_a_second.clone())
        .await?
        .into_inner();
    assert_eq!(
        changed.status.map(|status| status.code()),
        Some(v5::Code::Ok)
    );
    assert_ne!(
        changed.receipt_handle,
        first[0].receipt_handle(),
        "a new handle"
    );
    let stale = raw
        .change_invisible_duration(back_in_a_second)
        .await?
        .into_inner();
    assert_eq!(
        stale.status.map(|status| status.code()),
        Some(v5::Code::InvalidReceiptHandle)
    );
    assert_eq!(
        stale.receipt_handle,
        first[0].receipt_handle(),
        "a failure answers the handle sent (the Java client keeps the answer's)"
    );
    let started = tokio::time::Instant::now();
    let again = receive_until(&consumer, &only_a, Duration::from_secs(30), 1, TIMEOUT).await?;
    assert_eq!(again[0].message_id(), nacked.msg_id);
    assert_eq!(again[0].delivery_attempt(), 2);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "back after the changed second, not the first minute"
    );

    info!("--- a change of 0 (the Node.js client's nack) makes it visible again at once");
    let at_once = change_invisible(&again[0], 0);
    let changed = raw.change_invisible_duration(at_once).await?.into_inner();
    assert_eq!(
        changed.status.map(|status| status.code()),
        Some(v5::Code::Ok),
        "RocketMQ's proxy takes 0"
    );
    let started = tokio::time::Instant::now();
    let third = receive_until(&consumer, &only_a, Duration::from_secs(30), 1, TIMEOUT).await?;
    assert_eq!(third[0].message_id(), nacked.msg_id);
    assert_eq!(third[0].delivery_attempt(), 3);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "back at once, not when the 30 s of the second delivery ended"
    );
    consumer.ack(&third[0]).await.context("ack")?;

    cluster.shutdown().await;
    Ok(())
}

fn simple_consumer_options(
    endpoint: SocketAddr,
    group: &str,
) -> (SimpleConsumerOption, ClientOption) {
    let mut option = SimpleConsumerOption::default();
    option.set_consumer_group(group);
    option.set_topics(vec![TOPIC]);
    let mut client_option = ClientOption::default();
    client_option.set_access_url(endpoint.to_string());
    // Empty receives come back after about a second and a half.
    client_option.set_long_polling_timeout(Duration::from_secs(2));
    (option, client_option)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_leader_kill_while_receiving_nothing_should_be_lost_and_nothing_acked_come_back()
-> anyhow::Result<()> {
    init_tracing();
    let clock = ManualClock::starting_now();
    let mut cluster = start_cluster_with(0x5005_0004, BTreeMap::new(), clock.clock()).await?;
    // The endpoint lives on a node of the other group: the kill does not take it down.
    let endpoint = follower_endpoint(&cluster, "broker-b").await?;
    let producer = Producer::builder(cluster.nameservers(), "v5-kill-producer").build()?;
    let mut sent = BTreeSet::new();
    for i in 0..24 {
        sent.insert(
            producer
                .send(Message::new(TOPIC, format!("kill {i}")))
                .await?
                .msg_id,
        );
    }
    let consumer = start_simple_consumer(endpoint, "v5-kill").await?;
    let all = FilterExpression::new(FilterType::Tag, "*");
    let invisible = Duration::from_secs(10);

    info!("--- every message received once; every other one acked");
    let first = receive_until(&consumer, &all, invisible, sent.len(), TIMEOUT).await?;
    let ids: BTreeSet<String> = first.iter().map(|m| m.message_id().to_owned()).collect();
    assert_eq!(ids, sent);
    assert_eq!(first.len(), sent.len(), "each once");
    let mut acked = BTreeSet::new();
    for message in first.iter().step_by(2) {
        consumer.ack(message).await.context("ack")?;
        acked.insert(message.message_id().to_owned());
    }
    let unacked: BTreeSet<String> = sent.difference(&acked).cloned().collect();

    info!("--- broker-a's leader stops as a crash would (nothing flushed)");
    let group = cluster.group_mut("broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    group.stop(leader).await;
    group.wait_for_leader(TIMEOUT).await?;

    info!("--- the unacked come back once their invisible time ended, the acked never");
    // The nodes' clock has stood still since the receive: none may come back yet.
    let early = consumer
        .receive_with(TOPIC, &all, 32, invisible)
        .await
        .context("5.x receive")?;
    assert!(
        early.is_empty(),
        "back before its invisible time ended: {early:?}"
    );
    clock.advance(invisible);
    let again = receive_until(
        &consumer,
        &all,
        Duration::from_secs(60),
        unacked.len(),
        TIMEOUT,
    )
    .await?;
    let again_ids: BTreeSet<String> = again.iter().map(|m| m.message_id().to_owned()).collect();
    assert_eq!(
        again_ids, unacked,
        "exactly the unacked, acked ones never again"
    );
    assert_eq!(again.len(), unacked.len(), "each once");
    assert!(again.iter().all(|message| message.delivery_attempt() == 2));
    ack_all(&consumer, &again).await?;
    assert_nothing_to_receive(&consumer, &all).await?;
    cluster.shutdown().await;
    Ok(())
}

/// Messages of `%DLQ%<group>` over both broker groups.
async fn dead_letters(cluster: &TestCluster, group: &str) -> anyhow::Result<usize> {
    let mut count = 0;
    for name in GROUPS {
        count += cluster
            .queue(name, &format!("%DLQ%{group}"), 0)
            .await?
            .len();
    }
    Ok(count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_max_attempts_or_a_forward_a_popped_message_should_go_to_the_dead_letter_topic()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = start_cluster(0x5005_0005).await?;
    let endpoint = follower_endpoint(&cluster, "broker-b").await?;
    info!("--- group v5-dlq allows one retry: two deliveries");
    let one_retry = GroupSettings {
        retry_max_times: 1,
        ..GroupSettings::default()
    };
    Admin::new(cluster.nameservers())
        .update_group("v5-dlq", one_retry, None)
        .await?;
    assert_eq!(consumer_settings(endpoint, "v5-dlq").await?, (2, false));
    let producer = Producer::builder(cluster.nameservers(), "v5-dlq-producer").build()?;
    let consumer = start_simple_consumer(endpoint, "v5-dlq").await?;
    let all = FilterExpression::new(FilterType::Tag, "*");
    let second = Duration::from_secs(1);

    let doomed = producer.send(Message::new(TOPIC, "never acked")).await?;
    for attempt in 1..=2 {
        let got = receive_until(&consumer, &all, second, 1, TIMEOUT).await?;
        assert_eq!(got[0].message_id(), doomed.msg_id);
        assert_eq!(got[0].delivery_attempt(), attempt);
    }
    wait_for("the message in the dead-letter topic", TIMEOUT, || async {
        // Receiving is what finds it due and moves it.
        let more = consumer.receive_with(TOPIC, &all, 32, second).await.ok()?;
        assert!(more.is_empty(), "delivered past its last attempt: {more:?}");
        (dead_letters(&cluster, "v5-dlq").await.ok()? == 1).then_some(())
    })
    .await?;

    info!("--- a consumer that gives up forwards it at once");
    let given_up = producer.send(Message::new(TOPIC, "given up")).await?;
    let got = receive_until(&consumer, &all, Duration::from_secs(60), 1, TIMEOUT).await?;
    assert_eq!(got[0].message_id(), given_up.msg_id);
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    let forward = v5::ForwardMessageToDeadLetterQueueRequest {
        group: resource("v5-dlq"),
        topic: resource(TOPIC),
        receipt_handle: got[0].receipt_handle(),
        message_id: given_up.msg_id.clone(),
        delivery_attempt: 1,
        max_delivery_attempts: 2,
    };
    let forwarded = raw
        .forward_message_to_dead_letter_queue(forward.clone())
        .await?
        .into_inner();
    assert_eq!(
        forwarded.status.map(|status| status.code()),
        Some(v5::Code::Ok)
    );
    assert_eq!(dead_letters(&cluster, "v5-dlq").await?, 2);
    let again = raw
        .forward_message_to_dead_letter_queue(forward)
        .await?
        .into_inner();
    assert_eq!(
        again.status.map(|status| status.code()),
        Some(v5::Code::InvalidReceiptHandle),
        "forwarded once"
    );
    assert_eq!(dead_letters(&cluster, "v5-dlq").await?, 2, "one copy");
    cluster.shutdown().await;
    Ok(())
}

/// What the endpoint tells a simple consumer of `group` reading `TOPIC` on its Telemetry
/// stream: the delivery attempts and whether the group is FIFO.
async fn consumer_settings(endpoint: SocketAddr, group: &str) -> anyhow::Result<(i32, bool)> {
    let settings = v5::TelemetryCommand {
        status: None,
        command: Some(v5::telemetry_command::Command::Settings(v5::Settings {
            client_type: Some(v5::ClientType::SimpleConsumer as i32),
            pub_sub: Some(v5::settings::PubSub::Subscription(v5::Subscription {
                group: resource(group),
                subscriptions: vec![v5::SubscriptionEntry {
                    topic: resource(TOPIC),
                    expression: None,
                }],
                ..v5::Subscription::default()
            })),
            ..v5::Settings::default()
        })),
    };
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    let mut answers = raw
        .telemetry(tokio_stream::iter([settings]))
        .await?
        .into_inner();
    let answer = answers
        .message()
        .await?
        .context("an answer to the settings")?;
    let Some(v5::telemetry_command::Command::Settings(told)) = answer.command else {
        anyhow::bail!("no settings in {answer:?}");
    };
    let Some(v5::settings::PubSub::Subscription(subscription)) = told.pub_sub else {
        anyhow::bail!("no subscription in the settings");
    };
    Ok((
        told.backoff_policy
            .context("a backoff policy")?
            .max_attempts,
        subscription.fifo.context("fifo")?,
    ))
}

/// One raw receive by client `client_id` of `group` naming the queue `sent` went to: its
/// status code and messages. `auto_renew` leaves the invisible time to the endpoint, as push
/// consumers do; otherwise the message is invisible for a second.
async fn raw_receive(
    endpoint: SocketAddr,
    client_id: &str,
    group: &str,
    sent: &SendResult,
    auto_renew: bool,
) -> anyhow::Result<(v5::Code, Vec<v5::Message>)> {
    let receive = ReceiveOf {
        group,
        broker_group: &sent.group,
        queue_id: sent.queue_id,
        batch_size: 1,
        long_polling: Duration::from_secs(2),
    };
    raw_receive_with(endpoint, client_id, receive.request(auto_renew)).await
}

/// A raw receive of consumer `group` naming queue `queue_id` of `broker_group`, each
/// message invisible for a second unless the endpoint renews it.
struct ReceiveOf<'a> {
    group: &'a str,
    broker_group: &'a str,
    queue_id: i32,
    batch_size: i32,
    long_polling: Duration,
}

impl ReceiveOf<'_> {
    fn request(&self, auto_renew: bool) -> v5::ReceiveMessageRequest {
        v5::ReceiveMessageRequest {
            group: resource(self.group),
            message_queue: Some(v5::MessageQueue {
                topic: resource(TOPIC),
                id: self.queue_id,
                broker: Some(v5::Broker {
                    name: self.broker_group.to_owned(),
                    ..v5::Broker::default()
                }),
                ..v5::MessageQueue::default()
            }),
            filter_expression: Some(v5::FilterExpression {
                r#type: v5::FilterType::Tag as i32,
                expression: "*".into(),
            }),
            batch_size: self.batch_size,
            invisible_duration: (!auto_renew).then_some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            auto_renew,
            long_polling_timeout: prost_types::Duration::try_from(self.long_polling).ok(),
        }
    }
}

/// Sends `receive` as client `client_id`: the status code and the messages it answered.
async fn raw_receive_with(
    endpoint: SocketAddr,
    client_id: &str,
    receive: v5::ReceiveMessageRequest,
) -> anyhow::Result<(v5::Code, Vec<v5::Message>)> {
    let mut request = tonic::Request::new(receive);
    request
        .metadata_mut()
        .insert("x-mq-client-id", client_id.parse()?);
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    let mut answers = raw.receive_message(request).await?.into_inner();
    let (mut code, mut messages) = (v5::Code::InternalError, Vec::new());
    while let Some(answer) = answers.message().await? {
        match answer.content {
            Some(v5::receive_message_response::Content::Status(status)) => code = status.code(),
            Some(v5::receive_message_response::Content::Message(message)) => messages.push(message),
            _ => {}
        }
    }
    Ok((code, messages))
}

/// Acks `messages` for consumer `group` with the receipt handles they came with: the overall
/// status code.
async fn ack_raw(
    endpoint: SocketAddr,
    group: &str,
    messages: &[v5::Message],
) -> anyhow::Result<v5::Code> {
    let entries = messages
        .iter()
        .filter_map(|message| {
            let system = message.system_properties.as_ref()?;
            Some(v5::AckMessageEntry {
                message_id: system.message_id.clone(),
                receipt_handle: system.receipt_handle.clone()?,
            })
        })
        .collect();
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    let acked = raw
        .ack_message(v5::AckMessageRequest {
            group: resource(group),
            topic: resource(TOPIC),
            entries,
        })
        .await?
        .into_inner();
    Ok(acked.status.context("an ack status")?.code())
}

/// The message ids of `messages`, each with its queue.
fn ids_and_queues(messages: &[v5::Message]) -> BTreeSet<(String, i32)> {
    messages
        .iter()
        .filter_map(|message| {
            let system = message.system_properties.as_ref()?;
            Some((system.message_id.clone(), system.queue_id))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_receive_naming_one_queue_it_should_take_and_wait_for_every_queue_of_its_group()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = start_cluster(0x5005_000d).await?;
    let endpoint = follower_endpoint(&cluster, GROUPS[0]).await?;
    let producer = Producer::builder(cluster.nameservers(), "v5-any-queue-producer").build()?;
    let route = producer.route(TOPIC).await?;
    let group_index = route
        .groups
        .iter()
        .position(|queues| queues.group == GROUPS[0])
        .context("the first group in the route")?;
    // A key of each of the group's two queues.
    let key_of = |queue_id: i32| {
        (0..)
            .map(|i| format!("key-{i}"))
            .find(|key| {
                let hash = rocketraft_domain::stable_hash::fnv1a_64(key.as_bytes());
                route.keyed_queue(hash) == Some((group_index, queue_id))
            })
            .expect("some key hashes to every queue")
    };
    let receive = ReceiveOf {
        group: "v5-any-queue",
        broker_group: GROUPS[0],
        queue_id: 0,
        batch_size: 32,
        long_polling: Duration::from_secs(20),
    };

    info!("--- a receive waiting on queue 0 wakes for a message in queue 1");
    let waiting = tokio::spawn(raw_receive_with(
        endpoint,
        "any-queue",
        receive.request(false),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let woke = producer
        .send_ordered(Message::new(TOPIC, "to queue 1"), &key_of(1))
        .await?;
    assert_eq!((woke.group.as_str(), woke.queue_id), (GROUPS[0], 1));
    let (code, got) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .context("the waiting receive did not wake")???;
    assert_eq!(code, v5::Code::Ok);
    assert_eq!(
        ids_and_queues(&got),
        BTreeSet::from([(woke.msg_id.clone(), 1)])
    );
    assert_eq!(ack_raw(endpoint, "v5-any-queue", &got).await?, v5::Code::Ok);

    info!("--- one receive naming queue 0 takes the messages of both queues");
    let mut expected = BTreeSet::new();
    for (i, queue_id) in [0, 1, 1, 0, 1, 1].into_iter().enumerate() {
        let message = Message::new(TOPIC, format!("spread {i}"));
        let sent = producer.send_ordered(message, &key_of(queue_id)).await?;
        expected.insert((sent.msg_id, sent.queue_id));
    }
    let (code, got) = raw_receive_with(endpoint, "any-queue", receive.request(false)).await?;
    assert_eq!(code, v5::Code::Ok);
    assert_eq!(ids_and_queues(&got), expected, "all of them, in one batch");
    cluster.shutdown().await;
    Ok(())
}

/// A Telemetry stream of client `client_id` (a simple consumer of `group`), open until the
/// returned sender is dropped.
async fn open_telemetry(
    endpoint: SocketAddr,
    client_id: &str,
    group: &str,
) -> anyhow::Result<tokio::sync::mpsc::Sender<v5::TelemetryCommand>> {
    let (commands, stream) = tokio::sync::mpsc::channel(1);
    commands
        .send(v5::TelemetryCommand {
            status: None,
            command: Some(v5::telemetry_command::Command::Settings(v5::Settings {
                client_type: Some(v5::ClientType::SimpleConsumer as i32),
                pub_sub: Some(v5::settings::PubSub::Subscription(v5::Subscription {
                    group: resource(group),
                    ..v5::Subscription::default()
                })),
                ..v5::Settings::default()
            })),
        })
        .await?;
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(stream));
    request
        .metadata_mut()
        .insert("x-mq-client-id", client_id.parse()?);
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    let mut answers = raw.telemetry(request).await?.into_inner();
    answers.message().await?.context("the settings answer")?;
    // Drain further commands until the stream ends.
    tokio::spawn(async move { while let Ok(Some(_)) = answers.message().await {} });
    Ok(commands)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_an_auto_renew_receive_the_endpoint_should_keep_it_invisible_while_its_client_is_there()
-> anyhow::Result<()> {
    init_tracing();
    let grpc_v5 = GrpcV5Config {
        listen: Some("127.0.0.1:0".parse()?),
        auto_renew_invisible_ms: 2000,
        ..GrpcV5Config::default()
    };
    let cluster = TestCluster::start_with_extras(
        0x5005_0008,
        |_| {},
        Extras {
            grpc_v5,
            ..Extras::default()
        },
    )
    .await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let endpoint = follower_endpoint(&cluster, GROUPS[0]).await?;
    let producer = Producer::builder(cluster.nameservers(), "v5-renew-producer").build()?;
    let telemetry = open_telemetry(endpoint, "pusher", "v5-renew").await?;

    info!("--- received with auto_renew, held three times its invisible time, then acked");
    let held = producer.send(Message::new(TOPIC, "held")).await?;
    let (code, got) = raw_receive(endpoint, "pusher", "v5-renew", &held, true).await?;
    assert_eq!((code, got.len()), (v5::Code::Ok, 1));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (code, _) = raw_receive(endpoint, "other", "v5-renew", &held, false).await?;
    assert_eq!(code, v5::Code::MessageNotFound, "still invisible: renewed");
    assert_eq!(
        ack_raw(endpoint, "v5-renew", &got).await?,
        v5::Code::Ok,
        "the first handle acks the renewed delivery"
    );

    info!("--- its client leaves: no more renewals, the message comes back");
    let orphan = producer.send(Message::new(TOPIC, "orphan")).await?;
    let (code, _) = raw_receive(endpoint, "pusher", "v5-renew", &orphan, true).await?;
    assert_eq!(code, v5::Code::Ok);
    drop(telemetry);
    let again = wait_for("the orphan delivered again", TIMEOUT, || async {
        let (_, got) = raw_receive(endpoint, "other", "v5-renew", &orphan, false)
            .await
            .ok()?;
        got.into_iter().next()
    })
    .await?;
    let attempt = again
        .system_properties
        .and_then(|system| system.delivery_attempt);
    assert_eq!(attempt, Some(2));
    cluster.shutdown().await;
    Ok(())
}

fn bodies(messages: &[MessageView]) -> Vec<String> {
    messages
        .iter()
        .map(|message| String::from_utf8_lossy(message.body()).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_an_orderly_group_a_message_group_should_be_received_in_order_one_batch_at_a_time()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = start_cluster(0x5005_0006).await?;
    let endpoint = follower_endpoint(&cluster, "broker-a").await?;
    let orderly = GroupSettings {
        consume_orderly: true,
        ..GroupSettings::default()
    };
    Admin::new(cluster.nameservers())
        .update_group("v5-fifo", orderly, None)
        .await?;
    assert_eq!(consumer_settings(endpoint, "v5-fifo").await?, (17, true));
    let producer = start_v5_producer(endpoint).await?;
    let send_steps = |steps: std::ops::Range<u32>| {
        let producer = &producer;
        async move {
            for step in steps {
                let message = MessageBuilder::fifo_message_builder(
                    TOPIC,
                    format!("step {step}").into_bytes(),
                    "order-7",
                )
                .build()?;
                producer.send(message).await.context("5.x send")?;
            }
            anyhow::Ok(())
        }
    };
    send_steps(0..6).await?;
    let consumer = start_simple_consumer(endpoint, "v5-fifo").await?;
    let all = FilterExpression::new(FilterType::Tag, "*");

    info!("--- the message group in order; three acked, three left in flight");
    let first = receive_until(&consumer, &all, Duration::from_secs(3), 6, TIMEOUT).await?;
    let steps: Vec<String> = (0..6).map(|step| format!("step {step}")).collect();
    assert_eq!(bodies(&first), steps);
    ack_all(&consumer, &first[..3]).await?;
    send_steps(6..8).await?;

    info!("--- nothing newer before the unacked come back, in order");
    let again = receive_until(&consumer, &all, Duration::from_secs(30), 3, TIMEOUT).await?;
    assert_eq!(
        bodies(&again),
        steps[3..],
        "the unacked first, and only them"
    );
    assert!(again.iter().all(|message| message.delivery_attempt() == 2));
    ack_all(&consumer, &again).await?;
    let newer = receive_until(&consumer, &all, Duration::from_secs(30), 2, TIMEOUT).await?;
    assert_eq!(bodies(&newer), ["step 6", "step 7"]);
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_client_that_leaves_its_held_receives_should_end_at_once() -> anyhow::Result<()> {
    init_tracing();
    let cluster = start_cluster(0x5005_0009).await?;
    let endpoint = follower_endpoint(&cluster, GROUPS[0]).await?;
    // Longer than the test waits for a held receive to end: it must not be waited out.
    let receive = ReceiveOf {
        group: "v5-leaving",
        broker_group: GROUPS[0],
        queue_id: 0,
        batch_size: 1,
        long_polling: Duration::from_secs(30),
    }
    .request(false);
    let held_receive = || {
        let receive = receive.clone();
        tokio::spawn(async move { raw_receive_with(endpoint, "leaving", receive).await })
    };
    let telemetry = open_telemetry(endpoint, "leaving", "v5-leaving").await?;

    info!("--- NotifyClientTermination ends the client's held receive");
    let first = held_receive();
    one_receive_held(&cluster).await?;
    let mut goodbye = tonic::Request::new(v5::NotifyClientTerminationRequest {
        group: resource("v5-leaving"),
    });
    goodbye
        .metadata_mut()
        .insert("x-mq-client-id", "leaving".parse()?);
    let mut raw = MessagingServiceClient::connect(format!("http://{endpoint}")).await?;
    raw.notify_client_termination(goodbye).await?;
    let (code, messages) = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .context("the held receive outlived its client's termination")???;
    assert_eq!((code, messages.len()), (v5::Code::MessageNotFound, 0));

    info!("--- so does the end of its Telemetry stream");
    let telemetry_again = open_telemetry(endpoint, "leaving", "v5-leaving").await?;
    drop(telemetry);
    let second = held_receive();
    one_receive_held(&cluster).await?;
    drop(telemetry_again);
    let (code, _) = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .context("the held receive outlived its client's Telemetry stream")???;
    assert_eq!(code, v5::Code::MessageNotFound);
    cluster.shutdown().await;
    Ok(())
}

/// Waits until the cluster holds exactly one pull or pop (a receive long-polling at its broker).
async fn one_receive_held(cluster: &TestCluster) -> anyhow::Result<()> {
    wait_for("one receive held at its broker", TIMEOUT, || async {
        let held = cluster.node_total(|status| status.pulls_held).await.ok()?;
        (held == 1).then_some(())
    })
    .await
}

/// A change of `message`'s invisible time (received by group `v5-pop`) to `seconds`.
fn change_invisible(message: &MessageView, seconds: i64) -> v5::ChangeInvisibleDurationRequest {
    v5::ChangeInvisibleDurationRequest {
        group: resource("v5-pop"),
        topic: resource(TOPIC),
        receipt_handle: message.receipt_handle(),
        invisible_duration: Some(prost_types::Duration { seconds, nanos: 0 }),
        message_id: message.message_id().to_owned(),
    }
}
