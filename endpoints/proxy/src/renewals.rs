//! Auto-renewal: a receive that leaves the invisible time to the server (`auto_renew`, as
//! push consumers do) gets `invisible` time, and this endpoint keeps extending it, a
//! `RENEW_AHEAD` before it ends, while the consumer works on the message: until the consumer
//! acks, nacks or forwards it, its client's Telemetry stream here ends, or `RENEW_MAX`
//! passed. Each extension gives the message a new receipt on the broker, so the consumer's
//! handle is translated to the current one when it acks, nacks or forwards through this
//! endpoint (its deliveries name this endpoint, so it does).
//!
//! Invariants: a renewal holds its delivery's lock across its broker call, and a consumer's
//! call takes the delivery under that lock before using its receipt, so no renewal replaces
//! a receipt a consumer's call is about to use. A taken delivery is no longer renewed but
//! keeps answering its receipt until its invisible time is over, so a consumer that retries a
//! failed ack, nack or forward with its first handle (the official clients do) still reaches
//! the message. A delivery leaves the table then, or when a renewal finds it no longer in
//! flight with that receipt, its client gone, or `RENEW_MAX` passed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clients::Clients;

/// How long before a renewed delivery's invisible time ends it is extended.
const RENEW_AHEAD: Duration = Duration::from_secs(10);
/// How often due renewals are looked for.
const RENEW_TICK: Duration = Duration::from_secs(1);
/// How long one delivery is renewed at most; then it comes back when its time ends. Longer
/// than a FIFO push consumer's local retries of one message with the default delay levels
/// (16 backoffs, 1 h 46 min together), as RocketMQ's proxy (3 h).
pub const RENEW_MAX: Duration = Duration::from_secs(3 * 3600);

/// Which delivery: as the consumer's receipt handle names it (its first receipt).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeliveryKey {
    pub broker_group: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub first_receipt: u64,
}

/// What a renewal needs to extend one delivery.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub consumer_group: String,
    pub topic: String,
    /// The client that received it (`x-mq-client-id`), if it said.
    pub client_id: Option<String>,
    /// The delivery's receipt on the broker now.
    pub receipt: u64,
}

struct Tracked {
    state: tokio::sync::Mutex<State>,
    /// When it is renewed next; once taken, when it is forgotten.
    renew_at: Mutex<Instant>,
    give_up_at: Instant,
}

enum State {
    Renewed(Delivery),
    /// Its consumer took it with this receipt (and may take it again, retrying its call).
    Taken(u64),
    /// No longer renewed nor answered.
    Gone,
}

/// The renewed deliveries of this endpoint.
pub struct Renewals {
    invisible: Duration,
    tracked: Mutex<HashMap<DeliveryKey, Arc<Tracked>>>,
}

/// Extends one delivery by `invisible` with its current receipt: `Ok(Some(receipt))` with
/// the new one, `Ok(None)` if it is no longer in flight with that receipt, `Err` if the
/// broker could not be asked (tried again next tick).
pub trait Renew: Send + Sync {
    fn renew(
        &self,
        key: &DeliveryKey,
        delivery: &Delivery,
        invisible: Duration,
    ) -> impl Future<Output = Result<Option<u64>, String>> + Send;
}

impl Renewals {
    /// Renewals that extend deliveries `invisible` at a time (at least twice `RENEW_AHEAD`
    /// is sensible; tests use less).
    pub fn new(invisible: Duration) -> Renewals {
        Renewals {
            invisible,
            tracked: Mutex::new(HashMap::new()),
        }
    }

    /// How long an auto-renewed delivery is invisible at a time.
    pub fn invisible(&self) -> Duration {
        self.invisible
    }

    /// Starts renewing a delivery made now.
    pub fn track(&self, key: DeliveryKey, delivery: Delivery) {
        let now = Instant::now();
        let tracked = Tracked {
            state: tokio::sync::Mutex::new(State::Renewed(delivery)),
            renew_at: Mutex::new(now + self.invisible.saturating_sub(RENEW_AHEAD)),
            give_up_at: now + RENEW_MAX,
        };
        self.lock().insert(key, Arc::new(tracked));
    }

