//! What a broker node and a 4.x client say to each other beyond sends and pulls, spoken in
//! RocketMQ's remoting frames against a real cluster (no installable 4.x client has
//! transactions): a consumer group's members are told when its membership changes
//! (`NOTIFY_CONSUMER_IDS_CHANGED`), orderly members lock queues one at a time
//! (`LOCK_BATCH_MQ`, `UNLOCK_BATCH_MQ`), and a transactional producer ends its transactions
//! (`END_TRANSACTION`) and answers the broker's check-back of one it left open
//! (`CHECK_TRANSACTION_STATE`), on the connection it heartbeats.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use rocketraft_domain::clock::ManualClock;
use rocketraft_remoting::SerializeType;
use rocketraft_remoting::codes::request;
use rocketraft_remoting::codes::response;
use rocketraft_tests::Extras;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::remoting_client::RemotingClient;
use rocketraft_tests::remoting_client::decode_records;
use serde_json::json;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "Payments";
const CONSUMERS: &str = "orderly-payments";
const PRODUCERS: &str = "tx-payments";
/// Past a new leader's grace period for queue locks (half the 60 s lock expiry).
const PAST_LOCK_GRACE: Duration = Duration::from_secs(31);
/// How long a client waits for a request of the broker's before it acts again.
const PUSHED_WAIT: Duration = Duration::from_millis(300);

/// `client_id`'s heartbeat as a member of [`CONSUMERS`] reading [`TOPIC`].
async fn consumer_heartbeat(client: &mut RemotingClient, client_id: &str) -> anyhow::Result<()> {
    let heartbeat = json!({
        "clientID": client_id,
        "consumerDataSet": [{
            "groupName": CONSUMERS,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "expressionType": "TAG"}],
            "unitMode": false
        }],
        "producerDataSet": []
    });
    let body = Bytes::from(serde_json::to_vec(&heartbeat)?);
    client.ok(request::HEART_BEAT, &[], body).await?;
    Ok(())
}

/// The queues of [`TOPIC`] in broker group `broker-a` a lock or unlock names.
fn lock_body(client_id: &str, queue_ids: &[i32]) -> anyhow::Result<Bytes> {
    let queues: Vec<_> = queue_ids
        .iter()
        .map(|queue_id| json!({"brokerName": GROUPS[0], "queueId": queue_id, "topic": TOPIC}))
        .collect();
    let body = json!({"clientId": client_id, "consumerGroup": CONSUMERS, "mqSet": queues});
    Ok(Bytes::from(serde_json::to_vec(&body)?))
}

