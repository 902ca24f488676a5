//! `mqadmin drill`: starts a local cluster of real processes, runs a producer and a push
//! consumer through scheduled faults, and reports what was acknowledged, consumed, lost and
//! duplicated. It fails (non-zero exit) if anything acknowledged was lost.

use std::path::PathBuf;

use rocketraft_cli::access::AccessArgs;
use rocketraft_cli::drill::cluster::ClusterSpec;
use rocketraft_cli::drill::cluster::LocalCluster;
use rocketraft_cli::drill::runner::DrillConfig;
use rocketraft_cli::drill::runner::FaultKind;
use rocketraft_cli::drill::runner::run_drill;

#[derive(clap::Args)]
pub struct DrillArgs {
    #[arg(long, default_value_t = 60)]
    duration_secs: u64,
    #[arg(long, default_value_t = 20)]
    fault_every_secs: u64,
    /// Faults, in turn: kill-leader, kill-follower, pause-leader, partition-leader,
    /// blackhole-leader (it answers nothing, to peers or clients: calls hang), restart-all, crash-all-unsynced (kill every node, zero each one's CommitLog past its
    /// last checkpoint's flush as a power cut would, restart them), corrupt-follower (kill a follower, flip a byte in its Raft log and its
    /// CommitLog, restart it: it must repair itself from the group), replace-follower (kill a
    /// follower for good; a fresh node at a new address takes its place in one membership
    /// change), replace-leader (a fresh node joins, then the leader leaves).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill-leader,kill-follower,pause-leader,partition-leader,blackhole-leader,restart-all,crash-all-unsynced,corrupt-follower,replace-follower,replace-leader"
    )]
    faults: Vec<FaultKind>,
    /// Restart a killed node, or resume a paused one, this long after the fault (default:
    /// half the fault interval, at most 5 s).
    #[arg(long)]
    heal_after_ms: Option<u64>,
    /// Sends per second.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Broker groups of three nodes.
    #[arg(long, default_value_t = 1)]
    groups: usize,
    /// Every Nth message is delayed (level 1); 0: none.
    #[arg(long, default_value_t = 10)]
    delay_every: u32,
    /// The consumer refuses every Nth message once (it comes back as a retry); 0: none.
    #[arg(long, default_value_t = 25)]
    refuse_every: u32,
    #[arg(long, default_value_t = 60)]
    drain_timeout_secs: u64,
    #[arg(long, default_value = "1s 2s 3s")]
    delay_levels: String,
    /// Raft heartbeat interval of the nodes (default: the broker's).
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    /// Raft election timeout, lower bound (default: the broker's).
    #[arg(long)]
    election_timeout_min_ms: Option<u64>,
    /// Raft election timeout, upper bound and leader lease (default: the broker's).
    #[arg(long)]
    election_timeout_max_ms: Option<u64>,
    /// Tiny CommitLog segments deleted as soon as it is safe, and a snapshot every 2 s, so
    /// retention and snapshot catch-up run under the faults (raise --rate to roll segments
    /// faster).
    #[arg(long)]
    retention_churn: bool,
    /// The `broker` binary (default: next to mqadmin).
    #[arg(long)]
    broker_bin: Option<PathBuf>,
    /// The `nameserver` binary (default: next to mqadmin).
    #[arg(long)]
    nameserver_bin: Option<PathBuf>,
    /// Where the nodes keep data and logs (default: a new temp dir, removed after a
    /// passing run).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs the drill; `access` is mqadmin's `--admin-token` (the drill's nodes then require it)
/// and `--tls-ca` (refused: the drill's own cluster does not serve TLS).
pub async fn run(args: DrillArgs, access: &AccessArgs, json: bool) -> anyhow::Result<()> {
    anyhow::ensure!(
        access.tls_ca.is_none(),
        "--tls-ca does not apply to mqadmin drill: it starts its own cluster, without TLS"
    );
    anyhow::ensure!(args.duration_secs > 0, "--duration-secs must be positive");
    anyhow::ensure!(
        args.fault_every_secs > 0,
        "--fault-every-secs must be positive"
    );
    anyhow::ensure!((1..=8).contains(&args.groups), "--groups must be 1 to 8");
    anyhow::ensure!(args.rate > 0, "--rate must be positive");
    let (broker_bin, nameserver_bin) = ClusterSpec::binaries_next_to_me();
    let temporary = args.work_dir.is_none();
    let work_dir = args.work_dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("rocketraft-drill-{}", std::process::id()))
    });
    let spec = ClusterSpec {
        broker_bin: args.broker_bin.unwrap_or(broker_bin),
        nameserver_bin: args.nameserver_bin.unwrap_or(nameserver_bin),
        work_dir: work_dir.clone(),
        groups: args.groups,
        delay_levels: args.delay_levels,
        heartbeat_interval_ms: args.heartbeat_ms,
        election_timeout_min_ms: args.election_timeout_min_ms,
        election_timeout_max_ms: args.election_timeout_max_ms,
        retention_churn: args.retention_churn,
        admin_token: access.admin_token.clone(),
    };
    let fault_every = std::time::Duration::from_secs(args.fault_every_secs);
    let heal_after = args.heal_after_ms.map_or_else(
        || (fault_every / 2).min(std::time::Duration::from_secs(5)),
        std::time::Duration::from_millis,
    );
    anyhow::ensure!(
        heal_after < fault_every,
        "--heal-after-ms must be shorter than the fault interval"
    );
    let config = DrillConfig {
        duration: std::time::Duration::from_secs(args.duration_secs),
        fault_every,
        faults: args.faults,
        heal_after,
        rate: args.rate,
        delay_every: args.delay_every,
        refuse_every: args.refuse_every,
        drain_timeout: std::time::Duration::from_secs(args.drain_timeout_secs),
        progress: !args.quiet && !json,
    };
    let mut cluster = LocalCluster::start(&spec)?;
    let report = tokio::select! {
        report = run_drill(&mut cluster, &config) => report?,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the drill's processes were stopped"),
    };
    drop(cluster);
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    if report.passed && temporary {
        let _ = std::fs::remove_dir_all(&work_dir);
    } else if !report.passed {
        eprintln!("node logs and data kept in {}", work_dir.display());
    }
    anyhow::ensure!(report.passed, "the drill failed: see the report");
    Ok(())
}
