//! RocketMQ's 4.x clients against a real cluster over remoting, as an existing 4.x app runs
//! them: the Python client (PyPI `rocketmq`, which bundles the C++ client) finds the topic
//! through the nameserver and sends to each group's leader: single messages, one over its
//! compression threshold, and a batch (`tests/python4x/producer.py`). Each is stored once,
//! with its body, tags, keys and message id.
//!
//! Its push consumer (`tests/python4x/push_consumer.py`) and ali-ons's (npm, pure
//! JavaScript; `tests/nodejs/ali_ons.js`) each get only the tags they subscribed to, a
//! message they failed once back exactly once (reconsume times 1, its own topic), and a
//! delayed message not before its delay; then they lose no message they were told was sent
//! while broker-a's leader is killed (or, for ali-ons, hands its leadership over) under their
//! sends and pulls. Each test logs the failover window its client saw.
//!
//! The clients are installed by `.ci/run` (a virtualenv at `tests/python4x/.venv`, and
//! `tests/nodejs/node_modules`). Without them a test says why and passes; CI sets
//! `RR_CLIENT_TESTS=required`, under which it fails.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::subscription::Subscription;
use rocketraft_proto::broker as pb;
use rocketraft_tests::client_scripts::ClientScript;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tracing::info;

const TOPIC: &str = "LegacyOrders";
const TIMEOUT: Duration = Duration::from_secs(30);
/// Bounds the whole script: the client's own sends time out after 10 s each.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

const PYTHON_4X: ClientScript = ClientScript {
    dir: "python4x",
    interpreter: ".venv/bin/python",
    script: "producer.py",
    installed: ".venv/bin/python",
    install: "python3 -m venv tests/python4x/.venv && tests/python4x/.venv/bin/pip install -r tests/python4x/requirements.txt",
};
const PYTHON_4X_PUSH_CONSUMER: ClientScript = ClientScript {
    script: "push_consumer.py",
    ..PYTHON_4X
};

const ALI_ONS: ClientScript = ClientScript {
    dir: "nodejs",
    interpreter: "node",
    script: "ali_ons.js",
    installed: "node_modules/ali-ons",
    install: "npm ci --prefix tests/nodejs",
};
/// Messages a push consumer's script streams while a leader goes, one every 20 ms.
const STREAMED: usize = 150;
/// Streamed messages stored before the kill.
const STREAMED_BEFORE_KILL: usize = 30;
/// What the script sends before its stream: 6 tagged messages.
const SENT_BEFORE_STREAM: usize = 6;

/// Delay levels short enough for a test: level 2 (the delayed message's) is 2 s, and every
/// other level 1 s, so a message failed once (level 3) comes back after 1 s.
const SHORT_DELAY_LEVELS: &str = "1s 2s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s";
/// The delayed message's level and its delay.
const DELAYED_LEVEL: i64 = 2;
const DELAYED_BY_MS: i64 = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_4x_producer_each_send_should_be_stored_once_as_sent() -> anyhow::Result<()> {
    init_tracing();
    if !PYTHON_4X.ready()? {
        return Ok(());
    }
    let cluster = TestCluster::start(0x4C47_0001).await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let nameserver = cluster.nameservers()[0].clone();
    let report = PYTHON_4X
        .run(&[nameserver.as_str(), TOPIC], &[], SCRIPT_TIMEOUT)
        .await;
    let stored = async {
        let mut stored = 0;
        for group in GROUPS {
            for queue_id in 0..2 {
                stored += cluster.queue(group, TOPIC, queue_id).await?.len();
            }
        }
        anyhow::Ok(stored)
    }
    .await;
    let report = report?;
    let sends = report["sends"].as_array().context("sends")?;
    for send in sends {
        assert_eq!(send["status"], 0, "sent OK: {send}");
    }

    let consumed = Admin::new(cluster.nameservers())
        .consume(&ConsumeRequest {
            topic: TOPIC.into(),
            consumer_group: "legacy-audit".into(),
            subscription: Subscription::All,
            from: ConsumeFrom::First,
            count: sends.len(),
            timeout: TIMEOUT,
            reconsume_later: 0,
        })
        .await?;
    cluster.shutdown().await;
    assert_eq!(stored?, sends.len(), "each send stored once");
    let by_body: BTreeMap<&str, _> = consumed
        .iter()
        .map(|message| (message.body.as_str(), message))
        .collect();
    for send in sends {
        let body = send["body"].as_str().context("body")?;
        let message = by_body.get(body).with_context(|| {
            format!("{} bytes sent as {:?} not stored", body.len(), send["tags"])
        })?;
        assert_eq!(message.tags.as_deref(), send["tags"].as_str(), "{body:.20}");
        assert_eq!(message.keys.as_deref(), send["keys"].as_str(), "{body:.20}");
        if let Some(id) = send["msg_id"].as_str() {
            assert_eq!(
                message.msg_id, id,
                "the client's message id is the stored one"
            );
        }
    }
    Ok(())
}

