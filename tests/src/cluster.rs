//! A whole cluster for SDK and admin tests: one nameserver and two 3-node broker groups
//! (`broker-a`, `broker-b`) on loopback, topics created on demand.

use std::time::Duration;

use rocketraft_broker::config::BrokerConfig;
use rocketraft_client::route::RouteCache;
use rocketraft_domain::names::TRANSACTION_OP_TOPIC;
use rocketraft_nameserver::server::NameServer;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::TopicMessageType;

use crate::Extras;
use crate::TestGroup;
use crate::wait_for;

pub const GROUPS: [&str; 2] = ["broker-a", "broker-b"];
const TIMEOUT: Duration = Duration::from_secs(20);

pub struct TestCluster {
    pub nameserver: NameServer,
    pub groups: Vec<TestGroup>,
}

fn group_index(name: &str) -> usize {
    GROUPS
        .iter()
        .position(|group| *group == name)
        .unwrap_or_else(|| panic!("no test group {name}"))
}

impl TestCluster {
    /// Starts the nameserver and both groups (topic auto-creation off), waiting for their
    /// leaders.
    pub async fn start(seed: u64) -> anyhow::Result<TestCluster> {
        TestCluster::start_with(seed, |_| {}).await
    }

    /// [`TestCluster::start`] with every node's config changed by `tune`.
    pub async fn start_with(
        seed: u64,
        tune: impl Fn(&mut BrokerConfig),
    ) -> anyhow::Result<TestCluster> {
        TestCluster::start_with_extras(seed, tune, Extras::default()).await
    }

    /// [`TestCluster::start_with`], with `extras` for every node.
    pub async fn start_with_extras(
        seed: u64,
        tune: impl Fn(&mut BrokerConfig),
        extras: Extras,
    ) -> anyhow::Result<TestCluster> {
        let nameserver = crate::start_nameserver(NameServerConfig::default()).await?;
        let addr = nameserver.addr().to_string();
        let mut groups = Vec::new();
        for (index, name) in GROUPS.iter().enumerate() {
            let tune_group = |config: &mut BrokerConfig| {
                config.group = (*name).to_owned();
                config.namesrv = vec![addr.clone()];
                config.auto_create_topic = false;
                tune(config);
            };
            let group =
                TestGroup::start_with_extras(3, seed + index as u64, tune_group, extras.clone())
                    .await?;
            group.wait_for_leader(TIMEOUT).await?;
            groups.push(group);
        }
        Ok(TestCluster { nameserver, groups })
    }

    pub fn nameservers(&self) -> Vec<String> {
        vec![self.nameserver.addr().to_string()]
    }

    /// Creates `topic` with `queues` queues in both groups, through their leaders.
    pub async fn create_topic(&self, topic: &str, queues: u32) -> anyhow::Result<()> {
        self.create_typed_topic(topic, queues, TopicMessageType::Unspecified)
            .await
    }

    /// [`TestCluster::create_topic`] with the topic's message type.
    pub async fn create_typed_topic(
        &self,
        topic: &str,
        queues: u32,
        message_type: TopicMessageType,
    ) -> anyhow::Result<()> {
        for group in &self.groups {
            let leader = group.wait_for_leader(TIMEOUT).await?;
            let request = pb::CreateTopicRequest {
                topic: topic.into(),
                read_queue_count: queues,
                write_queue_count: queues,
                perm: 0,
                message_type: message_type as i32,
            };
            group.client(leader).await?.create_topic(request).await?;
        }
        Ok(())
    }

    /// Waits until the nameserver routes `topic` to both groups with their leaders.
    pub async fn wait_for_route(&self, topic: &str) -> anyhow::Result<()> {
        let routes = RouteCache::new(self.nameservers(), Duration::ZERO);
        wait_for("a route over both groups", TIMEOUT, || async {
            let route = routes.refresh(topic).await.ok()?;
            (route.groups.len() == GROUPS.len() && route.groups.iter().all(|g| g.leader.is_some()))
                .then_some(())
        })
        .await
    }

    pub fn group(&self, name: &str) -> &TestGroup {
        &self.groups[group_index(name)]
    }

    pub fn group_mut(&mut self, name: &str) -> &mut TestGroup {
        &mut self.groups[group_index(name)]
    }

    /// The commitlog offsets of a queue, read on the group's leader.
    pub async fn queue(&self, group: &str, topic: &str, queue_id: i32) -> anyhow::Result<Vec<i64>> {
        let group = self.group(group);
        let leader = group.wait_for_leader(TIMEOUT).await?;
        let request = pb::ReadConsumeQueueRequest {
            topic: topic.into(),
            queue_id,
            from_queue_offset: 0,
            max_units: 4096,
        };
        let units = group
            .client(leader)
            .await?
            .read_consume_queue(request)
            .await?
            .into_inner()
            .units;
        Ok(units.iter().map(|unit| unit.commit_log_offset).collect())
    }

    /// Transactions ended so far, whatever their end: one operation record each.
    pub async fn transactions_ended(&self) -> anyhow::Result<usize> {
        let mut ended = 0;
        for group in GROUPS {
            ended += self.queue(group, TRANSACTION_OP_TOPIC, 0).await?.len();
        }
        Ok(ended)
    }

    /// The sum over every running node of every group of a figure of its `NodeStatus`:
    /// `|status| status.pull_requests`, the pulls the cluster received so far.
    pub async fn node_total(
        &self,
        figure: impl Fn(&pb::NodeStatusResponse) -> u64,
    ) -> anyhow::Result<u64> {
        let mut total = 0;
        for group in &self.groups {
            for node in group.running() {
                total += figure(&group.status(node.node_id()).await?);
            }
        }
        Ok(total)
    }

    pub async fn shutdown(self) {
        for group in self.groups {
            group.shutdown().await;
        }
        self.nameserver.shutdown().await;
    }
}
