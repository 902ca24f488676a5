//! The JSON bodies of a nameserver's 4.x answers, from rocketraft's routes: `TopicRouteData`,
//! `ClusterInfo` and `TopicList`, written as the 4.x clients parse them: compact (Go splits
//! `brokerAddrs` by hand), keys quoted, fields in fastjson's sorted order.
//!
//! Invariant: a group's leader is broker id 0 (`MixAll.MASTER_ID`, the only one producers
//! send to) and its other nodes are ids 1..n: first those that registered in the group's
//! current term, then the others (which may be down: a node that missed the latest election
//! stays routed until it expires), each in node id order. Broker id 1, where a pull reply
//! sends consumers, is so a node known to be up whenever there is one. A group whose leader
//! is not known has no id 0: producers skip it until a route names one, consumers read
//! through its followers meanwhile.

use std::collections::BTreeMap;

use rocketraft_proto::nameserver as pb;
use serde::Serialize;

/// `TopicRouteData`: where a topic's queues are.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicRouteData {
    broker_datas: Vec<BrokerData>,
    /// Always empty: rocketraft has no filter servers, but old clients need the field.
    filter_server_table: BTreeMap<String, Vec<String>>,
    queue_datas: Vec<QueueData>,
}

/// `BrokerData`: one broker group's nodes by broker id.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerData {
    broker_addrs: BTreeMap<u64, String>,
    broker_name: String,
    cluster: String,
}

/// `QueueData`: a topic's queues in one broker group.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct QueueData {
    broker_name: String,
    perm: u32,
    read_queue_nums: u32,
    /// The field's name up to 4.9.2; `topicSysFlag` after. Both are sent, both are 0.
    topic_syn_flag: u32,
    topic_sys_flag: u32,
    write_queue_nums: u32,
}

/// `ClusterInfo`: every broker group, and the groups of each cluster.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    broker_addr_table: BTreeMap<String, BrokerData>,
    cluster_addr_table: BTreeMap<String, Vec<String>>,
}

/// `TopicList`: every topic a group serves.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicList {
    topic_list: Vec<String>,
}

impl BrokerData {
    fn of(group: &pb::GroupRoute) -> BrokerData {
        let leader = group.leader_id;
        // The route's map has no order: ids follow node ids, current nodes first.
        let by_node_id: BTreeMap<(bool, u64), &String> = group
            .nodes
            .iter()
            .map(|(id, addr)| ((!group.current_node_ids.contains(id), *id), addr))
            .collect();
        let followers = by_node_id
            .into_iter()
            .filter(|((_, id), _)| Some(*id) != leader);
        let leader_addr = leader.and_then(|id| group.nodes.get(&id));
        let broker_addrs = leader_addr
            .map(|addr| (0, addr.clone()))
            .into_iter()
            .chain(
                followers
                    .enumerate()
                    .map(|(index, (_, addr))| (index as u64 + 1, addr.to_owned())),
            )
            .collect();
        BrokerData {
            broker_addrs,
            broker_name: group.group.clone(),
            cluster: group.cluster.clone(),
        }
    }
}

impl TopicRouteData {
    pub fn of(route: &pb::TopicRoute) -> TopicRouteData {
        TopicRouteData {
            broker_datas: route.groups.iter().map(BrokerData::of).collect(),
            filter_server_table: BTreeMap::new(),
            queue_datas: route
                .queues
                .iter()
                .map(|queues| QueueData {
                    broker_name: queues.group.clone(),
                    perm: queues.perm,
                    read_queue_nums: queues.read_queue_count,
                    topic_syn_flag: 0,
                    topic_sys_flag: 0,
                    write_queue_nums: queues.write_queue_count,
                })
                .collect(),
        }
    }
}

impl ClusterInfo {
    pub fn of(info: &pb::ClusterInfo) -> ClusterInfo {
        let mut cluster_addr_table: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for group in &info.groups {
            cluster_addr_table
                .entry(group.cluster.clone())
                .or_default()
                .push(group.group.clone());
        }
        ClusterInfo {
            broker_addr_table: info
                .groups
                .iter()
                .map(|group| (group.group.clone(), BrokerData::of(group)))
                .collect(),
            cluster_addr_table,
        }
    }
}

impl TopicList {
    pub fn of(list: pb::TopicList) -> TopicList {
        TopicList {
            topic_list: list.topics,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, leader: Option<u64>) -> pb::GroupRoute {
        pb::GroupRoute {
            cluster: "DefaultCluster".into(),
            group: name.into(),
            nodes: [
                (1, "10.0.0.1:7001"),
                (2, "10.0.0.2:7001"),
                (3, "10.0.0.3:7001"),
            ]
            .into_iter()
            .map(|(id, addr)| (id, addr.to_owned()))
            .collect(),
            leader_id: leader,
            leader_addr: String::new(),
            term: 4,
            current_node_ids: vec![1, 2, 3],
        }
    }

    #[test]
    fn the_leader_is_broker_id_zero_and_the_json_is_compact_and_sorted() {
        let route = pb::TopicRoute {
            topic: "T".into(),
            queues: vec![pb::QueueData {
                group: "broker-a".into(),
                read_queue_count: 4,
                write_queue_count: 4,
                perm: 6,
                message_type: 0,
            }],
            groups: vec![group("broker-a", Some(2))],
        };
        let json = serde_json::to_string(&TopicRouteData::of(&route)).expect("json");
        assert_eq!(
            json,
            r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.2:7001","1":"10.0.0.1:7001","2":"10.0.0.3:7001"},"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSynFlag":0,"topicSysFlag":0,"writeQueueNums":4}]}"#
        );
    }

    #[test]
    fn a_node_that_missed_the_latest_election_comes_after_the_current_ones() {
        let after_a_leader_kill = pb::GroupRoute {
            current_node_ids: vec![2, 3],
            ..group("broker-a", Some(3))
        };
        let data = BrokerData::of(&after_a_leader_kill);
        let addrs: Vec<(u64, &str)> = data
            .broker_addrs
            .iter()
            .map(|(id, addr)| (*id, addr.as_str()))
            .collect();
        assert_eq!(
            addrs,
            [
                (0, "10.0.0.3:7001"),
                (1, "10.0.0.2:7001"),
                (2, "10.0.0.1:7001")
            ],
            "broker id 1, where pulls go, is a node known to be up"
        );
    }

    #[test]
    fn a_group_without_a_known_leader_has_no_broker_id_zero() {
        let data = BrokerData::of(&group("broker-a", None));
        assert_eq!(
            data.broker_addrs.keys().copied().collect::<Vec<_>>(),
            [1, 2, 3]
        );
    }

    #[test]
    fn cluster_info_lists_each_cluster_s_groups() {
        let info = pb::ClusterInfo {
            groups: vec![group("broker-a", Some(1)), group("broker-b", None)],
        };
        let json = serde_json::to_value(ClusterInfo::of(&info)).expect("json");
        assert_eq!(
            json["clusterAddrTable"]["DefaultCluster"],
            serde_json::json!(["broker-a", "broker-b"])
        );
        assert_eq!(
            json["brokerAddrTable"]["broker-a"]["brokerAddrs"]["0"],
            "10.0.0.1:7001"
        );
    }
}