/// Judges a push consumer's report (`sent`, `deliveries`, `complete`): every subscribed
/// message sent OK was delivered (those sent before any fault exactly once and under the id
/// their send was answered with), no other tag was, the message failed once came back once (reconsume times 1, its own topic), and the
/// delayed one not before its delay.
fn judge_push_consumer(report: &serde_json::Value) -> anyhow::Result<()> {
    assert_eq!(report["complete"], true, "every delivery came: {report}");
    let sent = report["sent"].as_array().context("sent")?;
    let deliveries = report["deliveries"].as_array().context("deliveries")?;
    let delivered = |body: &str| -> Vec<&serde_json::Value> {
        deliveries.iter().filter(|d| d["body"] == body).collect()
    };
    for filtered_out in ["b0", "b1"] {
        assert!(
            delivered(filtered_out).is_empty(),
            "TagB is not subscribed: {report}"
        );
    }
    for send in sent
        .iter()
        .filter(|send| sent_ok(send))
        .filter(|send| send["tags"] == "TagA")
    {
        let body = send["body"].as_str().context("body")?;
        if body == "fail-once" {
            continue;
        }
        let got = delivered(body);
        if body.starts_with("stream-") {
            // At least once: a send whose reply the killed leader never gave was stored, and
            // the client sent it again to the other group, under a new offset message id.
            assert!(!got.is_empty(), "{body} sent OK and lost: {report}");
        } else {
            assert_eq!(got.len(), 1, "{body} once: {report}");
            assert_eq!(got[0]["msg_id"], send["msg_id"], "{body}: its id as sent");
        }
        assert_eq!(
            (&got[0]["topic"], &got[0]["reconsume_times"]),
            (&TOPIC.into(), &0.into())
        );
    }

    let fails_once = delivered("fail-once");
    assert_eq!(fails_once.len(), 2, "back exactly once: {report}");
    let again = fails_once[1];
    assert_eq!(again["reconsume_times"], 1, "{report}");
    assert_eq!(
        again["topic"], TOPIC,
        "with its own topic restored: {report}"
    );
    assert_eq!(again["tags"], "TagA");

    // Its delivery may come after the leader kill, from the next leader's schedule service,
    // so it is delivered at least once; none comes before its delay.
    let delayed = delivered("delayed");
    assert!(!delayed.is_empty(), "{report}");
    let sent_delayed = sent
        .iter()
        .find(|send| send["body"] == "delayed")
        .context("the delayed send")?;
    let sending_ms = sent_delayed["sending_ms"].as_i64().context("sending_ms")?;
    let received_ms = delayed
        .iter()
        .filter_map(|delivery| delivery["received_ms"].as_i64())
        .min()
        .context("received_ms")?;
    assert!(
        received_ms - sending_ms >= DELAYED_BY_MS,
        "delivered {} ms after its send began, before its {DELAYED_BY_MS} ms delay",
        received_ms - sending_ms
    );
    // Delivered from its second store, so a client that names messages by their offset
    // ids (ali-ons) gives it a new one, as it does with RocketMQ.
    Ok(())
}

