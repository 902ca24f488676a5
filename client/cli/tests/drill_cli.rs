//! `mqadmin drill` on real processes, as CI runs it: one 3-node group, a producer and a push
//! consumer, and every 4 s a fault: the leader SIGKILLed four times in a row, a follower
//! killed with a byte flipped in its Raft log and CommitLog (it must repair itself), a
//! follower killed and restarted, the leader paused (SIGSTOP) and resumed, the leader
//! partitioned from its followers and healed, all three nodes restarted at once, a follower
//! killed for good and replaced by a fresh node at a new address, a fresh node added and the
//! leader removed (membership changes under load). The report
//! must show nothing acknowledged lost, no acknowledged position
//! overwritten, committed offsets never going back and the schedule service on one node per
//! term; delayed and retried messages must all arrive.
//!
//! The `broker` and `nameserver` binaries must sit next to `mqadmin` (a workspace test build
//! puts them there). The drill kills its processes when it ends.

use std::process::Command;

#[test]
fn given_scheduled_faults_the_drill_should_lose_nothing_acknowledged() -> anyhow::Result<()> {
    let output = Command::new(env!("CARGO_BIN_EXE_mqadmin"))
        .args([
            "drill",
            "--json",
            "--duration-secs",
            "52",
            "--fault-every-secs",
            "4",
            "--heal-after-ms",
            "1500",
            "--faults",
            "kill-leader,kill-leader,kill-leader,blackhole-leader,corrupt-follower,kill-follower,pause-leader,partition-leader,restart-all,crash-all-unsynced,replace-follower,replace-leader",
            "--rate",
            "100",
            "--heartbeat-ms",
            "50",
            "--election-timeout-min-ms",
            "400",
            "--election-timeout-max-ms",
            "800",
            "--drain-timeout-secs",
            "60",
            // The drill's nodes then guard admin calls (fault injection among them).
            "--admin-token",
            "drill-admin-token",
        ])
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "drill failed: {stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(stdout.trim())?;
    let number = |key: &str| {
        report[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no number {key:?} in the report: {report}"))
    };
    assert_eq!(report["passed"], true, "{report}");
    assert_eq!(number("lost"), 0, "{report}");
    assert_eq!(number("order_violations"), 0, "{report}");
    assert_eq!(number("offset_regressions"), 0, "{report}");
    assert_eq!(number("schedule_service_overlaps"), 0, "{report}");
    assert!(number("acknowledged") > 1000, "{report}");
    assert_eq!(
        number("delayed_sent"),
        number("delayed_delivered"),
        "{report}"
    );
    assert_eq!(
        number("retries_refused"),
        number("retries_delivered"),
        "{report}"
    );
    let faults = report["faults"].as_array().map_or(0, Vec::len);
    assert!(
        faults >= 10,
        "a fault every 4 s, each healed before the run ends: {report}"
    );
    let faults_of = |kind: &str| -> Vec<&serde_json::Value> {
        report["faults"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|fault| fault["kind"] == kind)
            .collect()
    };
    assert!(
        faults_of("kill-leader")
            .iter()
            .all(|fault| fault["recovery_ms"].is_u64()),
        "every killed leader was replaced: {report}"
    );
    assert!(
        faults_of("kill-leader")
            .iter()
            .all(|fault| fault["consumer_resume_ms"].is_u64()),
        "the consumer read from the group again after every kill: {report}"
    );
    let kinds: Vec<&str> = report["kinds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|kind| kind["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"kill-leader"),
        "a summary per kind: {report}"
    );
    assert!(
        faults_of("corrupt-follower")
            .iter()
            .all(|fault| fault["detail"].to_string().contains("(done)")),
        "the damaged follower repaired itself: {report}"
    );
    let crashed = faults_of("crash-all-unsynced");
    assert!(!crashed.is_empty(), "crash-all-unsynced ran: {report}");
    assert!(
        crashed.iter().all(|fault| {
            let lines = fault["detail"].as_array().map_or(0, |lines| {
                lines
                    .iter()
                    .filter(|line| line.to_string().contains("CommitLog bytes past offset"))
                    .count()
            });
            lines == 3
        }),
        "every node lost its unsynced CommitLog bytes: {report}"
    );
    // A replaced node's place is taken by a fresh node: the voters named after each change
    // hold the new node and not the old one.
    for kind in ["replace-follower", "replace-leader"] {
        let replaced = faults_of(kind);
        assert!(!replaced.is_empty(), "{kind} ran: {report}");
        for fault in replaced {
            let old = fault["node"].as_u64().expect("the replaced node");
            // The last detail line is "voters [a, b, c] (caught up in ...)".
            let last_change = fault["detail"]
                .as_array()
                .and_then(|lines| lines.last())
                .and_then(|line| line.as_str())
                .unwrap_or_default();
            let voters: Vec<u64> = last_change
                .strip_prefix("voters [")
                .and_then(|rest| rest.split(']').next())
                .unwrap_or_default()
                .split(", ")
                .filter_map(|id| id.parse().ok())
                .collect();
            assert!(
                voters.len() == 3 && !voters.contains(&old),
                "{kind}: node {old} left, three voters stay: {report}"
            );
        }
    }
    Ok(())
}
