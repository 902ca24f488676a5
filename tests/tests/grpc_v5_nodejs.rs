//! RocketMQ's official Node.js client (`rocketmq-client-nodejs`, installed under
//! `tests/nodejs` by `npm ci --prefix tests/nodejs`) against the 5.x endpoint of real nodes
//! whose endpoints require an access key: its producer's NORMAL, FIFO, DELAY and TRANSACTION
//! sends signed with the key, unsigned and wrongly signed clients refused, its simple
//! consumer receiving by tag with a nack bringing a message back as attempt 2, and its push
//! consumer learning that its group is FIFO and getting the message group in order.
//! `tests/nodejs/compat.mjs` drives the client and reports what it saw; this test judges it.
//!
//! Without Node.js or the installed client the test says so and passes, so the suite runs on
//! a machine with nothing but the Rust toolchain; `.ci/run` installs the client and sets
//! `RR_NODEJS_TESTS=required`, under which a missing client fails the test.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::GroupSettings;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use serde_json::Value;
use serde_json::json;
use tracing::info;

/// Set to `required` where a missing Node.js client must fail the test (CI).
const REQUIRED_ENV: &str = "RR_NODEJS_TESTS";
/// The script's own steps give up after 30 s each; this bounds the whole run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);
const TOPIC: &str = "NodeOrders";
const ACCESS_KEY: &str = "node-app";
const SECRET: &str = "n0de-s3cret";

fn client_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("nodejs")
}

/// Why the Node.js client cannot run here, if it cannot.
fn missing_client() -> Option<String> {
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|output| output.status.success()) {
        return Some("no `node` on PATH".into());
    }
    let installed = client_dir().join("node_modules/rocketmq-client-nodejs");
    (!installed.is_dir()).then(|| {
        format!(
            "{} is missing: run `npm ci --prefix tests/nodejs`",
            installed.display()
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_the_official_nodejs_client_its_sends_receives_and_fifo_push_consumer_should_work()
-> anyhow::Result<()> {
    init_tracing();
    if let Some(missing) = missing_client() {
        anyhow::ensure!(
            std::env::var(REQUIRED_ENV).as_deref() != Ok("required"),
            "the Node.js client is required ({REQUIRED_ENV}) but {missing}"
        );
        eprintln!("skipped: {missing}");
        return Ok(());
    }
    let cluster = TestCluster::start_with(0x5005_00E5, |config| {
        config.grpc_v5_listen = Some("127.0.0.1:0".parse().expect("an address"));
        config.grpc_v5_access_keys = BTreeMap::from([(ACCESS_KEY.into(), SECRET.into())]);
    })
    .await?;
    // One queue per broker group: the client's simple consumer reads only queue 0 of each
    // (its SubscriptionLoadBalancer compares the queue id where it means the broker id).
    cluster.create_topic(TOPIC, 1).await?;
    cluster.wait_for_route(TOPIC).await?;
    let orderly = GroupSettings {
        consume_orderly: true,
        ..GroupSettings::default()
    };
    Admin::new(cluster.nameservers())
        .update_group("node-fifo", orderly, None)
        .await?;
    let group = cluster.group(GROUPS[1]);
    let leader = group.wait_for_leader(Duration::from_secs(20)).await?;
    let endpoint = group
        .node(group.a_follower(leader))
        .grpc_v5_addr()
        .context("a 5.x endpoint")?;

    info!(%endpoint, "--- the Node.js client's script");
    let script = tokio::process::Command::new("node")
        .arg("compat.mjs")
        .current_dir(client_dir())
        .env("ENDPOINT", endpoint.to_string())
        .env("TOPIC", TOPIC)
        .env("ACCESS_KEY", ACCESS_KEY)
        .env("SECRET", SECRET)
        .env("SIMPLE_GROUP", "node-simple")
        .env("FIFO_GROUP", "node-fifo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, script)
        .await
        .context("the Node.js script timed out")??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "the Node.js script failed ({}): {stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("the script's report: {stdout}"))?;
    info!(%seen, "what the Node.js client saw");
    cluster.shutdown().await;

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
    assert_eq!(plain["keys"], json!(["node-key"]));
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