/// How broker-a's leader goes while ali-ons streams.
#[derive(Debug, Clone, Copy)]
enum LeaderChange {
    /// It stops, as a crash leaves it.
    Kill,
    /// It hands leadership to a follower (an operator's drill) and stays up.
    Transfer,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_4x_python_push_consumer_it_should_get_its_tags_retries_and_delays_and_lose_nothing_across_a_leader_kill()
-> anyhow::Result<()> {
    push_consumer_across(&PYTHON_4X_PUSH_CONSUMER, LeaderChange::Kill, 0x4C47_0002).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_ali_ons_it_should_consume_retries_and_delays_and_lose_nothing_across_a_leader_kill()
-> anyhow::Result<()> {
    push_consumer_across(&ALI_ONS, LeaderChange::Kill, 0x4C47_0003).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_ali_ons_it_should_lose_nothing_across_a_leader_transfer() -> anyhow::Result<()> {
    push_consumer_across(&ALI_ONS, LeaderChange::Transfer, 0x4C47_0005).await
}

/// Runs a push consumer's `script` (args: nameserver, topic, group, delay level, messages
/// to stream) while broker-a's leader goes by `change` under its stream; judges its report
/// and logs what the client saw (send failures, the slowest send and the slowest delivery
/// of a streamed message after its send), the failover window a 4.x app meets.
async fn push_consumer_across(
    script: &ClientScript,
    change: LeaderChange,
    seed: u64,
) -> anyhow::Result<()> {
    init_tracing();
    if !script.ready()? {
        return Ok(());
    }
    let mut cluster = TestCluster::start_with(seed, |config| {
        config.delay_levels = SHORT_DELAY_LEVELS.into();
    })
    .await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let nameserver = cluster.nameservers()[0].clone();
    let delay_level = DELAYED_LEVEL.to_string();
    let streamed = STREAMED.to_string();
    let args = [
        nameserver.as_str(),
        TOPIC,
        "legacy-push",
        &delay_level,
        &streamed,
    ];
    let run = script.run(&args, &[], SCRIPT_TIMEOUT);
    let leader_change = async {
        wait_for("the stream under way", TIMEOUT, || async {
            let mut stored = 0;
            for group in GROUPS {
                for queue_id in 0..2 {
                    stored += cluster.queue(group, TOPIC, queue_id).await.ok()?.len();
                }
            }
            (stored >= SENT_BEFORE_STREAM + STREAMED_BEFORE_KILL).then_some(())
        })
        .await?;
        let group = cluster.group_mut(GROUPS[0]);
        let leader = group.wait_for_leader(TIMEOUT).await?;
        info!(
            leader,
            ?change,
            "--- broker-a's leader goes while ali-ons sends and consumes"
        );
        match change {
            LeaderChange::Kill => group.stop(leader).await,
            LeaderChange::Transfer => {
                let to_node_id = group.a_follower(leader);
                group
                    .client(leader)
                    .await?
                    .transfer_leader(pb::TransferLeaderRequest { to_node_id })
                    .await?;
            }
        }
        anyhow::Ok(())
    };
    let (report, changed) = tokio::join!(run, leader_change);
    cluster.shutdown().await;
    let report = report?;
    changed?;
    judge_push_consumer(&report)?;
    let sent = report["sent"].as_array().context("sent")?;
    let failed: Vec<_> = sent.iter().filter(|send| !sent_ok(send)).collect();
    let slowest_send_ms = sent
        .iter()
        .filter_map(|send| Some(send["sent_ms"].as_i64()? - send["sending_ms"].as_i64()?))
        .max();
    let deliveries = report["deliveries"].as_array().context("deliveries")?;
    let slowest_delivery_ms = sent
        .iter()
        .filter(|send| sent_ok(send))
        .filter(|send| {
            send["body"]
                .as_str()
                .is_some_and(|body| body.starts_with("stream-"))
        })
        .filter_map(|send| {
            let first = deliveries
                .iter()
                .filter(|d| d["body"] == send["body"])
                .filter_map(|d| d["received_ms"].as_i64())
                .min()?;
            Some(first - send["sent_ms"].as_i64()?)
        })
        .max();
    info!(
        client = script.dir,
        ?change,
        failed = failed.len(),
        ?slowest_send_ms,
        ?slowest_delivery_ms,
        "--- what the client saw: {failed:?}"
    );
    Ok(())
}

/// Whether a report's send was acknowledged: status 0 from the Python client, `SEND_OK`
/// from ali-ons.
fn sent_ok(send: &serde_json::Value) -> bool {
    send["status"] == 0 || send["status"] == "SEND_OK"
}
