//! Routes in the 5.x form: a topic's queues over every broker group that serves it, each
//! naming this endpoint as its broker's address (calls reach the leader through it), and the
//! queues a 5.x push consumer receives from.
//!
//! Invariant: a queue's id is its id in its broker group, and its broker's name is the
//! group's name, so (broker name, id) names one rocketraft queue.

use std::net::SocketAddr;

use rocketraft_client::route::GroupQueues;
use rocketraft_client::route::TopicRoute;
use rocketraft_domain::perm::PERM_READ;
use rocketraft_domain::perm::PERM_WRITE;
use rocketraft_proto::common::TopicMessageType;

use crate::pb;

/// The 5.x message types a topic of type `kind` takes (RocketMQ: MIXED takes all four).
pub fn accepted_types(kind: TopicMessageType) -> &'static [pb::MessageType] {
    match kind {
        TopicMessageType::Normal => &[pb::MessageType::Normal],
        TopicMessageType::Fifo => &[pb::MessageType::Fifo],
        TopicMessageType::Delay => &[pb::MessageType::Delay],
        TopicMessageType::Transaction => &[pb::MessageType::Transaction],
        TopicMessageType::Mixed | TopicMessageType::Unspecified => &[
            pb::MessageType::Normal,
            pb::MessageType::Fifo,
            pb::MessageType::Delay,
            pb::MessageType::Transaction,
        ],
    }
}

/// Whether every group of `route` takes messages of type `kind` (a send may go to any).
pub fn takes(route: &TopicRoute, kind: pb::MessageType) -> bool {
    route
        .groups
        .iter()
        .all(|group| accepted_types(group.message_type).contains(&kind))
}

/// The queues of `route`, each reached at `endpoints`.
pub fn message_queues(
    route: &TopicRoute,
    topic: &pb::Resource,
    endpoints: &pb::Endpoints,
) -> Vec<pb::MessageQueue> {
    route
        .groups
        .iter()
        .flat_map(|group| {
            let queues = group.read_queue_count.max(group.write_queue_count);
            (0..queues).map(move |id| message_queue(group, id, topic, endpoints))
        })
        .collect()
}

/// The queues a push consumer of `route` receives from: every readable one.
pub fn assignments(
    route: &TopicRoute,
    topic: &pb::Resource,
    endpoints: &pb::Endpoints,
) -> Vec<pb::Assignment> {
    message_queues(route, topic, endpoints)
        .into_iter()
        .filter(|queue| {
            matches!(
                queue.permission(),
                pb::Permission::Read | pb::Permission::ReadWrite
            )
        })
        .map(|queue| pb::Assignment {
            message_queue: Some(queue),
        })
        .collect()
}

fn message_queue(
    group: &GroupQueues,
    id: u32,
    topic: &pb::Resource,
    endpoints: &pb::Endpoints,
) -> pb::MessageQueue {
    let readable = id < group.read_queue_count && group.perm & PERM_READ != 0;
    let writable = id < group.write_queue_count && group.perm & PERM_WRITE != 0;
    let permission = match (readable, writable) {
        (true, true) => pb::Permission::ReadWrite,
        (true, false) => pb::Permission::Read,
        (false, true) => pb::Permission::Write,
        (false, false) => pb::Permission::None,
    };
    pb::MessageQueue {
        topic: Some(topic.clone()),
        id: id as i32,
        permission: permission as i32,
        broker: Some(pb::Broker {
            name: group.group.clone(),
            // RocketMQ's id of a group's master: the group's leader serves every call.
            id: 0,
            endpoints: Some(endpoints.clone()),
        }),
        accept_message_types: accepted_types(group.message_type)
            .iter()
            .map(|kind| *kind as i32)
            .collect(),
    }
}

