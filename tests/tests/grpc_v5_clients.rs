//! RocketMQ's official Node.js and Python clients against the 5.x endpoint of real nodes
//! whose endpoints require an access key. Each client's script (`tests/nodejs/compat.mjs`,
//! `tests/python/compat.py`) drives the same steps and prints a JSON report this test judges:
//! the producer's NORMAL, FIFO, DELAY and TRANSACTION sends signed with the key; unsigned and
//! wrongly signed clients refused; the simple consumer receiving by tag, a nack bringing a
//! message back as attempt 2, a DELAY message not before its time, a rolled-back one never;
//! the push consumer of an orderly group learning it is FIFO and getting the message group
//! once, in order; and the Node.js push consumer's nack (a `ChangeInvisibleDuration` of 0)
//! bringing a failed message back as attempt 2.
//!
//! The clients are installed by `.ci/run` (`npm ci --prefix tests/nodejs`; a virtualenv at
//! `tests/python/.venv` from `tests/python/requirements.txt`). Without them a test says why
//! and passes, so the suite runs on a machine with nothing but the Rust toolchain; CI sets
//! `RR_CLIENT_TESTS=required`, under which a missing client fails its test.

use rocketraft_server::config::GrpcV5Config;
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::GroupSettings;
use rocketraft_tests::Extras;
use rocketraft_tests::client_scripts::ClientScript;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use serde_json::Value;
use serde_json::json;
use tracing::info;

/// The scripts' own steps give up after 30 s each; this bounds a whole run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);
const TOPIC: &str = "ClientOrders";
const ACCESS_KEY: &str = "client-app";
const SECRET: &str = "cl1ent-s3cret";

const NODEJS: ClientScript = ClientScript {
    dir: "nodejs",
    interpreter: "node",
    script: "compat.mjs",
    installed: "node_modules/rocketmq-client-nodejs",
    install: "npm ci --prefix tests/nodejs",
};

const PYTHON: ClientScript = ClientScript {
    dir: "python",
    interpreter: ".venv/bin/python",
    script: "compat.py",
    installed: ".venv/bin/python",
    install: "python3 -m venv tests/python/.venv && tests/python/.venv/bin/pip install -r tests/python/requirements.txt",
};

/// Runs `client`'s script against a fresh cluster and returns its report; `None` if the
/// client is not installed and not required.
async fn run(client: &ClientScript, seed: u64) -> anyhow::Result<Option<Value>> {
    init_tracing();
    if !client.ready()? {
        return Ok(None);
    }
    let grpc_v5 = GrpcV5Config {
        listen: Some("127.0.0.1:0".parse()?),
        access_keys: BTreeMap::from([(ACCESS_KEY.into(), SECRET.into())]),
        ..GrpcV5Config::default()
    };
    let cluster = TestCluster::start_with_extras(
        seed,
        |_| {},
        Extras {
            grpc_v5,
            ..Extras::default()
        },
    )
    .await?;
    // Two queues per broker group: the Node.js client's simple consumer names only queue 0 of
    // each (its SubscriptionLoadBalancer compares the queue id where it means the broker id),
    // and receives from both as the endpoint pops any queue of the group.
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let orderly = GroupSettings {
        consume_orderly: true,
        ..GroupSettings::default()
    };
    Admin::new(cluster.nameservers())
        .update_group("client-fifo", orderly, None)
        .await?;
    let group = cluster.group(GROUPS[1]);
    let leader = group.wait_for_leader(Duration::from_secs(20)).await?;
    let endpoint = group
        .grpc_v5_addr(group.a_follower(leader))
        .context("a 5.x endpoint")?;

    info!(%endpoint, client = client.dir, "--- the client's script");
    let envs = [
        ("ENDPOINT", endpoint.to_string()),
        ("TOPIC", TOPIC.to_owned()),
        ("ACCESS_KEY", ACCESS_KEY.to_owned()),
        ("SECRET", SECRET.to_owned()),
        ("SIMPLE_GROUP", "client-simple".to_owned()),
        ("FIFO_GROUP", "client-fifo".to_owned()),
        ("NACK_GROUP", "client-nack".to_owned()),
    ];
    let report = client.run(&[], &envs, SCRIPT_TIMEOUT).await;
    cluster.shutdown().await;
    let report = report?;
    info!(%report, "what the client saw");
    Ok(Some(report))
}

/// Judges a client's report (see the module comment).
fn judge(seen: &Value) -> anyhow::Result<()> {
    for refused in ["unsigned", "wrong_secret"] {
        let reason = seen[refused].as_str().unwrap_or_default();
        assert!(
            reason.contains("40100") || reason.contains("UNAUTHORIZED"),
            "{refused}: {reason}"
        );
    }
    let received = seen["received"].as_array().context("received")?;
    let deliveries: Vec<(&str, u64)> = received
        .iter()
        .map(|message| {
            (
                message["body"].as_str().unwrap_or_default(),
                message["attempt"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    for expected in [("plain", 1), ("plain", 2), ("committed", 1), ("later", 1)] {
        assert!(
            deliveries.contains(&expected),
            "{expected:?} in {deliveries:?}"
        );
    }
    assert_eq!(
        deliveries.len(),
        4,
        "nothing else (the rolled-back message): {deliveries:?}"
    );
    let plain = received
        .iter()
        .find(|message| message["body"] == "plain")
        .context("plain")?;
    assert_eq!(plain["tag"], "Plain");
    assert_eq!(plain["keys"], json!(["client-key"]));
    let later = received
        .iter()
        .find(|message| message["body"] == "later")
        .context("later")?;
    assert!(
        later["early_ms"].as_i64().unwrap_or(i64::MAX) <= 0,
        "a DELAY message is not received before its delivery time: {later}"
    );
    assert_eq!(
        seen["push_fifo"], true,
        "the push consumer learns its group is FIFO"
    );
    let steps: Vec<String> = (0..5).map(|step| format!("step {step}")).collect();
    assert_eq!(
        seen["fifo_received"],
        json!(steps),
        "the message group, in order, once"
    );
    Ok(())
}

/// Runs `client`'s script and judges its report (nothing to judge if it was skipped).
async fn run_and_judge(client: &ClientScript, seed: u64) -> anyhow::Result<()> {
    match run(client, seed).await? {
        Some(report) => judge(&report),
        None => Ok(()),
    }
}

/// The Node.js push consumer's nack: a ChangeInvisibleDuration of 0, which must bring the
/// message back as attempt 2.
fn judge_nodejs_nack(seen: &Value) -> anyhow::Result<()> {
    anyhow::ensure!(
        seen["nack_attempts"] == json!([1, 2]),
        "failed once, it must come back as attempt 2 and be consumed: {}",
        seen["nack_attempts"]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_the_official_nodejs_client_its_sends_receives_and_fifo_push_consumer_should_work()
-> anyhow::Result<()> {
    match run(&NODEJS, 0x5005_00E5).await? {
        Some(report) => {
            judge(&report)?;
            judge_nodejs_nack(&report)
        }
        None => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_the_official_python_client_its_sends_receives_and_fifo_push_consumer_should_work()
-> anyhow::Result<()> {
    run_and_judge(&PYTHON, 0x5005_00E7).await
}
