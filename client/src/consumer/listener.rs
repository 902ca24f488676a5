//! What an application plugs into a push consumer: a listener that takes a batch of
//! messages and answers [`ConsumeResult`] (called concurrently), or an orderly one that
//! answers [`ConsumeOrderlyResult`] (called for one batch of a queue at a time). Listeners
//! are async; a blocking listener should move its work to `tokio::task::spawn_blocking`
//! itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

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

/// The outcome of consuming a batch in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeOrderlyResult {
    /// Consumed: the queue moves on to the next batch.
    Success,
    /// Not consumed now: the queue pauses and the same batch comes again, before anything
    /// after it (RocketMQ's `SUSPEND_CURRENT_QUEUE_A_MOMENT`).
    SuspendCurrentQueueAMoment,
}

/// The shortest and longest pause a listener may ask for after a suspended batch
/// (RocketMQ's bounds).
pub const SUSPEND_TIME_MIN: Duration = Duration::from_millis(10);
pub const SUSPEND_TIME_MAX: Duration = Duration::from_secs(30);

/// Where an in-order batch comes from, and how long its queue pauses if it is suspended.
#[derive(Debug, Clone)]
pub struct ConsumeOrderlyContext {
    pub message_queue: MessageQueue,
    suspend_ms: Arc<AtomicU64>,
}

impl ConsumeOrderlyContext {
    pub fn new(message_queue: MessageQueue, suspend: Duration) -> ConsumeOrderlyContext {
        ConsumeOrderlyContext {
            message_queue,
            suspend_ms: Arc::new(AtomicU64::new(suspend.as_millis() as u64)),
        }
    }

    /// For `SuspendCurrentQueueAMoment`: pause the queue this long before the batch comes
    /// again (clamped to [`SUSPEND_TIME_MIN`]..=[`SUSPEND_TIME_MAX`]; default: the
    /// consumer's `suspend_current_queue_time`).
    pub fn set_suspend_current_queue_time(&self, suspend: Duration) {
        let suspend = suspend.clamp(SUSPEND_TIME_MIN, SUSPEND_TIME_MAX);
        self.suspend_ms
            .store(suspend.as_millis() as u64, Ordering::Relaxed);
    }

    pub fn suspend_current_queue_time(&self) -> Duration {
        Duration::from_millis(self.suspend_ms.load(Ordering::Relaxed))
    }
}

pub type ConsumeOrderlyFuture = Pin<Box<dyn Future<Output = ConsumeOrderlyResult> + Send>>;

/// Consumes the batches of each queue one at a time, in queue order (RocketMQ's
/// `MessageListenerOrderly`); different queues are consumed concurrently.
pub trait MessageListenerOrderly: Send + Sync + 'static {
    fn consume(
        &self,
        messages: Vec<MessageExt>,
        context: ConsumeOrderlyContext,
    ) -> ConsumeOrderlyFuture;
}

/// Any `Fn(Vec<MessageExt>, ConsumeOrderlyContext) -> impl Future<Output =
/// ConsumeOrderlyResult>` is an orderly listener.
impl<F, Fut> MessageListenerOrderly for F
where
    F: Fn(Vec<MessageExt>, ConsumeOrderlyContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ConsumeOrderlyResult> + Send + 'static,
{
    fn consume(
        &self,
        messages: Vec<MessageExt>,
        context: ConsumeOrderlyContext,
    ) -> ConsumeOrderlyFuture {
        Box::pin(self(messages, context))
    }
}

/// The listener a consumer runs.
#[derive(Clone)]
pub enum Listener {
    Concurrently(Arc<dyn MessageListener>),
    Orderly(Arc<dyn MessageListenerOrderly>),
}

impl Listener {
    pub fn is_orderly(&self) -> bool {
        matches!(self, Listener::Orderly(_))
    }
}
