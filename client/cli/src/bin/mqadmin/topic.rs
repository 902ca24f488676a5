//! `mqadmin` commands about topics: create, list, route, queue offsets.

use clap::Subcommand;
use clap::ValueEnum;
use rocketraft_domain::topic_type::TopicTypeMeaning;
use rocketraft_proto::common::TopicMessageType;
use serde_json::json;

use crate::Context;

#[derive(Subcommand)]
pub enum TopicCommand {
    /// Create or update a topic in every group (or one).
    #[command(name = "topic-create")]
    Create {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 4)]
        queues: u32,
        #[arg(long)]
        group: Option<String>,
        /// The messages it takes from RocketMQ 5.x clients; unset: a new topic takes every
        /// type, an existing one keeps its type.
        #[arg(long, value_enum)]
        message_type: Option<MessageTypeArg>,
    },
    /// Topics known to the nameservers.
    #[command(name = "topic-list")]
    List,
    /// Which groups serve a topic, and their leaders.
    #[command(name = "topic-route")]
    Route {
        #[arg(long)]
        topic: String,
    },
    /// Min and max offset of each queue of a topic.
    #[command(name = "topic-status")]
    Status {
        #[arg(long)]
        topic: String,
    },
}

/// A topic's message type, as RocketMQ's `message.type` attribute names it.
#[derive(Clone, Copy, ValueEnum)]
pub enum MessageTypeArg {
    Mixed,
    Normal,
    Fifo,
    Delay,
    Transaction,
}

impl From<MessageTypeArg> for TopicMessageType {
    fn from(arg: MessageTypeArg) -> TopicMessageType {
        match arg {
            MessageTypeArg::Mixed => TopicMessageType::Mixed,
            MessageTypeArg::Normal => TopicMessageType::Normal,
            MessageTypeArg::Fifo => TopicMessageType::Fifo,
            MessageTypeArg::Delay => TopicMessageType::Delay,
            MessageTypeArg::Transaction => TopicMessageType::Transaction,
        }
    }
}

pub async fn run(command: TopicCommand, context: &Context) -> anyhow::Result<()> {
    match command {
        TopicCommand::Create {
            topic,
            queues,
            group,
            message_type,
        } => {
            let message_type = message_type.map_or(TopicMessageType::Unspecified, Into::into);
            let groups = context
                .admin
                .create_typed_topic(&topic, queues, message_type, group.as_deref())
                .await?;
            if context.json {
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
        TopicCommand::List => {
            let topics = context.admin.topic_list().await?;
            if context.json {
                println!("{}", json!({ "topics": topics }));
            } else {
                topics.iter().for_each(|topic| println!("{topic}"));
            }
        }
        TopicCommand::Route { topic } => topic_route(&topic, context).await?,
        TopicCommand::Status { topic } => {
            let statuses = context.admin.topic_status(&topic).await?;
            if context.json {
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
    }
    Ok(())
}

async fn topic_route(topic: &str, context: &Context) -> anyhow::Result<()> {
    let route = context.admin.topic_route(topic).await?;
    let groups: Vec<_> = route
        .queues
        .iter()
        .map(|q| {
            let leader = route.groups.iter().find(|g| g.group == q.group).map(|g| g.leader_addr.clone());
            let message_type = q.message_type().or_mixed().name();
            json!({"group": q.group, "read_queues": q.read_queue_count, "write_queues": q.write_queue_count, "perm": q.perm, "message_type": message_type, "leader": leader})
        })
        .collect();
    if context.json {
        println!("{}", json!({ "topic": topic, "groups": groups }));
    } else {
        for group in groups {
            println!("{group}");
        }
    }
    Ok(())
}
