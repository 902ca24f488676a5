//! RocketMQ's 4.x clients against a real cluster over remoting, as an existing 4.x app runs
//! them: the Python client (PyPI `rocketmq`, which bundles the C++ client) finds the topic
//! through the nameserver and sends to each group's leader: single messages, one over its
//! compression threshold, and a batch (`tests/python4x/producer.py`). Each is stored once,
//! with its body, tags, keys and message id.
//!
//! The client is installed by `.ci/run` (a virtualenv at `tests/python4x/.venv`). Without it
//! the test says why and passes; CI sets `RR_CLIENT_TESTS=required`, under which it fails.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::subscription::Subscription;
use rocketraft_tests::client_scripts::ClientScript;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;

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
