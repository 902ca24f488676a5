//! `mqadmin`: administer a rocketraft cluster through its nameservers.
//!
//! Every command takes `--namesrv ADDR[,ADDR]` and `--json`. A failure exits non-zero with
//! a one-line reason on stderr.

use std::process::ExitCode;

use clap::Parser;
use clap::Subcommand;
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