/// The queue ids `client_id` holds after asking to lock `queue_ids`.
async fn lock(
    client: &mut RemotingClient,
    client_id: &str,
    queue_ids: &[i32],
) -> anyhow::Result<Vec<i64>> {
    let reply = client
        .ok(
            request::LOCK_BATCH_MQ,
            &[],
            lock_body(client_id, queue_ids)?,
        )
        .await?;
    let locked: serde_json::Value = serde_json::from_slice(&reply.body)?;
    let mut ids: Vec<i64> = locked["lockOKMQSet"]
        .as_array()
        .context("lockOKMQSet")?
        .iter()
        .filter_map(|queue| queue["queueId"].as_i64())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Sends a half message of [`PRODUCERS`] with unique id `id`; returns the CommitLog offset
/// its offset message id names, as a 4.x producer decodes it for `END_TRANSACTION`.
async fn send_half(client: &mut RemotingClient, id: &str) -> anyhow::Result<String> {
    let properties = format!("TRAN_MSG\u{1}true\u{2}PGROUP\u{1}{PRODUCERS}\u{2}UNIQ_KEY\u{1}{id}");
    // sysFlag 4: a transaction's prepared (half) message.
    let body = Bytes::from(format!("pay {id}"));
    let msg_id = client
        .send_v2(PRODUCERS, TOPIC, 0, 4, &properties, body)
        .await?;
    let offset = i64::from_str_radix(&msg_id[16..], 16)?;
    Ok(offset.to_string())
}

/// `END_TRANSACTION` of half message `id` at `commit_log_offset` with `state` (8 commit,
/// 12 rollback).
async fn end(
    client: &mut RemotingClient,
    id: &str,
    commit_log_offset: &str,
    state: &str,
    from_check: bool,
) -> anyhow::Result<()> {
    client
        .ok(
            request::END_TRANSACTION,
            &[
                ("producerGroup", PRODUCERS),
                ("tranStateTableOffset", "0"),
                ("commitLogOffset", commit_log_offset),
                ("msgId", id),
                ("commitOrRollback", state),
                (
                    "fromTransactionCheck",
                    if from_check { "true" } else { "false" },
                ),
            ],
            Bytes::new(),
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_4x_clients_the_broker_should_notify_lock_and_check_back_transactions()
-> anyhow::Result<()> {
    init_tracing();
    let clock = ManualClock::starting_now();
    let extras = Extras::on_clock(&clock);
    let cluster = TestCluster::start_with_extras(0x4E4D_0003, |_| {}, extras).await?;
    let group = cluster.group(GROUPS[0]);
    let leader = group
        .addr(group.wait_for_leader(TIMEOUT).await?)
        .to_string();
    let mut a = RemotingClient::connect(&leader).await?;
    a.create_topic(TOPIC, 2).await?;

    info!("--- a member is told when another joins its group");
    consumer_heartbeat(&mut a, "A").await?;
    let mut b = RemotingClient::connect(&leader).await?;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let notice = loop {
        // A's watch opens just after its heartbeat: B joins until a change reaches it.
        consumer_heartbeat(&mut b, "B").await?;
        if let Some(notice) = a
            .pushed(request::NOTIFY_CONSUMER_IDS_CHANGED, PUSHED_WAIT)
            .await?
        {
            break notice;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no notice in time");
        b.ok(
            request::UNREGISTER_CLIENT,
            &[("clientID", "B"), ("consumerGroup", CONSUMERS)],
            Bytes::new(),
        )
        .await?;
    };
    assert_eq!(notice.ext_fields.get("consumerGroup"), Some(CONSUMERS));
    assert!(notice.is_oneway(), "{notice:?}");

    info!("--- orderly members lock a queue one at a time");
    clock.advance(PAST_LOCK_GRACE);
    assert_eq!(lock(&mut a, "A", &[0, 1]).await?, [0, 1]);
    assert!(lock(&mut b, "B", &[1]).await?.is_empty(), "A holds queue 1");
    a.ok(request::UNLOCK_BATCH_MQ, &[], lock_body("A", &[1])?)
        .await?;
    assert_eq!(lock(&mut b, "B", &[1]).await?, [1]);
    assert_eq!(
        lock(&mut a, "A", &[0, 1]).await?,
        [0],
        "B holds queue 1 now"
    );

    info!("--- a producer commits one transaction and leaves one open");
    let mut producer = RemotingClient::connect(&leader).await?;
    let heartbeat = json!({"clientID": "P", "producerDataSet": [{"groupName": PRODUCERS}]});
    producer
        .ok(
            request::HEART_BEAT,
            &[],
            Bytes::from(serde_json::to_vec(&heartbeat)?),
        )
        .await?;
    let committed = send_half(&mut producer, "TX1").await?;
    end(&mut producer, "TX1", &committed, "8", false).await?;
    let left_open = send_half(&mut producer, "TX2").await?;

    info!("--- the broker checks the open one back on the producer's connection");
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let check = loop {
        clock.advance(Duration::from_secs(1));
        if let Some(check) = producer
            .pushed(request::CHECK_TRANSACTION_STATE, PUSHED_WAIT)
            .await?
        {
            break check;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no check-back in time"
        );
    };
    let fields = &check.ext_fields;
    assert_eq!(fields.get("msgId"), Some("TX2"));
    assert_eq!(fields.get("transactionId"), Some("TX2"));
    // A copy of the half message: the one sent, or one a check-back stored.
    let checked_offset = fields.required_str("commitLogOffset")?.to_owned();
    assert!(checked_offset.parse::<i64>()? >= left_open.parse::<i64>()?);
    let half = decode_records(&check.body)?;
    assert_eq!(half.len(), 1);
    assert_eq!(half[0].topic, TOPIC, "under its real topic");
    assert_eq!(half[0].property("PGROUP"), Some(PRODUCERS));
    assert_eq!(half[0].body, b"pay TX2");
    end(&mut producer, "TX2", &checked_offset, "12", true).await?;

    info!("--- both ended; only the committed one is consumed");
    let ended = cluster.transactions_ended().await?;
    assert_eq!(ended, 2, "one operation record per transaction");
    let pulled = a
        .call(
            request::PULL_MESSAGE,
            &[
                ("consumerGroup", CONSUMERS),
                ("topic", TOPIC),
                ("queueId", "0"),
                ("queueOffset", "0"),
                ("maxMsgNums", "32"),
                ("sysFlag", "6"),
                ("subscription", "*"),
                ("subVersion", "0"),
                ("suspendTimeoutMillis", "10000"),
            ],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(pulled.code, response::SUCCESS, "{pulled:?}");
    let bodies: Vec<Vec<u8>> = decode_records(&pulled.body)?
        .into_iter()
        .map(|record| record.body)
        .collect();
    assert_eq!(bodies, [b"pay TX1".to_vec()]);
    cluster.shutdown().await;
    Ok(())
}
