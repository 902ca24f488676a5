//! RocketMQ 4.x remoting against a real cluster (a nameserver and two 3-node broker groups on
//! loopback): the nameserver answers 4.x requests on its own port, beside gRPC, each in the
//! serialize type it was sent in, with every group's leader as broker id 0.

use std::time::Duration;

use anyhow::Context;
use futures::SinkExt;
use futures::StreamExt;
use rocketraft_remoting::ExtFields;
use rocketraft_remoting::RemotingCodec;
use rocketraft_remoting::RemotingCommand;
use rocketraft_remoting::SerializeType;
use rocketraft_remoting::codes::request;
use rocketraft_remoting::codes::response;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

const TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "Orders";

/// A 4.x client's connection, as the Java client opens it: plain TCP, remoting frames.
struct RemotingClient {
    frames: Framed<TcpStream, RemotingCodec>,
    next_opaque: i32,
}

impl RemotingClient {
    async fn connect(addr: &str) -> anyhow::Result<RemotingClient> {
        let stream = TcpStream::connect(addr).await?;
        Ok(RemotingClient {
            frames: Framed::new(stream, RemotingCodec),
            next_opaque: 0,
        })
    }

    /// Sends request `code` with `fields` in `serialize_type`; returns its reply.
    async fn call(
        &mut self,
        code: i32,
        fields: &[(&str, &str)],
        serialize_type: SerializeType,
    ) -> anyhow::Result<RemotingCommand> {
        self.next_opaque += 1;
        let mut ext_fields = ExtFields::new();
        for (name, value) in fields {
            ext_fields.insert(*name, *value);
        }
        let request = RemotingCommand {
            code,
            version: 409,
            opaque: self.next_opaque,
            ext_fields,
            serialize_type,
            ..RemotingCommand::default()
        };
        self.frames.send(request).await?;
        let reply = tokio::time::timeout(TIMEOUT, self.frames.next())
            .await
            .context("no reply in time")?
            .context("the connection closed")??;
        anyhow::ensure!(reply.is_response(), "not a reply: {reply:?}");
        anyhow::ensure!(
            reply.opaque == self.next_opaque,
            "reply to {} for {}",
            reply.opaque,
            self.next_opaque
        );
        Ok(reply)
    }

    /// The JSON body of a successful reply to `code`.
    async fn json(&mut self, code: i32, fields: &[(&str, &str)]) -> anyhow::Result<Value> {
        let reply = self.call(code, fields, SerializeType::Json).await?;
        anyhow::ensure!(reply.code == response::SUCCESS, "{reply:?}");
        Ok(serde_json::from_slice(&reply.body)?)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_topic_the_nameserver_should_route_4x_clients_to_each_leader_as_broker_id_zero()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x4E4D_0001).await?;
    cluster.create_topic(TOPIC, 4).await?;
    cluster.wait_for_route(TOPIC).await?;
    let nameserver = cluster.nameservers()[0].clone();
    let mut client = RemotingClient::connect(&nameserver).await?;

    let mut leaders = Vec::new();
    for name in GROUPS {
        let group = cluster.group(name);
        leaders.push((name, group.addr(group.wait_for_leader(TIMEOUT).await?)));
    }
    let route = wait_for("a route naming both leaders as id 0", TIMEOUT, || {
        let (nameserver, leaders) = (nameserver.clone(), leaders.clone());
        async move {
            let mut client = RemotingClient::connect(&nameserver).await.ok()?;
            let route = client
                .json(request::GET_ROUTEINFO_BY_TOPIC, &[("topic", TOPIC)])
                .await
                .ok()?;
            let named = leaders.iter().all(|(name, leader)| {
                route["brokerDatas"].as_array().is_some_and(|groups| {
                    groups.iter().any(|group| {
                        group["brokerName"] == *name
                            && group["brokerAddrs"]["0"] == leader.to_string()
                    })
                })
            });
            named.then_some(route)
        }
    })
    .await?;
    for group in route["brokerDatas"].as_array().context("brokerDatas")? {
        let addrs = group["brokerAddrs"].as_object().context("brokerAddrs")?;
        let ids: Vec<&str> = addrs.keys().map(String::as_str).collect();
        assert_eq!(ids, ["0", "1", "2"], "the leader, then its two followers");
    }
    let queues = route["queueDatas"].as_array().context("queueDatas")?;
    assert_eq!(queues.len(), 2, "{route}");
    for queue in queues {
        assert_eq!(queue["readQueueNums"], 4);
        assert_eq!(queue["writeQueueNums"], 4);
        assert_eq!(queue["perm"], 6, "readable and writable");
    }
    assert_eq!(route["filterServerTable"], serde_json::json!({}));

    // The same question in the binary header gets the same answer, in the binary header.
    let binary = client
        .call(
            request::GET_ROUTEINFO_BY_TOPIC,
            &[("topic", TOPIC)],
            SerializeType::RocketMq,
        )
        .await?;
    assert_eq!(binary.serialize_type, SerializeType::RocketMq);
    assert_eq!(serde_json::from_slice::<Value>(&binary.body)?, route);

    let missing = client
        .call(
            request::GET_ROUTEINFO_BY_TOPIC,
            &[("topic", "Missing")],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(missing.code, response::TOPIC_NOT_EXIST);
    assert!(
        missing
            .remark
            .as_deref()
            .is_some_and(|remark| remark.contains("Missing")),
        "{missing:?}"
    );

    let cluster_info = client.json(request::GET_BROKER_CLUSTER_INFO, &[]).await?;
    let clusters = cluster_info["clusterAddrTable"]
        .as_object()
        .context("clusterAddrTable")?;
    let mut groups: Vec<&str> = clusters
        .values()
        .flat_map(|groups| groups.as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    groups.sort_unstable();
    assert_eq!(groups, GROUPS);

    let topics = client
        .json(request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[])
        .await?;
    assert!(
        topics["topicList"]
            .as_array()
            .is_some_and(|topics| topics.iter().any(|topic| topic == TOPIC)),
        "{topics}"
    );

    let kv = client
        .call(
            request::GET_KV_CONFIG,
            &[("namespace", "ORDER_TOPIC_CONFIG"), ("key", TOPIC)],
            SerializeType::Json,
        )
        .await?;
    assert_eq!(kv.code, response::QUERY_NOT_FOUND, "no KV config is kept");

    let no_topic = client
        .call(request::GET_ROUTEINFO_BY_TOPIC, &[], SerializeType::Json)
        .await?;
    assert_eq!(no_topic.code, response::SYSTEM_ERROR);
    assert!(
        no_topic
            .remark
            .as_deref()
            .is_some_and(|remark| remark.contains("topic")),
        "the missing field is named: {no_topic:?}"
    );
    let unknown = client.call(9999, &[], SerializeType::Json).await?;
    assert_eq!(unknown.code, response::REQUEST_CODE_NOT_SUPPORTED);

    // gRPC still answers on the same port.
    let admin = rocketraft_client::admin::Admin::new(cluster.nameservers());
    assert_eq!(admin.topic_route(TOPIC).await?.groups.len(), 2);
    cluster.shutdown().await;
    Ok(())
}
