//! `mqadmin` commands that send, read and find messages: send, consume as a group, query by
//! key or id, list a group's dead letters.

use clap::Subcommand;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::subscription::Subscription;
use serde_json::json;

use crate::Context;
use crate::consume_orderly;

#[derive(Subcommand)]
pub enum MessageCommand {
    /// Send messages; prints one JSON object per message sent.
    Send {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        tags: Option<String>,
        /// Message keys, space separated.
        #[arg(long)]
        keys: Option<String>,
        #[arg(long, default_value_t = 0, conflicts_with_all = ["deliver_at", "delay_ms"])]
        delay_level: u32,
        /// A timer message: deliver at this time (ms since the epoch), to within a second.
        #[arg(long, conflicts_with = "delay_ms")]
        deliver_at: Option<i64>,
        /// A timer message: deliver this many ms after the broker stores it.
        #[arg(long)]
        delay_ms: Option<u64>,
        #[arg(long, default_value_t = 1)]
        count: u32,
        #[arg(long)]
        body: String,
        /// A user property, `KEY=VALUE` (repeat for more); what SQL92 filters select on.
        #[arg(long = "property", value_parser = parse_property)]
        properties: Vec<(String, String)>,
        /// Send to the queue this key hashes to, so messages of one key stay in order
        /// (`send_ordered`; consume them with `consume --orderly`).
        #[arg(long)]
        sharding_key: Option<String>,
    },
    /// Read messages as a consumer group (from its committed offsets, or `--from` where it
    /// has none), print one JSON object per message, and commit how far it read.
    Consume {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        group: String,
        /// `*` or `TagA || TagB`.
        #[arg(long, default_value = "*", conflicts_with = "sql")]
        expr: String,
        /// A SQL92 filter on message properties instead of tags, e.g.
        /// `TAGS IN ('A') AND price > 10`.
        #[arg(long)]
        sql: Option<String>,
        /// Where a group without a committed offset starts: `first`, `last` or
        /// `timestamp:MS`.
        #[arg(long, default_value = "first")]
        from: ConsumeFrom,
        #[arg(long, default_value_t = 32)]
        count: usize,
        #[arg(long, default_value_t = 5000)]
        timeout_ms: u64,
        /// Refuse each message while its reconsume count is below N (hand it back, as a
        /// push consumer's ReconsumeLater does; with `--orderly`, suspend its queue), and
        /// print the refused deliveries too.
        #[arg(long, default_value_t = 0)]
        reconsume_later: i32,
        /// Consume as an orderly member of the group: take its queue locks and print each
        /// queue's messages in order as they arrive, until `--count` or the timeout.
        #[arg(long)]
        orderly: bool,
    },
    /// Find messages by message id (`msg_id` as `send` prints it) or key, in every group.
    QueryMsg {
        #[arg(long)]
        key: String,
    },
    /// The messages in a consumer group's dead-letter topic (`%DLQ%<group>`), oldest first,
    /// without consuming them.
    DlqList {
        #[arg(long)]
        group: String,
        #[arg(long, default_value_t = 100)]
        count: usize,
    },
}

/// `KEY=VALUE`, as `send --property` takes it.
fn parse_property(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

pub async fn run(command: MessageCommand, context: &Context) -> anyhow::Result<()> {
    match command {
        MessageCommand::Send {
            topic,
            tags,
            keys,
            delay_level,
            deliver_at,
            delay_ms,
            count,
            body,
            properties,
            sharding_key,
        } => {
            let mut message = Message::new(topic, body.into_bytes()).with_delay_level(delay_level);
            if let Some(at) = deliver_at {
                message = message.with_deliver_time_ms(at);
            }
            if let Some(ms) = delay_ms {
                message = message.with_delay(std::time::Duration::from_millis(ms));
            }
            for (key, value) in properties {
                message = message.with_property(key, value);
            }
            if let Some(tags) = tags {
                message = message.with_tags(tags);
            }
            if let Some(keys) = &keys {
                message = message.with_keys(keys.split_whitespace());
            }
            send(message, count, sharding_key.as_deref(), context).await?;
        }
        MessageCommand::Consume {
            topic,
            group,
            expr,
            sql,
            from,
            count,
            timeout_ms,
            reconsume_later,
            orderly,
        } => {
            let subscription = match sql {
                Some(sql) => Subscription::sql(&sql),
                None => Subscription::parse(&expr),
            }
            .map_err(|reason| anyhow::anyhow!(reason))?;
            let request = ConsumeRequest {
                topic,
                consumer_group: group,
                subscription,
                from,
                count,
                timeout: std::time::Duration::from_millis(timeout_ms),
                reconsume_later,
            };
            if orderly {
                return consume_orderly::run(request, context).await;
            }
            for message in context.admin.consume(&request).await? {
                println!("{}", serde_json::to_string(&message)?);
            }
        }
        MessageCommand::QueryMsg { key } => {
            for message in context.admin.query_messages(&key).await? {
                println!("{}", serde_json::to_string(&message)?);
            }
        }
        MessageCommand::DlqList { group, count } => {
            for message in context.admin.dlq_list(&group, count).await? {
                println!("{}", serde_json::to_string(&message)?);
            }
        }
    }
    Ok(())
}

/// Sends `count` copies of `message`, one at a time (to `sharding_key`'s queue if given),
/// printing each result.
async fn send(
    message: Message,
    count: u32,
    sharding_key: Option<&str>,
    context: &Context,
) -> anyhow::Result<()> {
    let mut producer = Producer::builder(context.namesrv.clone(), "mqadmin");
    if let Some(tls) = &context.tls {
        producer = producer.tls(tls.clone());
    }
    let producer = producer.build()?;
    for _ in 0..count {
        let result = match sharding_key {
            Some(key) => producer.send_ordered(message.clone(), key).await?,
            None => producer.send(message.clone()).await?,
        };
        println!(
            "{}",
            json!({"msg_id": result.msg_id, "group": result.group, "queue_id": result.queue_id, "queue_offset": result.queue_offset})
        );
    }
    Ok(())
}
