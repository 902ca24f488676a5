//! What an application plugs into a push consumer: a listener that takes a batch of
//! messages and answers [`ConsumeResult`]. Listeners are async; a blocking listener should
//! move its work to `tokio::task::spawn_blocking` itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::Ordering;

use crate::message::MessageExt;
use crate::route::MessageQueue;

/// The outcome of consuming a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeResult {
    /// Consumed: the queue offset may move past the batch.
    Success,
    /// Not consumed now: the batch comes back later and the offset stays before it.
    ReconsumeLater,
}

/// Where a batch comes from, and how a refused batch comes back.
#[derive(Debug, Clone)]
pub struct ConsumeContext {
    pub message_queue: MessageQueue,
    delay_level_when_next_consume: Arc<AtomicI32>,
}

impl ConsumeContext {
    pub fn new(message_queue: MessageQueue) -> ConsumeContext {
        ConsumeContext {
            message_queue,
            delay_level_when_next_consume: Arc::new(AtomicI32::new(0)),
        }
    }

    /// For `ReconsumeLater`: 0 (default) retries after level `3 + reconsume times`; a level
    /// `> 0` after that level; `-1` sends the batch straight to the dead-letter topic.
    pub fn set_delay_level_when_next_consume(&self, level: i32) {
        self.delay_level_when_next_consume
            .store(level, Ordering::Relaxed);
    }

    pub fn delay_level_when_next_consume(&self) -> i32 {
        self.delay_level_when_next_consume.load(Ordering::Relaxed)
    }
}

pub type ConsumeFuture = Pin<Box<dyn Future<Output = ConsumeResult> + Send>>;

/// Consumes batches of messages; called concurrently from many tasks.
pub trait MessageListener: Send + Sync + 'static {
    fn consume(&self, messages: Vec<MessageExt>, context: ConsumeContext) -> ConsumeFuture;
}

/// Any `Fn(Vec<MessageExt>, ConsumeContext) -> impl Future<Output = ConsumeResult>` is a
/// listener: `|messages, context| async move { ConsumeResult::Success }`.
impl<F, Fut> MessageListener for F
where
    F: Fn(Vec<MessageExt>, ConsumeContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ConsumeResult> + Send + 'static,
{
    fn consume(&self, messages: Vec<MessageExt>, context: ConsumeContext) -> ConsumeFuture {
        Box::pin(self(messages, context))
    }
}
