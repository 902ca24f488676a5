//! `mqadmin`: administer a rocketraft cluster through its nameservers.
//!
//! Every command takes `--namesrv ADDR[,ADDR]` and `--json`. A failure exits non-zero with
//! a one-line reason on stderr.

use std::process::ExitCode;

use std::path::PathBuf;

use clap::Parser;
use clap::Subcommand;
use rocketraft_cli::drill::cluster::ClusterSpec;
use rocketraft_cli::drill::cluster::LocalCluster;
use rocketraft_cli::drill::runner::DrillConfig;
use rocketraft_cli::drill::runner::FaultKind;
use rocketraft_cli::drill::runner::run_drill;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::subscription::Subscription;
use serde_json::json;

#[derive(Parser)]
#[command(name = "mqadmin", about = "rocketraft admin tool", version)]
struct Cli {
    /// Nameserver addresses, comma separated.
    #[arg(
        long,
        global = true,
        default_value = "127.0.0.1:9876",
        value_delimiter = ','
    )]
    namesrv: Vec<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Broker groups, their nodes and leaders.
    ClusterList,
    /// Create or update a topic in every group (or one).
    TopicCreate {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 4)]
        queues: u32,
        #[arg(long)]
        group: Option<String>,
    },
    /// Topics known to the nameservers.
    TopicList,
    /// Which groups serve a topic, and their leaders.
    TopicRoute {
        #[arg(long)]
        topic: String,
    },
    /// Min and max offset of each queue of a topic.
    TopicStatus {
        #[arg(long)]
        topic: String,
    },
    /// Read messages as a consumer group (from its committed offsets, or `--from` where it
    /// has none), print one JSON object per message, and commit how far it read.
    Consume {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        group: String,
        /// `*` or `TagA || TagB`.
        #[arg(long, default_value = "*")]
        expr: String,
        /// Where a group without a committed offset starts: `first`, `last` or
        /// `timestamp:MS`.
        #[arg(long, default_value = "first")]
        from: ConsumeFrom,
        #[arg(long, default_value_t = 32)]
        count: usize,
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
        /// Refuse each message while its reconsume count is below N (hand it back, as a
        /// push consumer's ReconsumeLater does), and print the refused deliveries too.
        #[arg(long, default_value_t = 0)]
        reconsume_later: i32,
    },
    /// Find messages by message id (`msg_id` as `send` prints it) or key, in every group.
    QueryMsg {
        #[arg(long)]
        key: String,
    },
    /// Move a broker group's leadership to another of its nodes (planned maintenance).
    TransferLeader {
        #[arg(long)]
        group: String,
        #[arg(long)]
        to: u64,
    },
    /// Let a stopped node come back with an empty data dir (a replaced disk): run it after
    /// stopping the node, then start the node on its new disk; the leader rebuilds it.
    ReplaceNode {
        #[arg(long)]
        group: String,
        #[arg(long)]
        node: u64,
    },
    /// The messages in a consumer group's dead-letter topic (`%DLQ%<group>`), oldest first,
    /// without consuming them.
    DlqList {
        #[arg(long)]
        group: String,
        #[arg(long, default_value_t = 100)]
        count: usize,
    },
    /// The live members of a consumer group, per broker group, and whether their
    /// subscriptions agree.
    ConsumerList {
        #[arg(long)]
        group: String,
    },
    /// Per queue: the broker's max offset, the group's committed offset and the lag.
    ConsumerProgress {
        #[arg(long)]
        group: String,
        /// The topic to inspect; by default the topics the group's live members subscribe.
        #[arg(long)]
        topic: Option<String>,
    },
    /// Start a local cluster of real processes, run a producer and a push consumer through
    /// scheduled faults, and report what was acknowledged, consumed, lost and duplicated.
    /// Exits non-zero if anything acknowledged was lost.
    Drill(DrillArgs),
    /// Send messages; prints one JSON object per message sent.
    Send {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        tags: Option<String>,
        /// Message keys, space separated.
        #[arg(long)]
        keys: Option<String>,
        #[arg(long, default_value_t = 0)]
        delay_level: u32,
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long)]
        body: String,
    },
}

