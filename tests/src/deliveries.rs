//! A record of what push consumers delivered, for tests: every delivery with the consumer's
//! name and the time it happened.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use rocketraft_client::consumer::ConsumeFrom;
use rocketraft_client::consumer::ConsumeResult;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::message::MessageExt;
use rocketraft_domain::clock::ManualClock;

use crate::wait_for;

/// One delivery: which consumer got which message, when.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub consumer: String,
    pub message: MessageExt,
    pub at: Instant,
}

#[derive(Clone, Default)]
pub struct Deliveries(Arc<Mutex<Vec<Delivery>>>);

impl Deliveries {
    pub fn record(&self, consumer: &str, messages: &[MessageExt]) {
        let at = Instant::now();
        let mut all = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        all.extend(messages.iter().map(|message| Delivery {
            consumer: consumer.to_owned(),
            message: message.clone(),
            at,
        }));
    }

    pub fn all(&self) -> Vec<Delivery> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The deliveries of one message id, in order.
    pub fn of(&self, msg_id: &str) -> Vec<Delivery> {
        self.all()
            .into_iter()
            .filter(|delivery| delivery.message.msg_id == msg_id)
            .collect()
    }

    /// msg id -> the consumers that got it, once per delivery.
    pub fn by_message(&self) -> BTreeMap<String, Vec<String>> {
        let mut by_message: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for delivery in self.all() {
            by_message
                .entry(delivery.message.msg_id)
                .or_default()
                .push(delivery.consumer);
        }
        by_message
    }

    /// Starts a push consumer of `group` that reads `topic` from its first message and
    /// records every delivery as "reader", with short timings for tests.
    pub async fn start_reader(
        &self,
        nameservers: Vec<String>,
        group: &str,
        topic: &str,
    ) -> anyhow::Result<PushConsumer> {
        let deliveries = self.clone();
        Ok(PushConsumer::builder(nameservers, group)
            .subscribe(topic, "*")
            .consume_from(ConsumeFrom::First)
            .heartbeat_interval(Duration::from_millis(300))
            .rebalance_interval(Duration::from_secs(1))
            .persist_interval(Duration::from_millis(200))
            .route_ttl(Duration::from_millis(500))
            .start(move |messages: Vec<MessageExt>, _context| {
                let deliveries = deliveries.clone();
                async move {
                    deliveries.record("reader", &messages);
                    ConsumeResult::Success
                }
            })
            .await?)
    }

    /// Waits until every id in `ids` was delivered at least once.
    pub async fn wait_for_all(
        &self,
        ids: &BTreeSet<String>,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        wait_for("every sent message consumed", timeout, || async {
            let seen = self.by_message();
            ids.iter().all(|id| seen.contains_key(id)).then_some(())
        })
        .await
    }

    /// Moves `clock` on by `step` at a time until the last of `due_at` (message id to the
    /// clock time it is due, in ms) has passed, waiting after each step for everything due
    /// by then. Checks, for every delivery so far, that it was stored (by the broker that
    /// moved it into its topic, on the same clock) no earlier than it was due and less than
    /// a `step` later: a delayed message comes within one step of its time, never before.
    pub async fn step_clock_through(
        &self,
        clock: &ManualClock,
        due_at: &BTreeMap<String, i64>,
        step: Duration,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let last_ms = due_at.values().copied().max().unwrap_or(i64::MIN);
        while clock.now_ms() < last_ms {
            clock.advance(step);
            let now_ms = clock.now_ms();
            let due = due_at
                .iter()
                .filter(|(_, at)| **at <= now_ms)
                .map(|(id, _)| id.clone())
                .collect();
            self.wait_for_all(&due, timeout).await?;
            for delivery in self.all() {
                let message = &delivery.message;
                let Some(due_ms) = due_at.get(&message.msg_id) else {
                    continue;
                };
                let late_ms = message.store_timestamp_ms - due_ms;
                anyhow::ensure!(
                    late_ms >= 0,
                    "{} stored {} ms before it was due",
                    message.msg_id,
                    -late_ms
                );
                anyhow::ensure!(
                    late_ms < step.as_millis() as i64,
                    "{} stored {late_ms} ms after it was due, more than a step of {step:?}",
                    message.msg_id
                );
            }
        }
        Ok(())
    }
}
