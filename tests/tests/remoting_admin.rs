//! What 4.x admin tools (mqadmin, rocketmq-dashboard, rocketmq-exporter) read from a broker
//! node, spoken in RocketMQ's remoting frames against a real cluster, and the broker API calls
//! behind it: topic configs, a topic's queue stats, a group's consume stats (object-keyed
//! maps, as fastjson writes them), the groups consuming a topic, a group's consumer and
//! producer connections, messages found by offset message id and by key, and each node's
//! runtime info. Each asked of the leader, and of a follower, which answers alike.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use rocketraft_broker::service::CONSUME_STATS_TOPICS_MAX;
use rocketraft_proto::broker as pb;
use rocketraft_remoting::SerializeType;
use rocketraft_remoting::codes::request;
use rocketraft_remoting::codes::response;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::remoting_client::RemotingClient;
use rocketraft_tests::remoting_client::decode_records;
use rocketraft_tests::remoting_client::object_keyed_entries;
use serde_json::Value;
use serde_json::json;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "Ledger";
const CONSUMERS: &str = "auditors";
const PRODUCERS: &str = "ledger-writers";

/// Sends message `i` of [`TOPIC`] to `queue_id`, with key `k-i`, message id `U-i` and tag
/// `TagA`; returns its offset message id.
async fn send(client: &mut RemotingClient, i: usize, queue_id: i32) -> anyhow::Result<String> {
    let properties = format!("KEYS\u{1}k-{i}\u{2}UNIQ_KEY\u{1}U-{i}\u{2}TAGS\u{1}TagA");
    let body = Bytes::from(format!("entry {i}"));
    client
        .send_v2(PRODUCERS, TOPIC, queue_id, 0, &properties, body)
        .await
}

/// A heartbeat of consumer `A` of [`CONSUMERS`] and of a producer of [`PRODUCERS`].
async fn heartbeat(client: &mut RemotingClient) -> anyhow::Result<()> {
    let heartbeat = json!({
        "clientID": "A",
        "consumerDataSet": [{
            "groupName": CONSUMERS,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "TagA || TagB"}],
        }],
        "producerDataSet": [{"groupName": PRODUCERS}]
    });
    let body = Bytes::from(serde_json::to_vec(&heartbeat)?);
    client.ok(request::HEART_BEAT, &[], body).await?;
    Ok(())
}