#[derive(clap::Args)]
struct DrillArgs {
    #[arg(long, default_value_t = 60)]
    duration_secs: u64,
    #[arg(long, default_value_t = 20)]
    fault_every_secs: u64,
    /// Faults, in turn: kill-leader, kill-follower, pause-leader, partition-leader,
    /// restart-all, corrupt-follower (kill a follower, flip a byte in its Raft log and its
    /// CommitLog, restart it: it must repair itself from the group).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kill-leader,kill-follower,pause-leader,partition-leader,restart-all,corrupt-follower"
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

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mqadmin: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let admin = Admin::new(cli.namesrv.clone());
    match cli.command {
        Command::Drill(args) => drill(args, cli.json).await?,
        Command::ClusterList => {
            let info = admin.cluster_info().await?;
            if cli.json {
                let groups: Vec<_> = info
                    .groups
                    .iter()
                    .map(|g| json!({"cluster": g.cluster, "group": g.group, "leader_id": g.leader_id, "leader_addr": g.leader_addr, "term": g.term, "nodes": g.nodes}))
                    .collect();
                println!("{}", json!({ "groups": groups }));
            } else {
                for group in &info.groups {
                    let leader = group.leader_id.map_or_else(
                        || "none".to_owned(),
                        |id| format!("{id} ({})", group.leader_addr),
                    );
                    println!(
                        "{} {} term {} leader {leader}",
                        group.cluster, group.group, group.term
                    );
                    for (id, addr) in &group.nodes {
                        println!("  node {id} {addr}");
                    }
                }
            }
        }
        Command::TopicCreate {
            topic,
            queues,
            group,
        } => {
            let groups = admin.create_topic(&topic, queues, group.as_deref()).await?;
            if cli.json {
                println!(
                    "{}",
                    json!({ "topic": topic, "queues": queues, "groups": groups })
                );
            } else {
                println!(
                    "topic {topic} with {queues} queues in {}",
                    groups.join(", ")
                );
            }
        }
        Command::TopicList => {
            let topics = admin.topic_list().await?;
            if cli.json {
                println!("{}", json!({ "topics": topics }));
            } else {
                topics.iter().for_each(|topic| println!("{topic}"));
            }
        }
        Command::TopicRoute { topic } => {
            let route = admin.topic_route(&topic).await?;
            let groups: Vec<_> = route
                .queues
                .iter()
                .map(|q| {
                    let leader = route.groups.iter().find(|g| g.group == q.group).map(|g| g.leader_addr.clone());
                    json!({"group": q.group, "read_queues": q.read_queue_count, "write_queues": q.write_queue_count, "perm": q.perm, "leader": leader})
                })
                .collect();
            if cli.json {
                println!("{}", json!({ "topic": topic, "groups": groups }));
            } else {
                for group in groups {
                    println!("{group}");
                }
            }
        }
        Command::TopicStatus { topic } => {
            let statuses = admin.topic_status(&topic).await?;
            if cli.json {
                println!("{}", serde_json::to_string(&statuses)?);
            } else {
                for status in statuses {
                    println!(
                        "{} queue {} min {} max {}",
                        status.group, status.queue_id, status.min_offset, status.max_offset
                    );
                }
            }
        }
        Command::Consume {
            topic,
            group,
            expr,
            from,
            count,
            timeout_ms,
            reconsume_later,
        } => {
            let subscription =
                Subscription::parse(&expr).map_err(|reason| anyhow::anyhow!(reason))?;
            let request = ConsumeRequest {
                topic,
                consumer_group: group,
                subscription,
                from,
                count,
                timeout: std::time::Duration::from_millis(timeout_ms),
                reconsume_later,
            };
            for message in admin.consume(&request).await? {
                println!("{}", serde_json::to_string(&message)?);
            }
        }
        Command::QueryMsg { key } => {
            for message in admin.query_messages(&key).await? {
                println!("{}", serde_json::to_string(&message)?);
            }
        }
        Command::TransferLeader { group, to } => {
            let term = admin.transfer_leader(&group, to).await?;
            if cli.json {
                println!("{}", json!({"group": group, "leader_id": to, "term": term}));
            } else {
                println!("{group}: node {to} leads in term {term}");
            }
        }
        Command::ReplaceNode { group, node } => {
            admin.prepare_node_replacement(&group, node).await?;
            if cli.json {
                println!(
                    "{}",
                    json!({"group": group, "node": node, "prepared": true})
                );
            } else {
                println!("{group}: node {node} may now start with an empty data dir");
            }
        }
        Command::DlqList { group, count } => {
            for message in admin.dlq_list(&group, count).await? {
                println!("{}", serde_json::to_string(&message)?);
            }
        }
        Command::ConsumerList { group } => {
            let listed = admin.consumer_list(&group).await?;
            if cli.json {
                println!("{}", serde_json::to_string(&listed)?);
            } else {
                for member in &listed.members {
                    let subscriptions: Vec<String> = member
                        .subscriptions
                        .iter()
                        .map(|(topic, expression)| format!("{topic}={expression}"))
                        .collect();
                    println!(
                        "{} {} idle {} ms {}",
                        member.broker_group,
                        member.client_id,
                        member.idle_ms,
                        subscriptions.join(",")
                    );
                }
                if !listed.subscriptions_consistent {
                    println!("WARNING: members of {group} subscribe differently");
                }
            }
        }
        Command::ConsumerProgress { group, topic } => {
            let progress = admin.consumer_progress(&group, topic.as_deref()).await?;
            if cli.json {
                println!("{}", serde_json::to_string(&progress)?);
            } else {
                for queue in progress {
                    let committed = queue
                        .committed_offset
                        .map_or_else(|| "none".to_owned(), |offset| offset.to_string());
                    println!(
                        "{} {} queue {} max {} committed {committed} lag {}",
                        queue.topic,
                        queue.broker_group,
                        queue.queue_id,
                        queue.max_offset,
                        queue.lag
                    );
                }
            }
        }
        Command::Send {
            topic,
            tags,
            keys,
            delay_level,
            count,
            body,
        } => {
            let producer = Producer::builder(cli.namesrv.clone(), "mqadmin").build()?;
            for _ in 0..count {
                let mut message = Message::new(topic.clone(), body.clone().into_bytes())
                    .with_delay_level(delay_level);
                if let Some(tags) = &tags {
                    message = message.with_tags(tags.clone());
                }
                if let Some(keys) = &keys {
                    message = message.with_keys(keys.split_whitespace());
                }
                let result = producer.send(message).await?;
                println!(
                    "{}",
                    json!({"msg_id": result.msg_id, "group": result.group, "queue_id": result.queue_id, "queue_offset": result.queue_offset})
                );
            }
        }
    }
    Ok(())
}

async fn drill(args: DrillArgs, json: bool) -> anyhow::Result<()> {
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
