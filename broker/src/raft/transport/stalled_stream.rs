//! Ends a replication stream that stopped advancing, so that openraft starts the next one.
//!
//! openraft (0.10.0-alpha.37) hands a running replication stream its next payload only once
//! the stream has sent everything up to the leader's last entry. A stream left running when
//! the leader reset the follower's progress (the follower restarted with a shorter log) may
//! be behind the leader's purge point by the time it reads again: every read of the log comes
//! back empty, so it sends one entry-less request after another with the same previous entry,
//! never catches up, and the payload the leader decided on instead (a snapshot, then the
//! entries after it) is never sent. The follower stays where it is for as long as that leader
//! leads, answering every request (found by the group simulation, seed 286).
//!
//! Invariant: the stream passes every request on unchanged, and ends right after the second of
//! two entry-less requests in a row with the same previous entry; openraft then opens the
//! next stream with the payload it published last. A healthy stream sends two such requests
//! in a row only when the commit index moved twice without a new entry; ending it then costs
//! one new stream.

use std::pin::Pin;
use std::task::Context;
use std::task::Poll;

use futures::Stream;
use futures::StreamExt;
use openraft::RaftTypeConfig;
use openraft::raft::AppendEntriesRequest;
use openraft::type_config::alias::LogIdOf;

/// `requests`, ending once it stalled (see the module comment).
pub fn until_stalled<C, S>(requests: S) -> UntilStalled<C, S>
where
    C: RaftTypeConfig,
    S: Stream<Item = AppendEntriesRequest<C>> + Unpin,
{
    UntilStalled {
        requests,
        last_entry_less_prev: None,
        stalled: false,
    }
}

/// See [`until_stalled`].
pub struct UntilStalled<C: RaftTypeConfig, S> {
    requests: S,
    /// The previous entry of the last request, if that request carried no entry.
    last_entry_less_prev: Option<Option<LogIdOf<C>>>,
    /// The last request passed on was the second entry-less one with the same previous entry.
    stalled: bool,
}

impl<C, S> Stream for UntilStalled<C, S>
where
    C: RaftTypeConfig,
    S: Stream<Item = AppendEntriesRequest<C>> + Unpin,
    LogIdOf<C>: Unpin,
{
    type Item = AppendEntriesRequest<C>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Not polled again once stalled: the next request is never generated, so none is
        // taken for sent that was not.
        if this.stalled {
            return Poll::Ready(None);
        }
        let request = std::task::ready!(this.requests.poll_next_unpin(cx));
        if let Some(request) = &request {
            let entry_less_prev = request
                .entries
                .is_empty()
                .then(|| request.prev_log_id.clone());
            this.stalled =
                entry_less_prev.is_some() && entry_less_prev == this.last_entry_less_prev;
            this.last_entry_less_prev = entry_less_prev;
        }
        Poll::Ready(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::types::TypeConfig;
    use openraft::Vote;
    use openraft::entry::RaftEntry;
    use openraft::type_config::alias::EntryOf;

    type Request = AppendEntriesRequest<TypeConfig>;

    fn log_id(index: u64) -> LogIdOf<TypeConfig> {
        openraft::LogId::new_term_index(1, index)
    }

    fn request(prev: u64, entries: u64) -> Request {
        Request {
            vote: Vote::new_committed(1, 1),
            prev_log_id: Some(log_id(prev)),
            leader_commit: None,
            entries: (prev + 1..=prev + entries)
                .map(|index| EntryOf::<TypeConfig>::new_blank(log_id(index)))
                .collect(),
        }
    }

    fn passed(requests: Vec<Request>) -> Vec<(u64, usize)> {
        let stream = until_stalled(futures::stream::iter(requests));
        futures::executor::block_on(stream.collect::<Vec<_>>())
            .iter()
            .map(|r| (r.prev_log_id.map_or(0, |l| l.index), r.entries.len()))
            .collect()
    }

    #[test]
    fn a_stream_ends_after_the_second_entry_less_request_with_the_same_previous_entry() {
        let stale = vec![request(108, 0), request(108, 0), request(108, 0)];
        assert_eq!(passed(stale), [(108, 0), (108, 0)]);
    }

    #[test]
    fn a_stream_that_advances_passes_every_request() {
        let healthy = vec![
            request(10, 3),
            request(13, 0),
            request(13, 2),
            request(15, 0),
            request(15, 1),
            request(16, 0),
        ];
        assert_eq!(
            passed(healthy),
            [(10, 3), (13, 0), (13, 2), (15, 0), (15, 1), (16, 0)]
        );
    }
}
