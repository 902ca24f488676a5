//! The tools get into a guarded cluster as `mqadmin` does: `rocketraft-bench` with
//! `--admin-token` and `--tls-ca` creates its topic and sends through a group that serves
//! TLS and refuses admin calls without the token, and without the token it fails saying why.

use std::process::Command;
use std::time::Duration;

use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::start_nameserver;
use rocketraft_tests::tls::TestCerts;
use rocketraft_tests::workspace_binary;

const TIMEOUT: Duration = Duration::from_secs(20);
const TOKEN: &str = "bench-admin-token";
const MESSAGES: u64 = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_token_and_tls_the_bench_should_get_in_with_both_flags() -> anyhow::Result<()> {
    init_tracing();
    let certs = TestCerts::generate("rocketraft bench CA")?;
    let nameserver = start_nameserver(NameServerConfig {
        tls: Some(certs.server_files()),
        ..NameServerConfig::default()
    })
    .await?;
    let namesrv = nameserver.addr().to_string();
    let group = TestGroup::start(1, 0x5EED_BE4C, |config| {
        config.tls = Some(certs.settings());
        config.admin_token = Some(TOKEN.into());
        config.namesrv = vec![namesrv.clone()];
    })
    .await?;
    group.wait_for_leader(TIMEOUT).await?;
    let ca = certs.settings().ca;
    let bench = workspace_binary("rocketraft-bench")?;
    let run = |token: Option<&'static str>| {
        let mut command = Command::new(&bench);
        command.args(["--namesrv", &namesrv, "--topic", "Guarded", "--json"]);
        command.args(["-n", &MESSAGES.to_string(), "-c", "1", "--inflight", "4"]);
        command
            .arg("--tls-ca")
            .arg(&ca)
            .env_remove("RR_ADMIN_TOKEN");
        if let Some(token) = token {
            command.args(["--admin-token", token]);
        }
        tokio::task::spawn_blocking(move || command.output())
    };

    let refused = run(None).await??;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "without the token: {stderr}");
    assert!(stderr.contains("admin token"), "says why: {stderr}");

    let admitted = run(Some(TOKEN)).await??;
    let stdout = String::from_utf8_lossy(&admitted.stdout);
    assert!(
        admitted.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&admitted.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(
        stdout
            .lines()
            .last()
            .ok_or_else(|| anyhow::anyhow!("no report"))?,
    )?;
    assert_eq!(report["send"]["messages"], MESSAGES);
    group.shutdown().await;
    Ok(())
}
