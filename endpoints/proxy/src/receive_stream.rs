//! A receive's answer as the stream its call returns: the responses in order, and the
//! deliveries among them that this endpoint auto-renews ([`Tracking`]).
//!
//! Invariant: a delivery is renewed past its first invisible time only if its receive's
//! stream handed every response to the transport. A stream dropped before that (the client's
//! call ended first: its deadline, a reset, a disconnect) abandons its deliveries, which then
//! come back after one invisible time, instead of being kept invisible for hours for a
//! consumer that never got them.

use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::task::Poll;

use tokio_stream::Stream;

use crate::pb;
use crate::renewals::Delivery;
use crate::renewals::DeliveryKey;
use crate::renewals::Renewals;

/// The auto-renewed deliveries of one receive; dropped unsettled, it abandons them.
pub struct Tracking {
    renewals: Arc<Renewals>,
    keys: Vec<DeliveryKey>,
}

impl Tracking {
    pub fn new(renewals: Arc<Renewals>) -> Tracking {
        Tracking {
            renewals,
            keys: Vec::new(),
        }
    }

    /// Starts renewing `delivery`, tentatively until [`Tracking::settle`].
    pub fn track(&mut self, key: DeliveryKey, delivery: Delivery) {
        self.renewals.track(key.clone(), delivery);
        self.keys.push(key);
    }

    /// The consumer was handed its deliveries: they stay renewed.
    fn settle(mut self) {
        self.keys.clear();
    }
}

impl Drop for Tracking {
    fn drop(&mut self) {
        for key in &self.keys {
            self.renewals.abandon(key);
        }
    }
}

/// The responses of one receive, then the end of its stream.
pub struct ReceiveStream {
    responses: std::vec::IntoIter<pb::ReceiveMessageResponse>,
    tracking: Option<Tracking>,
}

impl ReceiveStream {
    pub fn new(responses: Vec<pb::ReceiveMessageResponse>, tracking: Option<Tracking>) -> Self {
        ReceiveStream {
            responses: responses.into_iter(),
            tracking,
        }
    }
}

impl Stream for ReceiveStream {
    type Item = Result<pb::ReceiveMessageResponse, tonic::Status>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.responses.next() {
            Some(response) => Poll::Ready(Some(Ok(response))),
            None => {
                if let Some(tracking) = self.tracking.take() {
                    tracking.settle();
                }
                Poll::Ready(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;
    use crate::renewals::tests::delivery;
    use crate::renewals::tests::key;

    fn tracked(renewals: &Arc<Renewals>, queue_offset: i64) -> Tracking {
        let mut tracking = Tracking::new(renewals.clone());
        tracking.track(key(queue_offset), delivery(None));
        tracking
    }

    fn responses() -> Vec<pb::ReceiveMessageResponse> {
        vec![pb::ReceiveMessageResponse { content: None }; 2]
    }

    #[tokio::test]
    async fn a_stream_read_to_its_end_keeps_its_deliveries_renewed_one_dropped_before_does_not() {
        let renewals = Arc::new(Renewals::new(std::time::Duration::from_secs(30)));
        let read = ReceiveStream::new(responses(), Some(tracked(&renewals, 0)));
        assert_eq!(read.collect::<Vec<_>>().await.len(), 2);
        assert_eq!(renewals.take(&key(0)).await, Some(1), "still renewed");

        let mut cut = ReceiveStream::new(responses(), Some(tracked(&renewals, 1)));
        assert!(cut.next().await.is_some());
        drop(cut);
        assert_eq!(renewals.take(&key(1)).await, None, "abandoned");
    }
}
