//! `mqadmin consume --orderly`: consume a topic as an orderly member of a consumer group.
//!
//! It runs the SDK's push consumer with an orderly listener, so it takes the group's queue
//! locks like any orderly application would: while it runs, no other orderly member of the
//! group consumes its queues. It prints each delivery as it happens (the messages of each
//! queue in queue order) and stops after `count` consumed messages or at the timeout, then
//! commits, unlocks and leaves the group. Deliveries past `count` are suspended, not
//! consumed, so the group's offset never passes a message it did not print.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::admin::ConsumedMessage;
use rocketraft_client::admin::DeliveryResult;
use rocketraft_client::consumer::ConsumeOrderlyContext;
use rocketraft_client::consumer::ConsumeOrderlyResult;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::message::MessageExt;
use tokio::sync::Notify;

use crate::Context;

/// When `consume --orderly` says why it holds no queue yet.
const NO_QUEUE_HINT_AFTER: Duration = Duration::from_secs(3);

/// Consumes as `request` asks; a message whose reconsume count is below
/// `request.reconsume_later` suspends its queue instead.
pub async fn run(request: ConsumeRequest, context: &Context) -> anyhow::Result<()> {
    let mut builder = PushConsumer::builder(context.namesrv.clone(), request.consumer_group)
        .consume_from(request.from)
        .subscribe_with(&request.topic, request.subscription);
    if let Some(tls) = &context.tls {
        builder = builder.tls(tls.clone());
    }
    let remaining = Arc::new(AtomicUsize::new(request.count));
    let done = Arc::new(Notify::new());
    let suspend_below = request.reconsume_later;
    let listener = {
        let (remaining, done) = (remaining.clone(), done.clone());
        move |messages: Vec<MessageExt>, context: ConsumeOrderlyContext| {
            let (remaining, done) = (remaining.clone(), done.clone());
            async move { deliver(messages, &context, &remaining, &done, suspend_below) }
        }
    };
    let consumer = builder.start_orderly(listener).await?;
    let deadline = tokio::time::sleep(request.timeout);
    tokio::pin!(deadline);
    let hint = tokio::time::sleep(NO_QUEUE_HINT_AFTER);
    tokio::pin!(hint);
    let mut hinted = false;
    loop {
        tokio::select! {
            () = done.notified() => break,
            () = &mut deadline => break,
            () = &mut hint, if !hinted => {
                hinted = true;
                if consumer.assigned_queues().is_empty() {
                    eprintln!(
                        "mqadmin: no queue locked yet: another orderly member of the group holds \
                         them, or a broker group's leader started less than half the lock \
                         expiry ago (30 s by default) and grants only locks it knows are free"
                    );
                }
            }
        }
    }
    consumer.shutdown().await;
    Ok(())
}

/// Prints and consumes a batch while `remaining` allows, suspending it otherwise.
fn deliver(
    messages: Vec<MessageExt>,
    context: &ConsumeOrderlyContext,
    remaining: &AtomicUsize,
    done: &Notify,
    suspend_below: i32,
) -> ConsumeOrderlyResult {
    if messages
        .iter()
        .any(|message| message.reconsume_times < suspend_below)
    {
        for message in messages {
            print(ConsumedMessage::new(message, DeliveryResult::Suspended));
        }
        return ConsumeOrderlyResult::SuspendCurrentQueueAMoment;
    }
    let taken = remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
        left.checked_sub(messages.len())
    });
    let Ok(left) = taken else {
        // Past the count: leave the batch for the next consumer, and do not come back soon.
        context.set_suspend_current_queue_time(Duration::MAX);
        return ConsumeOrderlyResult::SuspendCurrentQueueAMoment;
    };
    for message in messages.iter().cloned() {
        print(ConsumedMessage::new(message, DeliveryResult::Consumed));
    }
    if left == messages.len() {
        done.notify_one();
    }
    ConsumeOrderlyResult::Success
}

fn print(message: ConsumedMessage) {
    match serde_json::to_string(&message) {
        Ok(line) => println!("{line}"),
        Err(error) => eprintln!("mqadmin: cannot print a message: {error}"),
    }
}