/// The endpoints a client reached this service at: what it says it used, else the address
/// its connection came in on.
pub fn access_point(stated: Option<pb::Endpoints>, local: Option<SocketAddr>) -> pb::Endpoints {
    match stated {
        Some(endpoints) if !endpoints.addresses.is_empty() => endpoints,
        _ => {
            let scheme = match local {
                Some(SocketAddr::V6(_)) => pb::AddressScheme::IPv6,
                _ => pb::AddressScheme::IPv4,
            };
            pb::Endpoints {
                scheme: scheme as i32,
                addresses: local
                    .map(|addr| pb::Address {
                        host: addr.ip().to_string(),
                        port: i32::from(addr.port()),
                    })
                    .into_iter()
                    .collect(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, read: u32, write: u32, perm: u32) -> GroupQueues {
        GroupQueues {
            group: name.into(),
            leader: None,
            nodes: Vec::new(),
            read_queue_count: read,
            write_queue_count: write,
            perm,
            message_type: TopicMessageType::Mixed,
        }
    }

    #[test]
    fn queues_accept_their_topics_type_and_a_send_must_suit_every_group() {
        let typed = |name: &str, kind: TopicMessageType| GroupQueues {
            message_type: kind,
            ..group(name, 1, 1, PERM_READ | PERM_WRITE)
        };
        let fifo = TopicRoute::new("T".into(), vec![typed("a", TopicMessageType::Fifo)]);
        let endpoints = access_point(None, Some("127.0.0.1:8081".parse().expect("an address")));
        let queues = message_queues(&fifo, &topic(), &endpoints);
        assert_eq!(
            queues[0].accept_message_types,
            [pb::MessageType::Fifo as i32]
        );
        assert!(takes(&fifo, pb::MessageType::Fifo));
        assert!(!takes(&fifo, pb::MessageType::Normal));
        let split = TopicRoute::new(
            "T".into(),
            vec![
                typed("a", TopicMessageType::Mixed),
                typed("b", TopicMessageType::Delay),
            ],
        );
        assert!(takes(&split, pb::MessageType::Delay));
        assert!(
            !takes(&split, pb::MessageType::Normal),
            "group b refuses it"
        );
    }

    fn topic() -> pb::Resource {
        pb::Resource {
            resource_namespace: String::new(),
            name: "T".into(),
        }
    }

    #[test]
    fn queues_carry_their_group_and_permission() {
        let route = TopicRoute::new(
            "T".into(),
            vec![
                group("b", 2, 1, PERM_READ | PERM_WRITE),
                group("a", 1, 1, PERM_READ),
            ],
        );
        let endpoints = access_point(None, Some("127.0.0.1:8081".parse().expect("an address")));
        let queues = message_queues(&route, &topic(), &endpoints);
        let described: Vec<(String, i32, pb::Permission)> = queues
            .iter()
            .map(|queue| {
                let broker = queue.broker.as_ref().expect("a broker");
                (broker.name.clone(), queue.id, queue.permission())
            })
            .collect();
        assert_eq!(
            described,
            [
                ("a".into(), 0, pb::Permission::Read),
                ("b".into(), 0, pb::Permission::ReadWrite),
                ("b".into(), 1, pb::Permission::Read),
            ]
        );
        assert!(
            queues
                .iter()
                .all(|queue| queue.accept_message_types.len() == 4)
        );
        let address = &queues[0]
            .broker
            .as_ref()
            .expect("a broker")
            .endpoints
            .as_ref()
            .expect("endpoints")
            .addresses[0];
        assert_eq!((address.host.as_str(), address.port), ("127.0.0.1", 8081));
        assert_eq!(assignments(&route, &topic(), &endpoints).len(), 3);
    }

    #[test]
    fn a_write_only_queue_is_not_assigned() {
        let route = TopicRoute::new("T".into(), vec![group("a", 1, 2, PERM_WRITE | PERM_READ)]);
        let endpoints = access_point(None, None);
        let queues = message_queues(&route, &topic(), &endpoints);
        assert_eq!(queues[1].permission(), pb::Permission::Write);
        assert_eq!(assignments(&route, &topic(), &endpoints).len(), 1);
    }
}
