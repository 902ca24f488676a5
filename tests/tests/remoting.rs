//! RocketMQ 4.x remoting against a real cluster (a nameserver and two 3-node broker groups on
//! loopback): the nameserver answers 4.x requests on its own port, beside gRPC, each in the
//! serialize type it was sent in, with every group's leader as broker id 0; a broker node
//! answers sends, heartbeats and offsets on its own port, through its group's leader, a
//! follower as well as the leader, and serves pulls from its own data as stored records.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use futures::StreamExt;
use rocketraft_cli::remoting_producer::RemotingProducer;
use rocketraft_cli::remoting_producer::RemotingSendError;
use rocketraft_remoting::RemotingCommand;
use rocketraft_remoting::SerializeType;
use rocketraft_remoting::codes::request;
use rocketraft_remoting::codes::response;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::remoting_client::RemotingClient;
use rocketraft_tests::remoting_client::StoredRecord;
use rocketraft_tests::remoting_client::decode_records;
use rocketraft_tests::wait_for;
use serde_json::Value;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "Orders";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_topic_the_nameserver_should_route_4x_clients_to_each_leader_as_broker_id_zero()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x4E4D_0001).await?;
    cluster.create_topic(TOPIC, 4).await?;
    cluster.wait_for_route(TOPIC).await?;
    let nameserver = cluster.nameservers()[0].clone();
    let mut client = RemotingClient::connect(&nameserver).await?;

    let mut leaders = Vec::new();
    for name in GROUPS {
        let group = cluster.group(name);
        leaders.push((name, group.addr(group.wait_for_leader(TIMEOUT).await?)));
    }
    let route = wait_for("a route naming both leaders as id 0", TIMEOUT, || {
        let (nameserver, leaders) = (nameserver.clone(), leaders.clone());
        async move {
            let mut client = RemotingClient::connect(&nameserver).await.ok()?;
            let route = client
                .json(request::GET_ROUTEINFO_BY_TOPIC, &[("topic", TOPIC)])
                .await
                .ok()?;
            let named = leaders.iter().all(|(name, leader)| {
                route["brokerDatas"].as_array().is_some_and(|groups| {
                    groups.iter().any(|group| {
                        group["brokerName"] == *name
                            && group["brokerAddrs"]["0"] == leader.to_string()
                    })
                })
            });
            named.then_some(route)
        }
    })
    .await?;
    for group in route["brokerDatas"].as_array().context("brokerDatas")? {
        let addrs = group["brokerAddrs"].as_object().context("brokerAddrs")?;
        let ids: Vec<&str> = addrs.keys().map(String::as_str).collect();
        assert_eq!(ids, ["0", "1", "2"], "the leader, then its two followers");
    }
    let queues = route["queueDatas"].as_array().context("queueDatas")?;
    assert_eq!(queues.len(), 2, "{route}");
    for queue in queues {
        assert_eq!(queue["readQueueNums"], 4);
        assert_eq!(queue["writeQueueNums"], 4);
        assert_eq!(queue["perm"], 6, "readable and writable");
    }
    assert_eq!(route["filterServerTable"], serde_json::json!({}));

    // The same question in the binary header gets the same answer, in the binary header.
    let binary = client
        .call(
            request::GET_ROUTEINFO_BY_TOPIC,
            &[("topic", TOPIC)],
            SerializeType::RocketMq,
        )
        .await?;
    assert_eq!(binary.serialize_type, SerializeType::RocketMq);
    assert_eq!(serde_json::from_slice::<Value>(&binary.body)?, route);

    let missing = client
        .call(
            request::GET_ROUTEINFO_BY_TOPIC,
            &[("topic", "Missing")],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(missing.code, response::TOPIC_NOT_EXIST);
    assert!(
        missing
            .remark
            .as_deref()
            .is_some_and(|remark| remark.contains("Missing")),
        "{missing:?}"
    );

    let cluster_info = client.json(request::GET_BROKER_CLUSTER_INFO, &[]).await?;
    let clusters = cluster_info["clusterAddrTable"]
        .as_object()
        .context("clusterAddrTable")?;
    let mut groups: Vec<&str> = clusters
        .values()
        .flat_map(|groups| groups.as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    groups.sort_unstable();
    assert_eq!(groups, GROUPS);

    let topics = client
        .json(request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[])
        .await?;
    assert!(
        topics["topicList"]
            .as_array()
            .is_some_and(|topics| topics.iter().any(|topic| topic == TOPIC)),
        "{topics}"
    );

    let kv = client
        .call(
            request::GET_KV_CONFIG,
            &[("namespace", "ORDER_TOPIC_CONFIG"), ("key", TOPIC)],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(kv.code, response::QUERY_NOT_FOUND, "no KV config is kept");

    let no_topic = client
        .call(request::GET_ROUTEINFO_BY_TOPIC, &[], SerializeType::Json)
        .await?;
    assert_eq!(no_topic.code, response::SYSTEM_ERROR);
    assert!(
        no_topic
            .remark
            .as_deref()
            .is_some_and(|remark| remark.contains("topic")),
        "the missing field is named: {no_topic:?}"
    );
    let unknown = client.call(9999, &[], SerializeType::Json).await?;
    assert_eq!(unknown.code, response::REQUEST_CODE_NOT_SUPPORTED);

    // gRPC still answers on the same port.
    let admin = rocketraft_client::admin::Admin::new(cluster.nameservers());
    assert_eq!(admin.topic_route(TOPIC).await?.groups.len(), 2);
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_follower_a_4x_client_should_send_register_and_commit_through_its_leader()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x4E4D_0002).await?;
    let group = cluster.group(GROUPS[0]);
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let follower = group.addr(group.a_follower(leader)).to_string();
    let mut client = RemotingClient::connect(&follower).await?;

    client
        .ok(
            request::UPDATE_AND_CREATE_TOPIC,
            &[
                ("topic", TOPIC),
                ("defaultTopic", "TBW102"),
                ("readQueueNums", "2"),
                ("writeQueueNums", "2"),
                ("perm", "6"),
            ],
            Bytes::new(),
        )
        .await?;
    let queue = [("topic", TOPIC), ("queueId", "1")];
    assert_eq!(client.offset(request::GET_MAX_OFFSET, &queue).await?, 0);

    let mut sent = Vec::new();
    let mut msg_ids = Vec::new();
    for i in 0..3 {
        let properties = format!("TAGS\u{1}A\u{2}UNIQ_KEY\u{1}ID{i}\u{2}");
        let reply = client
            .ok(
                request::SEND_MESSAGE_V2,
                &[
                    ("a", "legacy-producer"),
                    ("b", TOPIC),
                    ("c", "TBW102"),
                    ("d", "4"),
                    ("e", "1"),
                    ("f", "0"),
                    ("g", "1700000000000"),
                    ("h", "0"),
                    ("i", &properties),
                ],
                Bytes::from(format!("m{i}")),
            )
            .await?;
        sent.push(reply.ext_fields.required_i64("queueOffset")?);
        let msg_id = reply.ext_fields.required_str("msgId")?;
        assert_eq!(msg_id.len(), 32, "an IPv4 offset message id: {msg_id}");
        msg_ids.push(msg_id.to_owned());
    }
    assert_eq!(sent, [0, 1, 2], "stored in order on queue 1");
    assert_eq!(client.offset(request::GET_MAX_OFFSET, &queue).await?, 3);
    assert_eq!(client.offset(request::GET_MIN_OFFSET, &queue).await?, 0);
    let from_the_start = [("topic", TOPIC), ("queueId", "1"), ("timestamp", "0")];
    assert_eq!(
        client
            .offset(request::SEARCH_OFFSET_BY_TIMESTAMP, &from_the_start)
            .await?,
        0
    );

    info!("--- a consumer's heartbeat registers it with the leader");
    let heartbeat = serde_json::json!({
        "clientID": "10.0.0.1@legacy",
        "consumerDataSet": [{
            "groupName": "legacy-consumers",
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "A", "expressionType": "TAG"}],
            "unitMode": false
        }],
        "producerDataSet": []
    });
    let beat = client
        .ok(
            request::HEART_BEAT,
            &[],
            Bytes::from(serde_json::to_vec(&heartbeat)?),
        )
        .await?;
    assert_eq!(
        beat.version, 409,
        "a 4.9.8 broker, so SQL92 pulls are allowed"
    );
    let group_field = [("consumerGroup", "legacy-consumers")];
    let members = client
        .json(request::GET_CONSUMER_LIST_BY_GROUP, &group_field)
        .await?;
    assert_eq!(
        members["consumerIdList"],
        serde_json::json!(["10.0.0.1@legacy"])
    );

    info!("--- offsets: 0 for a queue holding its first message, then what was committed");
    let mut offset_fields = group_field.to_vec();
    offset_fields.extend(queue);
    assert_eq!(
        client
            .offset(request::QUERY_CONSUMER_OFFSET, &offset_fields)
            .await?,
        0
    );
    let mut commit = offset_fields.clone();
    commit.push(("commitOffset", "2"));
    client
        .ok(request::UPDATE_CONSUMER_OFFSET, &commit, Bytes::new())
        .await?;
    assert_eq!(
        client
            .offset(request::QUERY_CONSUMER_OFFSET, &offset_fields)
            .await?,
        2
    );

    info!("--- the follower serves pulls from its own data, filtered by the registered tag");
    // Held until the follower has applied the last send, if it has not yet.
    let last = pull(
        &mut client,
        &[
            ("queueOffset", "2"),
            ("sysFlag", "2"),
            ("suspendTimeoutMillis", "15000"),
        ],
    )
    .await?;
    assert_eq!(last.code, response::SUCCESS, "{last:?}");
    let pulled = pull(&mut client, &[("queueOffset", "0"), ("sysFlag", "0")]).await?;
    assert_eq!(pulled.code, response::SUCCESS, "{pulled:?}");
    let offsets = |reply: &RemotingCommand| -> anyhow::Result<[i64; 3]> {
        let fields = &reply.ext_fields;
        Ok([
            fields.required_i64("nextBeginOffset")?,
            fields.required_i64("minOffset")?,
            fields.required_i64("maxOffset")?,
        ])
    };
    assert_eq!(offsets(&pulled)?, [3, 0, 3]);
    let records = decode_records(&pulled.body)?;
    let bodies: Vec<&[u8]> = records.iter().map(|r| &r.body[..]).collect();
    assert_eq!(bodies, [b"m0", b"m1", b"m2"]);
    let ids: Vec<String> = records.iter().map(StoredRecord::offset_msg_id).collect();
    assert_eq!(
        ids, msg_ids,
        "the ids a client computes are those the sends answered"
    );
    assert!(records.iter().all(|r| r.topic == TOPIC && r.queue_id == 1));
    assert!(records[1].properties.contains("UNIQ_KEY\u{1}ID1"));

    let own_tag = [
        ("queueOffset", "0"),
        ("sysFlag", "4"),
        ("subscription", "B"),
    ];
    let none = pull(&mut client, &own_tag).await?;
    assert_eq!(none.code, response::PULL_RETRY_IMMEDIATELY, "{none:?}");
    assert_eq!(offsets(&none)?, [3, 0, 3], "past what the filter skipped");
    let sql = [
        ("queueOffset", "0"),
        ("sysFlag", "4"),
        ("expressionType", "SQL92"),
        ("subscription", "UNIQ_KEY = 'ID1'"),
    ];
    let selected = decode_records(&pull(&mut client, &sql).await?.body)?;
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0].queue_offset, 1);
    let held = tokio::time::Instant::now();
    let caught_up = pull(
        &mut client,
        &[
            ("queueOffset", "3"),
            ("sysFlag", "2"),
            ("suspendTimeoutMillis", "300"),
        ],
    )
    .await?;
    assert_eq!(caught_up.code, response::PULL_NOT_FOUND, "{caught_up:?}");
    assert!(
        held.elapsed() >= Duration::from_millis(300),
        "held for its suspend time"
    );
    let leader_addr = group.addr(leader).to_string();
    let mut leader_client = RemotingClient::connect(&leader_addr).await?;
    let moved = pull(
        &mut leader_client,
        &[("queueOffset", "9"), ("sysFlag", "0")],
    )
    .await?;
    assert_eq!(moved.code, response::PULL_OFFSET_MOVED, "{moved:?}");
    assert_eq!(offsets(&moved)?, [3, 0, 3], "moved back to the queue's end");
    let unknown = pull(
        &mut client,
        &[
            ("queueOffset", "0"),
            ("sysFlag", "0"),
            ("consumerGroup", "never-heartbeat"),
        ],
    )
    .await?;
    assert_eq!(
        unknown.code,
        response::SUBSCRIPTION_NOT_EXIST,
        "{unknown:?}"
    );
    let empty_tag = [
        ("queueOffset", "0"),
        ("sysFlag", "4"),
        ("subscription", "A ||"),
    ];
    let unparsed = pull(&mut client, &empty_tag).await?;
    assert_eq!(
        unparsed.code,
        response::SUBSCRIPTION_PARSE_FAILED,
        "{unparsed:?}"
    );
    let class_filter = pull(&mut client, &[("queueOffset", "0"), ("sysFlag", "8")]).await?;
    assert_eq!(
        class_filter.code,
        response::SYSTEM_ERROR,
        "{class_filter:?}"
    );
    assert!(
        class_filter
            .remark
            .as_deref()
            .is_some_and(|remark| remark.contains("CLASS_FILTER")),
        "{class_filter:?}"
    );

    client
        .ok(
            request::UNREGISTER_CLIENT,
            &[
                ("clientID", "10.0.0.1@legacy"),
                ("consumerGroup", "legacy-consumers"),
            ],
            Bytes::new(),
        )
        .await?;
    let gone = client
        .call(
            request::GET_CONSUMER_LIST_BY_GROUP,
            &group_field,
            SerializeType::Json,
        )
        .await?;
    assert_eq!(gone.code, response::SYSTEM_ERROR, "{gone:?}");

    info!("--- a bad field is named");
    let bad = client
        .call(
            request::GET_MAX_OFFSET,
            &[("topic", TOPIC), ("queueId", "one")],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(bad.code, response::SYSTEM_ERROR);
    assert!(
        bad.remark
            .as_deref()
            .is_some_and(|remark| remark.contains("queueId")),
        "{bad:?}"
    );
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_pipelined_sends_on_one_connection_each_should_get_its_own_answer()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x4E4D_0005).await?;
    let group = cluster.group(GROUPS[0]);
    let leader = group.addr(group.wait_for_leader(TIMEOUT).await?);
    let mut client = RemotingClient::connect(&leader.to_string()).await?;
    client.create_topic(TOPIC, 4).await?;
    let producer = RemotingProducer::connect(leader, "pipelined").await?;

    info!("--- 400 sends, 100 in flight at a time, on one connection");
    let sends = (0..400).map(|i| {
        let producer = producer.clone();
        async move {
            let properties = format!("UNIQ_KEY\u{1}P{i}\u{2}");
            producer
                .send(TOPIC, i % 4, &properties, Bytes::from(format!("p{i}")))
                .await
        }
    });
    let answered: Vec<_> = futures::stream::iter(sends)
        .buffer_unordered(100)
        .collect()
        .await;
    assert!(answered.iter().all(Result::is_ok), "{answered:?}");
    for queue_id in 0..4 {
        let stored = cluster.queue(GROUPS[0], TOPIC, queue_id).await?;
        assert_eq!(stored.len(), 100, "queue {queue_id}");
    }

    info!("--- a refused send is that send's answer alone");
    let refused = producer
        .send("bad topic!", 0, "", Bytes::from_static(b"x"))
        .await
        .expect_err("an illegal topic");
    assert!(
        matches!(refused, RemotingSendError::Refused { code, .. } if code == response::MESSAGE_ILLEGAL),
        "{refused}"
    );
    producer
        .send(TOPIC, 0, "", Bytes::from_static(b"after"))
        .await?;
    cluster.shutdown().await;
    Ok(())
}

/// The reply to a pull of queue 1 of [`TOPIC`] by `legacy-consumers`; `fields` add to the
/// header or replace its fields.
async fn pull(
    client: &mut RemotingClient,
    fields: &[(&str, &str)],
) -> anyhow::Result<RemotingCommand> {
    let mut header = vec![
        ("consumerGroup", "legacy-consumers"),
        ("topic", TOPIC),
        ("queueId", "1"),
        ("maxMsgNums", "32"),
        ("subVersion", "0"),
    ];
    for (name, value) in fields {
        header.retain(|(known, _)| known != name);
        header.push((name, value));
    }
    client
        .call(request::PULL_MESSAGE, &header, SerializeType::Json)
        .await
}
