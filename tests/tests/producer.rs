//! The producer against a real cluster: a nameserver and two 3-node broker groups on
//! loopback, topics created in both groups.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_client::admin::Admin;
use rocketraft_client::error::ProducerError;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::producer::SendOptions;
use rocketraft_client::producer::SendResult;
use rocketraft_client::route::RouteCache;
use rocketraft_proto::broker::QueryMessagesRequest;
use rocketraft_proto::common::ResponseCode;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::start_nameserver;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "Orders";
const QUEUES: u32 = 4;

/// Both groups serve `TOPIC` with `QUEUES` queues each; the producer finds them.
async fn start(seed: u64) -> anyhow::Result<(TestCluster, Producer)> {
    let cluster = TestCluster::start(seed).await?;
    cluster.create_topic(TOPIC, QUEUES).await?;
    cluster.wait_for_route(TOPIC).await?;
    let producer = Producer::builder(cluster.nameservers(), "test-producer").build()?;
    Ok((cluster, producer))
}

async fn assert_stored(cluster: &TestCluster, results: &[SendResult]) -> anyhow::Result<()> {
    for result in results {
        let queue = cluster.queue(&result.group, TOPIC, result.queue_id).await?;
        assert_eq!(
            queue.get(result.queue_offset as usize),
            Some(&result.commit_log_offset),
            "{result:?} is not where the send said"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_two_groups_should_spread_order_and_batch_sends() -> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start(0x5EED_0201).await?;

    info!("--- round-robin sends reach every queue of both groups");
    let mut sent = Vec::new();
    for i in 0..32 {
        sent.push(
            producer
                .send(Message::new(TOPIC, format!("m{i}")).with_tags("TagA"))
                .await?,
        );
    }
    for group in GROUPS {
        for queue in 0..QUEUES as i32 {
            assert!(
                sent.iter().any(|r| r.group == group && r.queue_id == queue),
                "{group}/{queue} got nothing"
            );
        }
    }
    assert_stored(&cluster, &sent).await?;
    let mut ids: Vec<&String> = sent.iter().map(|r| &r.msg_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), sent.len(), "every message has its own id");

    info!("--- sends with one key land in one queue, in order");
    let ordered: Vec<SendResult> = {
        let mut results = Vec::new();
        for i in 0..10 {
            results.push(
                producer
                    .send_ordered(Message::new(TOPIC, format!("o{i}")), "order-7")
                    .await?,
            );
        }
        results
    };
    assert!(
        ordered
            .windows(2)
            .all(|w| w[0].group == w[1].group && w[0].queue_id == w[1].queue_id)
    );
    assert!(
        ordered
            .windows(2)
            .all(|w| w[1].queue_offset == w[0].queue_offset + 1),
        "in send order"
    );

    info!("--- concurrent sends to one queue share requests; a bad one fails alone");
    let key = "lane-7";
    let too_many_properties = "x".repeat(40 * 1024);
    // Message `<prefix><i>`, with properties over the limit if `i` is `bad`.
    let numbered = |prefix: &str, i: usize, bad: usize| {
        let message = Message::new(TOPIC, format!("{prefix}{i}"));
        if i == bad {
            message.with_property("BIG", too_many_properties.clone())
        } else {
            message
        }
    };
    let sends = (0..64).map(|i| {
        let message = numbered("c", i, 10);
        let producer = producer.clone();
        tokio::spawn(async move { producer.send_ordered(message, key).await })
    });
    let sends: Vec<_> = sends.collect();
    let mut concurrent = Vec::new();
    for (i, send) in sends.into_iter().enumerate() {
        let result = send.await?;
        if i == 10 {
            let error = result.expect_err("properties over the limit");
            assert!(matches!(error, ProducerError::MessageIllegal(_)), "{error}");
        } else {
            concurrent.push(result?);
        }
    }
    let mut offsets: Vec<(String, i32, i64)> = concurrent
        .iter()
        .map(|r| (r.group.clone(), r.queue_id, r.queue_offset))
        .collect();
    offsets.sort_unstable();
    assert!(
        offsets
            .windows(2)
            .all(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1 && w[1].2 == w[0].2 + 1),
        "one queue, consecutive offsets, no gap for the refused message: {offsets:?}"
    );
    assert_stored(&cluster, &concurrent).await?;

    info!(
        "--- concurrent sends to every queue of a group share requests, each queue keeps their \
         order, and a bad one fails alone"
    );
    // Polled in order, so each group's lane takes them in order.
    let sends = (0..64).map(|i| producer.send(numbered("r", i, 21)));
    let mut by_queue = std::collections::BTreeMap::<_, Vec<i64>>::new();
    let mut round_robin = Vec::new();
    for (i, result) in futures::future::join_all(sends)
        .await
        .into_iter()
        .enumerate()
    {
        if i == 21 {
            let error = result.expect_err("properties over the limit");
            assert!(matches!(error, ProducerError::MessageIllegal(_)), "{error}");
            continue;
        }
        let result = result?;
        by_queue
            .entry((result.group.clone(), result.queue_id))
            .or_default()
            .push(result.queue_offset);
        round_robin.push(result);
    }
    assert_eq!(
        by_queue.len(),
        GROUPS.len() * QUEUES as usize,
        "{by_queue:?}"
    );
    for (queue, offsets) in &by_queue {
        assert!(
            offsets.windows(2).all(|w| w[1] == w[0] + 1),
            "{queue:?}: in send order, no gap for the refused message: {offsets:?}"
        );
    }
    assert_stored(&cluster, &round_robin).await?;

    info!("--- a batch lands together");
    let batch = producer
        .send_batch(
            (0..10)
                .map(|i| Message::new(TOPIC, format!("b{i}")))
                .collect(),
        )
        .await?;
    assert_eq!(batch.len(), 10);
    assert!(
        batch
            .windows(2)
            .all(|w| w[1].queue_offset == w[0].queue_offset + 1 && w[0].queue_id == w[1].queue_id)
    );
    assert_stored(&cluster, &batch).await?;

    info!("--- a one-way send is stored without anyone waiting for it");
    producer.send_oneway(Message::new(TOPIC, "fire-and-forget").with_keys(["oneway-1"]));
    let stored_before: usize =
        sent.len() + ordered.len() + concurrent.len() + round_robin.len() + batch.len();
    wait_for("the one-way message", Duration::from_secs(20), || async {
        let mut stored = 0;
        for group in GROUPS {
            for queue in 0..QUEUES as i32 {
                stored += cluster.queue(group, TOPIC, queue).await.ok()?.len();
            }
        }
        (stored == stored_before + 1).then_some(())
    })
    .await?;

    info!("--- forwarded messages keep their own born time and host, beside plain sends");
    let forwarded: Vec<_> = (0..8u8)
        .map(|i| {
            let producer = producer.clone();
            let message = Message::new(TOPIC, format!("f{i}")).with_keys([format!("fwd-{i}")]);
            // The odd ones are the producer's own; all go to one queue, so they share lanes.
            let options = SendOptions {
                order_key: Some("forwarded".into()),
                born_timestamp_ms: (i % 2 == 0).then_some(1_600_000_000_000 + i64::from(i)),
                born_host: (i % 2 == 0).then(|| SocketAddr::from(([10, 0, 0, i], 5000))),
            };
            tokio::spawn(async move { producer.send_with(message, options).await })
        })
        .collect();
    for (i, send) in forwarded.into_iter().enumerate() {
        let result = send.await??;
        let group = cluster.group(&result.group);
        let mut leader = group.client(group.wait_for_leader(TIMEOUT).await?).await?;
        let request = QueryMessagesRequest {
            key: format!("fwd-{i}"),
            ..QueryMessagesRequest::default()
        };
        let found = leader.query_messages(request).await?.into_inner().messages;
        let [stored] = found.as_slice() else {
            anyhow::bail!("fwd-{i} stored {} times", found.len());
        };
        let born_host: SocketAddr = stored.born_host.parse()?;
        if i % 2 == 0 {
            assert_eq!(stored.born_timestamp_ms, 1_600_000_000_000 + i as i64);
            assert_eq!(born_host, SocketAddr::from(([10, 0, 0, i as u8], 5000)));
        } else {
            assert!(stored.born_timestamp_ms > 1_700_000_000_000, "born now");
            assert!(
                born_host.ip().is_loopback(),
                "the producer's own: {born_host}"
            );
        }
    }
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_bad_sends_should_fail_clearly_and_store_nothing() -> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start(0x5EED_0203).await?;
    let before = (
        cluster.queue("broker-a", TOPIC, 0).await?,
        cluster.queue("broker-b", TOPIC, 0).await?,
    );

    let oversized = Message::new(TOPIC, vec![0u8; 4 * 1024 * 1024 + 1]);
    let error = producer.send(oversized).await.expect_err("over the limit");
    assert!(matches!(error, ProducerError::MessageIllegal(_)), "{error}");
    let separator = Message::new(TOPIC, "x").with_property("bad", "a\u{1}b");
    let error = producer
        .send(separator)
        .await
        .expect_err("separator in a value");
    assert!(matches!(error, ProducerError::MessageIllegal(_)), "{error}");
    let error = producer
        .send(Message::new("NoSuchTopic", "x"))
        .await
        .expect_err("no route");
    assert!(matches!(error, ProducerError::NoRoute { .. }), "{error}");
    let error = producer
        .send(Message::new("bad topic!", "x"))
        .await
        .expect_err("bad name");
    assert!(matches!(error, ProducerError::TopicIllegal(_)), "{error}");
    let mixed = vec![Message::new(TOPIC, "a"), Message::new("Other", "b")];
    assert!(matches!(
        producer.send_batch(mixed).await,
        Err(ProducerError::InvalidRequest(_))
    ));
    let broker_a = cluster.group("broker-a");
    let mut leader = broker_a
        .client(broker_a.wait_for_leader(TIMEOUT).await?)
        .await?;
    let mut unparsable_host = send_request(TOPIC, 0, [b"x".to_vec()]);
    unparsable_host.messages[0].born_host = "not-an-address".into();
    let status = leader
        .send(unparsable_host)
        .await
        .expect_err("a message's born host that is no ip:port");
    assert_eq!(
        rocketraft_proto::response_code(&status),
        Some(ResponseCode::MessageIllegal),
        "{status}"
    );
    assert!(status.message().contains("born_host"), "{status}");

    let after = (
        cluster.queue("broker-a", TOPIC, 0).await?,
        cluster.queue("broker-b", TOPIC, 0).await?,
    );
    assert_eq!(before, after, "nothing was stored");
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_leader_isolated_mid_sends_should_never_report_a_lost_send() -> anyhow::Result<()> {
    init_tracing();
    let (cluster, producer) = start(0x5EED_0205).await?;
    let group_a = cluster.group("broker-a");
    let leader = group_a.wait_for_leader(TIMEOUT).await?;

    let completed = Arc::new(AtomicUsize::new(0));
    let sender = {
        let (producer, completed) = (producer.clone(), completed.clone());
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for i in 0..200 {
                outcomes.push(producer.send(Message::new(TOPIC, format!("f{i}"))).await);
                completed.fetch_add(1, Ordering::Relaxed);
            }
            outcomes
        })
    };
    wait_for("the first sends", TIMEOUT, || async {
        (completed.load(Ordering::Relaxed) >= 10).then_some(())
    })
    .await?;
    info!(
        leader,
        "--- isolate broker-a's leader while sends are in flight"
    );
    let new_leader = group_a.isolate_leader(leader, TIMEOUT).await?;

    info!(leader, "--- the isolated old leader cannot commit a write");
    let stale = rocketraft_tests::send_request(TOPIC, 0, [b"stale".to_vec()]);
    let refused = group_a
        .client(leader)
        .await?
        .send(stale)
        .await
        .expect_err("no quorum behind the old leader");
    assert!(
        matches!(
            rocketraft_proto::response_code(&refused),
            Some(ResponseCode::ReplicationTimeout | ResponseCode::NotLeader)
        ),
        "{refused}"
    );
    let outcomes = sender.await?;
    group_a.faults.heal();
    info!(leader, new_leader, "--- healed, the old leader follows");
    wait_for("the old leader to follow", TIMEOUT, || async {
        let status = group_a.status(leader).await.ok()?;
        (status.role == "follower" && status.leader_id == Some(new_leader)).then_some(())
    })
    .await?;
    let pull = rocketraft_proto::broker::PullRequest {
        group: "audit".into(),
        topic: TOPIC.into(),
        queue_id: 0,
        queue_offset: 0,
        max_messages: 1024,
        tags: Vec::new(),
        max_wait_ms: 0,
        sql: String::new(),
        stored_records: false,
    };
    let stored = group_a
        .client(new_leader)
        .await?
        .pull(pull)
        .await?
        .into_inner()
        .messages;
    assert!(
        stored.iter().all(|m| m.body.as_ref() != b"stale"),
        "the old leader's write never committed"
    );
    let acknowledged: Vec<SendResult> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok().cloned())
        .collect();
    info!(
        acknowledged = acknowledged.len(),
        failed = outcomes.len() - acknowledged.len(),
        "--- check"
    );
    assert!(
        acknowledged.len() >= 150,
        "most sends succeed by retrying on broker-b or a new leader"
    );
    assert_stored(&cluster, &acknowledged).await?;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_auto_creating_group_should_route_and_accept_the_first_send_to_a_new_topic()
