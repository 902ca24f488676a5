//! `mqadmin` commands about consumer groups: their retry config, live members and progress.

use clap::Subcommand;
use rocketraft_client::admin::GroupSettings;
use rocketraft_domain::sql_filter::EXPRESSION_TYPE_SQL92;

use crate::Context;

#[derive(Subcommand)]
pub enum ConsumerCommand {
    /// Creates or updates a consumer group's retry config in every broker group (or one):
    /// how many reconsumes before `%DLQ%<group>`, and its retry queues (RocketMQ's
    /// `updateSubGroup`).
    UpdateGroup {
        #[arg(long)]
        group: String,
        /// Reconsumes before the dead-letter topic (0: the default, 16; at most 64).
        #[arg(long, default_value_t = 0)]
        retry_max_times: u32,
        /// Queues of `%RETRY%<group>` (0: the default, 1).
        #[arg(long, default_value_t = 0)]
        retry_queues: u32,
        /// The group's RocketMQ 5.x consumers receive in order (FIFO): a queue delivers
        /// nothing new while messages of it are in flight to the group.
        #[arg(long)]
        orderly: bool,
        /// Only this broker group.
        #[arg(long)]
        broker_group: Option<String>,
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
}

pub async fn run(command: ConsumerCommand, context: &Context) -> anyhow::Result<()> {
    match command {
        ConsumerCommand::UpdateGroup {
            group,
            retry_max_times,
            retry_queues,
            orderly,
            broker_group,
        } => {
            let settings = GroupSettings {
                retry_max_times,
                retry_queue_count: retry_queues,
                consume_orderly: orderly,
            };
            let updated = context
                .admin
                .update_group(&group, settings, broker_group.as_deref())
                .await?;
            println!("updated {group} in {}", updated.join(", "));
            Ok(())
        }
        ConsumerCommand::ConsumerList { group } => consumer_list(&group, context).await,
        ConsumerCommand::ConsumerProgress { group, topic } => {
            consumer_progress(&group, topic.as_deref(), context).await
        }
    }
}

async fn consumer_list(group: &str, context: &Context) -> anyhow::Result<()> {
    let listed = context.admin.consumer_list(group).await?;
    if context.json {
        println!("{}", serde_json::to_string(&listed)?);
        return Ok(());
    }
    for member in &listed.members {
        let subscriptions: Vec<String> = member
            .subscriptions
            .iter()
            .map(|s| match s.expression_type.as_str() {
                EXPRESSION_TYPE_SQL92 => format!("{}=SQL92({})", s.topic, s.expression),
                _ => format!("{}={}", s.topic, s.expression),
            })
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
    Ok(())
}

async fn consumer_progress(
    group: &str,
    topic: Option<&str>,
    context: &Context,
) -> anyhow::Result<()> {
    let progress = context.admin.consumer_progress(group, topic).await?;
    if context.json {
        println!("{}", serde_json::to_string(&progress)?);
        return Ok(());
    }
    for queue in progress {
        let committed = queue
            .committed_offset
            .map_or_else(|| "none".to_owned(), |offset| offset.to_string());
        let skipped = if queue.skipped > 0 {
            format!(
                " skipped {} (deleted by retention before consumed)",
                queue.skipped
            )
        } else {
            String::new()
        };
        println!(
            "{} {} queue {} min {} max {} committed {committed} lag {}{skipped}",
            queue.topic,
            queue.broker_group,
            queue.queue_id,
            queue.min_offset,
            queue.max_offset,
            queue.lag
        );
    }
    Ok(())
}