    /// Stops renewing `key`'s delivery and returns its current receipt (`None` if it is not
    /// renewed here); taking it again, until its invisible time is over, returns the same.
    /// It waits for a renewal of it that is running, so no renewal replaces the receipt
    /// after it returned.
    pub async fn take(&self, key: &DeliveryKey) -> Option<u64> {
        let tracked = self.lock().get(key)?.clone();
        let mut state = tracked.state.lock().await;
        let receipt = match &*state {
            State::Renewed(delivery) => delivery.receipt,
            State::Taken(receipt) => *receipt,
            State::Gone => return None,
        };
        if let State::Renewed(_) = &*state {
            *state = State::Taken(receipt);
            *lock(&tracked.renew_at) = Instant::now() + self.invisible;
        }
        Some(receipt)
    }

    /// Stops renewing `key`'s delivery at once (its consumer never got it): a renewal of it
    /// running now is its last, and its receipt is no longer answered.
    pub fn abandon(&self, key: &DeliveryKey) {
        self.lock().remove(key);
    }

    /// Renews what is due every `RENEW_TICK` until `shutdown`.
    pub async fn run(&self, renew: impl Renew, clients: Arc<Clients>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RENEW_TICK) => {}
            }
            self.renew_due(&renew, &clients).await;
        }
    }

    /// One round: extends every delivery due, drops those it must give up.
    pub async fn renew_due(&self, renew: &impl Renew, clients: &Clients) {
        let now = Instant::now();
        let due: Vec<(DeliveryKey, Arc<Tracked>)> = self
            .lock()
            .iter()
            .filter(|(_, tracked)| *lock(&tracked.renew_at) <= now)
            .map(|(key, tracked)| (key.clone(), tracked.clone()))
            .collect();
        for (key, tracked) in due {
            let mut guard = tracked.state.lock().await;
            let delivery = match &mut *guard {
                State::Renewed(delivery) => delivery,
                // Taken, and its invisible time is over: its receipt is no more use.
                State::Taken(_) => {
                    *guard = State::Gone;
                    drop(guard);
                    self.forget(&key, &tracked);
                    continue;
                }
                State::Gone => continue,
            };
            let client_gone = delivery
                .client_id
                .as_deref()
                .is_some_and(|client_id| !clients.is_open(client_id));
            let keep = if client_gone || now >= tracked.give_up_at {
                tracing::debug!(?key, client_gone, "a delivery is no longer renewed");
                false
            } else {
                match renew.renew(&key, delivery, self.invisible).await {
                    Ok(Some(receipt)) => {
                        delivery.receipt = receipt;
                        *lock(&tracked.renew_at) =
                            Instant::now() + self.invisible.saturating_sub(RENEW_AHEAD);
                        true
                    }
                    Ok(None) => false,
                    Err(error) => {
                        tracing::debug!(?key, error, "renewing a delivery failed; next tick");
                        true
                    }
                }
            };
            if !keep {
                *guard = State::Gone;
                drop(guard);
                self.forget(&key, &tracked);
            }
        }
    }

    /// Removes `tracked` from the table, unless `key` was tracked anew meanwhile.
    fn forget(&self, key: &DeliveryKey, tracked: &Arc<Tracked>) {
        let mut table = self.lock();
        if table
            .get(key)
            .is_some_and(|current| Arc::ptr_eq(current, tracked))
        {
            table.remove(key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<DeliveryKey, Arc<Tracked>>> {
        lock(&self.tracked)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Answers every renewal with `answer`, counting the calls.
    struct Answer {
        answer: Result<Option<u64>, String>,
        calls: Mutex<u32>,
    }

    impl Answer {
        fn new(answer: Result<Option<u64>, String>) -> Answer {
            Answer {
                answer,
                calls: Mutex::new(0),
            }
        }

        fn calls(&self) -> u32 {
            *lock(&self.calls)
        }
    }

    impl Renew for Answer {
        async fn renew(
            &self,
            _: &DeliveryKey,
            _: &Delivery,
            _: Duration,
        ) -> Result<Option<u64>, String> {
            *lock(&self.calls) += 1;
            self.answer.clone()
        }
    }

    pub(crate) fn key(queue_offset: i64) -> DeliveryKey {
        DeliveryKey {
            broker_group: "broker-a".into(),
            queue_id: 0,
            queue_offset,
            first_receipt: 1,
        }
    }

    pub(crate) fn delivery(client_id: Option<&str>) -> Delivery {
        Delivery {
            consumer_group: "g".into(),
            topic: "t".into(),
            client_id: client_id.map(str::to_owned),
            receipt: 1,
        }
    }

    const INVISIBLE: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_delivery_is_extended_ahead_of_its_end_and_its_consumer_gets_the_new_receipt() {
        let renewals = Renewals::new(INVISIBLE);
        let clients = Clients::default();
        let renew = Answer::new(Ok(Some(7)));
        renewals.track(key(0), delivery(None));
        renewals.renew_due(&renew, &clients).await;
        assert_eq!(renew.calls(), 0, "not due yet");
        tokio::time::advance(INVISIBLE - RENEW_AHEAD).await;
        renewals.renew_due(&renew, &clients).await;
        assert_eq!(renew.calls(), 1);
        assert_eq!(renewals.take(&key(0)).await, Some(7), "the renewed receipt");
        assert_eq!(
            renewals.take(&key(0)).await,
            Some(7),
            "a consumer retrying its call gets it again"
        );
        tokio::time::advance(INVISIBLE - Duration::from_secs(1)).await;
        renewals.renew_due(&renew, &clients).await;
        assert_eq!(renew.calls(), 1, "a taken delivery is not renewed");
        assert_eq!(
            renewals.take(&key(0)).await,
            Some(7),
            "still within its time"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        renewals.renew_due(&renew, &clients).await;
        assert_eq!(
            renewals.take(&key(0)).await,
            None,
            "forgotten once its time is over"
        );
        assert_eq!(renew.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn renewing_stops_when_the_delivery_is_gone_its_client_left_or_time_is_up() {
        let renewals = Renewals::new(INVISIBLE);
        let clients = Arc::new(Clients::default());

        renewals.track(key(0), delivery(None));
        tokio::time::advance(INVISIBLE).await;
        renewals.renew_due(&Answer::new(Ok(None)), &clients).await;
        assert_eq!(renewals.take(&key(0)).await, None, "no longer in flight");

        renewals.track(key(1), delivery(None));
        tokio::time::advance(INVISIBLE).await;
        let unreachable = Answer::new(Err("no leader".into()));
        renewals.renew_due(&unreachable, &clients).await;
        assert_eq!(
            renewals.take(&key(1)).await,
            Some(1),
            "kept, tried again later"
        );

        let (commands, _stream) = tokio::sync::mpsc::channel(1);
        let registration = clients.open(Some("c".into()), commands);
        renewals.track(key(2), delivery(Some("c")));
        tokio::time::advance(INVISIBLE).await;
        let renew = Answer::new(Ok(Some(9)));
        renewals.renew_due(&renew, &clients).await;
        assert_eq!(renew.calls(), 1, "its client is here");
        drop(registration);
        tokio::time::advance(INVISIBLE).await;
        renewals.renew_due(&renew, &clients).await;
        assert_eq!(renew.calls(), 1, "its client left");
        assert_eq!(renewals.take(&key(2)).await, None);

        renewals.track(key(3), delivery(None));
        tokio::time::advance(RENEW_MAX).await;
        renewals.renew_due(&renew, &clients).await;
        assert_eq!(renew.calls(), 1, "renewed long enough");
        assert_eq!(renewals.take(&key(3)).await, None);
    }
}