-> anyhow::Result<()> {
    init_tracing();
    let nameserver =
        start_nameserver(rocketraft_nameserver::server::NameServerConfig::default()).await?;
    let addr = nameserver.addr().to_string();
    let group = rocketraft_tests::TestGroup::start(3, 0x5EED_0207, |config| {
        config.namesrv = vec![addr.clone()];
        config.auto_create_topic = true;
    })
    .await?;
    group.wait_for_leader(TIMEOUT).await?;
    let producer = Producer::builder(vec![addr.clone()], "auto").build()?;
    let first = rocketraft_tests::wait_for("an auto-create route", TIMEOUT, || async {
        producer.send(Message::new("Fresh", "first")).await.ok()
    })
    .await?;
    assert_eq!(first.group, "broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    assert!(
        group
            .node(leader)
            .group()
            .metadata()
            .topics
            .contains_key("Fresh"),
        "the send created the topic"
    );
    group.shutdown().await;
    nameserver.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_every_group_down_should_fail_within_the_timeout() -> anyhow::Result<()> {
    init_tracing();
    let (mut cluster, _) = start(0x5EED_0209).await?;
    let producer = Producer::builder(cluster.nameservers(), "doomed")
        .send_timeout(Duration::from_secs(1))
        .build()?;
    for group in &mut cluster.groups {
        for id in 1..=3 {
            group.stop(id).await;
        }
    }
    let started = std::time::Instant::now();
    let error = producer
        .send(Message::new(TOPIC, "x"))
        .await
        .expect_err("nobody serves");
    assert!(
        matches!(error, ProducerError::AllGroupsUnavailable { .. }),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded by the send timeout"
    );
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_commit_slower_than_an_attempt_the_retry_should_store_the_message_once()
-> anyhow::Result<()> {
    const SLOW_TOPIC: &str = "SlowCommits";
    init_tracing();
    // Elections far above the injected delay: the leader stays, its commits are only slow.
    let cluster = TestCluster::start_with(0x5EED_0207, |config| {
        config.raft.election_timeout_min_ms = 6_000;
        config.raft.election_timeout_max_ms = 9_000;
    })
    .await?;
    let group_a = cluster.group("broker-a");
    let leader = group_a.wait_for_leader(TIMEOUT).await?;
    // One group only, so the retry goes where the first attempt went.
    Admin::new(cluster.nameservers())
        .create_topic(SLOW_TOPIC, 1, Some("broker-a"))
        .await?;
    let routes = RouteCache::new(cluster.nameservers(), Duration::ZERO);
    wait_for("the topic's route", TIMEOUT, || async {
        let route = routes.refresh(SLOW_TOPIC).await.ok()?;
        route
            .groups
            .iter()
            .all(|g| g.leader.is_some())
            .then_some(())
    })
    .await?;
    // The defaults: 3 s per send, 2 retries, so the first attempt gets 1 s.
    let producer = Producer::builder(cluster.nameservers(), "test-producer").build()?;
    producer.send(Message::new(SLOW_TOPIC, "warm-up")).await?;
    let log_before = group_a.status(leader).await?.last_log_index.unwrap_or(0);

    info!("--- every Raft RPC takes 1.5 s now: the commit outlasts the first attempt");
    group_a.faults.set_delay(Duration::from_millis(1500));
    let sending =
        tokio::spawn(async move { producer.send(Message::new(SLOW_TOPIC, "once")).await });
    wait_for("the retry in the leader's log", TIMEOUT, || async {
        let last = group_a.status(leader).await.ok()?.last_log_index?;
        (last >= log_before + 2).then_some(())
    })
    .await?;
    group_a.faults.heal();
    let sent = sending.await??;

    let queue = cluster.queue("broker-a", SLOW_TOPIC, 0).await?;
    assert_eq!(
        queue.len(),
        2,
        "the warm-up and one copy, not two: {queue:?}"
    );
    assert_eq!(
        queue.get(sent.queue_offset as usize),
        Some(&sent.commit_log_offset),
        "the retry answered with where the first copy is"
    );
    cluster.shutdown().await;
    Ok(())
}
