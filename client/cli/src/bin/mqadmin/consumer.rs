//! `mqadmin` commands about consumer groups: their live members and their progress.

use clap::Subcommand;
use rocketraft_proto::sql_filter::EXPRESSION_TYPE_SQL92;

use crate::Context;

#[derive(Subcommand)]
pub enum ConsumerCommand {
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