/// The object-keyed `offsetTable` of a reply to `code`, by queue id (every key must name
/// [`TOPIC`] in broker-a).
async fn offset_table(
    client: &mut RemotingClient,
    code: i32,
    fields: &[(&str, &str)],
) -> anyhow::Result<Vec<(i64, Value)>> {
    let reply = client.ok(code, fields, Bytes::new()).await?;
    let mut table = Vec::new();
    for (key, value) in object_keyed_entries(&reply.body, "offsetTable")? {
        assert_eq!(key["brokerName"], GROUPS[0], "{key}");
        assert_eq!(key["topic"], TOPIC, "{key}");
        table.push((key["queueId"].as_i64().context("queueId")?, value));
    }
    table.sort_by_key(|(queue_id, _)| *queue_id);
    Ok(table)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_4x_admin_tools_a_node_should_report_topics_progress_connections_and_messages()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x4E4D_0004).await?;
    let group = cluster.group(GROUPS[0]);
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let follower = group.a_follower(leader);
    let mut a = RemotingClient::connect(&group.addr(leader).to_string()).await?;
    let mut f = RemotingClient::connect(&group.addr(follower).to_string()).await?;
    a.create_topic(TOPIC, 2).await?;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(send(&mut a, i, 0).await?);
    }
    heartbeat(&mut a).await?;
    a.ok(
        request::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", CONSUMERS),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("commitOffset", "1"),
        ],
        Bytes::new(),
    )
    .await?;

    info!("--- every topic config, with 4.x permissions");
    for client in [&mut a, &mut f] {
        let configs = client.json(request::GET_ALL_TOPIC_CONFIG, &[]).await?;
        let ledger = &configs["topicConfigTable"][TOPIC];
        assert_eq!(ledger["readQueueNums"], 2, "{configs}");
        assert_eq!(ledger["writeQueueNums"], 2);
        assert_eq!(ledger["perm"], 6);
        assert_eq!(ledger["order"], false);
    }

    info!("--- a topic's queues, keyed by MessageQueue objects");
    let stats = offset_table(&mut f, request::GET_TOPIC_STATS_INFO, &[("topic", TOPIC)]).await?;
    assert_eq!(stats.len(), 2, "{stats:?}");
    assert_eq!(
        (
            stats[0].1["minOffset"].as_i64(),
            stats[0].1["maxOffset"].as_i64()
        ),
        (Some(0), Some(3))
    );
    assert!(stats[0].1["lastUpdateTimestamp"].as_i64() > Some(0));
    assert_eq!(stats[1].1["maxOffset"], 0);
    assert_eq!(stats[1].1["lastUpdateTimestamp"], 0, "an empty queue");

    info!("--- a group's progress: the broker's offset, the group's, the last consumed");
    for client in [&mut a, &mut f] {
        let progress = offset_table(
            client,
            request::GET_CONSUME_STATS,
            &[("consumerGroup", CONSUMERS)],
        )
        .await?;
        assert_eq!(progress.len(), 2, "{progress:?}");
        assert_eq!(progress[0].1["brokerOffset"], 3);
        assert_eq!(progress[0].1["consumerOffset"], 1);
        assert!(progress[0].1["lastTimestamp"].as_i64() > Some(0));
        assert_eq!(progress[1].1["consumerOffset"], 0, "never committed");
        assert_eq!(progress[1].1["lastTimestamp"], 0);
    }

    info!("--- who consumes the topic, and the group's members and producers");
    let by_who = f
        .json(request::QUERY_TOPIC_CONSUME_BY_WHO, &[("topic", TOPIC)])
        .await?;
    assert_eq!(by_who["groupList"], json!([CONSUMERS]));
    let consumers = f
        .json(
            request::GET_CONSUMER_CONNECTION_LIST,
            &[("consumerGroup", CONSUMERS)],
        )
        .await?;
    let member = &consumers["connectionSet"][0];
    assert_eq!(member["clientId"], "A", "{consumers}");
    assert_eq!(member["language"], "JAVA");
    assert_eq!(member["version"], 409);
    assert!(
        member["clientAddr"]
            .as_str()
            .is_some_and(|addr| addr.starts_with("127.0.0.1:"))
    );
    assert_eq!(consumers["messageModel"], "CLUSTERING");
    assert_eq!(consumers["consumeFromWhere"], "CONSUME_FROM_FIRST_OFFSET");
    let subscription = &consumers["subscriptionTable"][TOPIC];
    assert_eq!(subscription["tagsSet"], json!(["TagA", "TagB"]));
    assert_eq!(subscription["codeSet"], json!([2_598_919, 2_598_920]));
    let absent = f
        .call(
            request::GET_CONSUMER_CONNECTION_LIST,
            &[("consumerGroup", "nobody")],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(absent.code, response::CONSUMER_NOT_ONLINE, "{absent:?}");
    let producers = a
        .json(
            request::GET_PRODUCER_CONNECTION_LIST,
            &[("producerGroup", PRODUCERS)],
        )
        .await?;
    assert_eq!(
        producers["connectionSet"][0]["clientId"], "A",
        "{producers}"
    );
    let elsewhere = f
        .call(
            request::GET_PRODUCER_CONNECTION_LIST,
            &[("producerGroup", PRODUCERS)],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(
        elsewhere.code,
        response::SYSTEM_ERROR,
        "its heartbeats reached the leader's node only: {elsewhere:?}"
    );

    info!("--- a message by its offset message id, from any node of the group");
    let offset = i64::from_str_radix(&ids[1][16..], 16)?.to_string();
    for client in [&mut a, &mut f] {
        // A follower serves what it has applied: the send may reach it a moment later.
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let viewed = loop {
            let fields = [("offset", offset.as_str())];
            let reply = client
                .call(request::VIEW_MESSAGE_BY_ID, &fields, SerializeType::Json)
                .await?;
            if reply.code == response::SUCCESS {
                break reply;
            }
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "{reply:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let records = decode_records(&viewed.body)?;
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].body, b"entry 1");
        assert_eq!(records[0].offset_msg_id(), ids[1]);
    }
    let inside = (offset.parse::<i64>()? + 1).to_string();
    let missing = a
        .call(
            request::VIEW_MESSAGE_BY_ID,
            &[("offset", &inside)],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(missing.code, response::SYSTEM_ERROR, "{missing:?}");
    assert!(
        missing
            .remark
            .as_deref()
            .is_some_and(|remark| remark.contains("can not find message"))
    );

    info!("--- messages by key and by message id, within a time range");
    let query = |key: &'static str, begin: &'static str, unique: bool| {
        let mut fields = vec![
            ("topic", TOPIC),
            ("key", key),
            ("maxNum", "32"),
            ("beginTimestamp", begin),
            ("endTimestamp", "9223372036854775807"),
        ];
        if unique {
            fields.push(("_UNIQUE_KEY_QUERY", "true"));
        }
        fields
    };
    let found = a
        .ok(
            request::QUERY_MESSAGE,
            &query("k-2", "0", false),
            Bytes::new(),
        )
        .await?;
    let records = decode_records(&found.body)?;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].body, b"entry 2");
    assert_eq!(
        found.ext_fields.required_i64("indexLastUpdatePhyoffset")?,
        records[0].physical_offset
    );
    let by_id = a
        .ok(
            request::QUERY_MESSAGE,
            &query("U-0", "0", true),
            Bytes::new(),
        )
        .await?;
    assert_eq!(decode_records(&by_id.body)?[0].body, b"entry 0");
    for (key, begin) in [("k-9", "0"), ("k-2", "9000000000000")] {
        let none = a
            .call(
                request::QUERY_MESSAGE,
                &query(key, begin, false),
                SerializeType::Json,
            )
            .await?;
        assert_eq!(
            none.code,
            response::QUERY_NOT_FOUND,
            "{key} from {begin}: {none:?}"
        );
    }

    info!("--- each node's own runtime info: its role, its rates and its totals");
    for (client, role, stored) in [(&mut a, "leader", "3"), (&mut f, "follower", "0")] {
        let info = client.json(request::GET_BROKER_RUNTIME_INFO, &[]).await?;
        let table = &info["table"];
        assert_eq!(table["raftRole"], role, "{info}");
        assert_eq!(table["msgPutTotalTodayNow"], stored, "sends led");
        let put_tps = table["putTps"].as_str().context("putTps")?;
        assert_eq!(
            put_tps
                .split(' ')
                .filter_map(|tps| tps.parse::<f64>().ok())
                .count(),
            3
        );
        assert!(
            table["earliestMessageTimeStamp"]
                .as_str()
                .and_then(|t| t.parse::<i64>().ok())
                > Some(0)
        );
    }

    info!("--- the broker API refuses what is past its limits, and says why");
    let mut api = group.client(leader).await?;
    let too_many = pb::ConsumeStatsRequest {
        group: CONSUMERS.into(),
        topics: vec![TOPIC.to_owned(); CONSUME_STATS_TOPICS_MAX + 1],
    };
    let refused = api
        .consume_stats(too_many)
        .await
        .expect_err("past the limit");
    assert!(
        refused.message().contains("at most 1024 topics"),
        "{refused}"
    );
    let at_limit = pb::ConsumeStatsRequest {
        group: CONSUMERS.into(),
        topics: vec![TOPIC.to_owned(); CONSUME_STATS_TOPICS_MAX],
    };
    let stats = api.consume_stats(at_limit).await?.into_inner();
    assert_eq!(
        stats.queues.len(),
        2,
        "a topic named twice is reported once"
    );
    let empty_range = pb::QueryMessagesRequest {
        key: "k-1".into(),
        begin_timestamp_ms: 10,
        end_timestamp_ms: 10,
        ..pb::QueryMessagesRequest::default()
    };
    let refused = api
        .query_messages(empty_range)
        .await
        .expect_err("an empty range");
    assert!(refused.message().contains("is empty"), "{refused}");
    let unknown = api
        .topic_stats(pb::TopicStatsRequest {
            topic: "Nowhere".into(),
        })
        .await
        .expect_err("an unknown topic");
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown}");

    cluster.shutdown().await;
    Ok(())
}
