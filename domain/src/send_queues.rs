//! Which queue each message of a `Send` goes to. A request whose messages go to several queues
//! of its topic names one queue per message in `queue_ids`; a request to one queue leaves it
//! empty and names the queue in `queue_id`. The producer writes it ([`name_queues`]); the
//! broker reads it ([`message_queue_ids`]).

use rocketraft_proto::broker::SendRequest;

/// Sets `request`'s queue fields for messages going to `queue_ids`, in order: `queue_ids` is
/// sent only if they are not all one queue.
pub fn name_queues(request: &mut SendRequest, queue_ids: &[i32]) {
    let first = queue_ids.first().copied().unwrap_or_default();
    request.queue_id = first;
    request.queue_ids.clear();
    if queue_ids.iter().any(|&queue_id| queue_id != first) {
        request.queue_ids.extend_from_slice(queue_ids);
    }
}

/// The queue of each of `messages` messages, from a request's `queue_id` and (taken out of
/// it) `queue_ids`; `None` if `queue_ids` names neither one queue per message nor none.
pub fn message_queue_ids(queue_id: i32, queue_ids: Vec<i32>, messages: usize) -> Option<Vec<i32>> {
    match queue_ids.len() {
        0 => Some(vec![queue_id; messages]),
        named if named == messages => Some(queue_ids),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(request: &SendRequest, messages: usize) -> Option<Vec<i32>> {
        message_queue_ids(request.queue_id, request.queue_ids.clone(), messages)
    }

    #[test]
    fn one_queue_is_named_once_and_several_one_per_message() {
        let mut request = SendRequest::default();
        name_queues(&mut request, &[3, 3, 3]);
        assert_eq!((request.queue_id, request.queue_ids.len()), (3, 0));
        assert_eq!(read_back(&request, 3), Some(vec![3, 3, 3]));

        name_queues(&mut request, &[0, 1, 0, 2]);
        assert_eq!(request.queue_ids, [0, 1, 0, 2]);
        assert_eq!(read_back(&request, 4), Some(vec![0, 1, 0, 2]));
    }

    #[test]
    fn queue_ids_of_another_length_are_refused() {
        assert_eq!(message_queue_ids(0, vec![1, 2], 3), None);
        assert_eq!(message_queue_ids(0, vec![1, 2, 3, 4], 3), None);
        assert_eq!(message_queue_ids(5, Vec::new(), 2), Some(vec![5, 5]));
    }
}
