//! What an application plugs into a push consumer: a listener that takes a batch of
//! messages and answers [`ConsumeResult`]. Listeners are async; a blocking listener should
//! move its work to `tokio::task::spawn_blocking` itself.

use std::future::Future;
use std::pin::Pin;

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

/// Where a batch comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumeContext {
    pub message_queue: MessageQueue,
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
