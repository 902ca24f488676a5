//! The leader's consumer registry: members from heartbeats, sorted, with disagreeing
//! subscriptions detected; silent members expire; followers refuse; a new leader rebuilds
//! the registry from heartbeats.

use std::time::Duration;

use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_proto::response_code;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);

fn heartbeat(client_id: &str, expression: &str) -> pb::HeartbeatRequest {
    pb::HeartbeatRequest {
        client_id: client_id.into(),
        group: "billing".into(),
        subscriptions: vec![pb::SubscriptionData {
            topic: "Orders".into(),
            expression: expression.into(),
            expression_type: String::new(),
        }],
        client: None,
    }
}

fn list() -> pb::ListConsumersRequest {
    pb::ListConsumersRequest {
        group: "billing".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_heartbeats_the_leader_should_track_members_and_forget_the_silent()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0601, |config| config.client_expiry_ms = 600).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    let mut watch = client
        .watch_consumers(pb::WatchConsumersRequest {
            group: "billing".into(),
        })
        .await?
        .into_inner();
    client.heartbeat(heartbeat("client-b", "TagA")).await?;
    let changed = tokio::time::timeout(TIMEOUT, watch.message()).await??;
    assert_eq!(
        changed.map(|c| c.group).as_deref(),
        Some("billing"),
        "join pushed"
    );
    client.heartbeat(heartbeat("client-a", "TagA")).await?;
    let members = client.list_consumers(list()).await?.into_inner();
    let ids: Vec<&str> = members
        .members
        .iter()
        .map(|m| m.client_id.as_str())
        .collect();
    assert_eq!(ids, ["client-a", "client-b"]);
    assert!(members.subscriptions_consistent);

    client.heartbeat(heartbeat("client-c", "TagB")).await?;
    assert!(
        !client
            .list_consumers(list())
            .await?
            .into_inner()
            .subscriptions_consistent,
        "TagA vs TagB"
    );

    info!("--- a SQL92 subscription is listed with its type; a bad one is refused");
    let sql = |expression: &str| {
        let mut request = heartbeat("client-d", expression);
        request.subscriptions[0].expression_type = "SQL92".into();
        request
    };
    client.heartbeat(sql("price > 10")).await?;
    let members = client.list_consumers(list()).await?.into_inner();
    let listed = &members.members[3].subscriptions[0];
    assert_eq!(
        (listed.expression.as_str(), listed.expression_type.as_str()),
        ("price > 10", "SQL92")
    );
    let refused = client
        .heartbeat(sql("price >"))
        .await
        .expect_err("bad SQL92");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("at byte 7"),
        "{}",
        refused.message()
    );
    client
        .unregister_consumer(pb::UnregisterConsumerRequest {
            group: "billing".into(),
            client_id: "client-d".into(),
        })
        .await?;

    let follower = group.a_follower(leader);
    let watch_refused = group
        .client(follower)
        .await?
        .watch_consumers(pb::WatchConsumersRequest {
            group: "billing".into(),
        })
        .await
        .expect_err("follower");
    assert_eq!(response_code(&watch_refused), Some(ResponseCode::NotLeader));
    let refused = group
        .client(follower)
        .await?
        .heartbeat(heartbeat("client-a", "TagA"))
        .await
        .expect_err("follower");
    assert_eq!(response_code(&refused), Some(ResponseCode::NotLeader));
    let bad = client
        .heartbeat(heartbeat("", "TagA"))
        .await
        .expect_err("no client id");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);

    info!("--- only client-a keeps heartbeating; the others expire");
    wait_for("b and c to expire", TIMEOUT, || {
        let mut client = client.clone();
        async move {
            client.heartbeat(heartbeat("client-a", "TagA")).await.ok()?;
            let members = client.list_consumers(list()).await.ok()?.into_inner();
            (members.members.len() == 1 && members.subscriptions_consistent).then_some(())
        }
    })
    .await?;

    info!(
        leader,
        "--- a new leader starts empty and fills from heartbeats"
    );
    let new_leader = group.isolate_leader(leader, TIMEOUT).await?;
    let mut new_client = group.client(new_leader).await?;
    assert!(
        new_client
            .list_consumers(list())
            .await?
            .into_inner()
            .members
            .is_empty()
    );
    new_client.heartbeat(heartbeat("client-a", "TagA")).await?;
    assert_eq!(
        new_client
            .list_consumers(list())
            .await?
            .into_inner()
            .members
            .len(),
        1
    );

    info!("--- healed, the old leader steps down and ends its watch streams");
    group.faults.heal();
    let ended = loop {
        match tokio::time::timeout(TIMEOUT, watch.message()).await? {
            Ok(Some(_)) => continue,
            Ok(None) => anyhow::bail!("the watch ended without saying why"),
            Err(status) => break status,
        }
    };
    assert_eq!(
        response_code(&ended),
        Some(ResponseCode::NotLeader),
        "{ended}"
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_member_leaving_the_watch_should_tell_at_once() -> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0602, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    client.heartbeat(heartbeat("client-a", "TagA")).await?;
    client.heartbeat(heartbeat("client-b", "TagA")).await?;
    let mut watch = client
        .watch_consumers(pb::WatchConsumersRequest {
            group: "billing".into(),
        })
        .await?
        .into_inner();
    let leave = pb::UnregisterConsumerRequest {
        client_id: "client-a".into(),
        group: "billing".into(),
    };
    client.unregister_consumer(leave).await?;
    let changed = tokio::time::timeout(TIMEOUT, watch.message()).await??;
    assert_eq!(changed.map(|c| c.group).as_deref(), Some("billing"));
    let members = client.list_consumers(list()).await?.into_inner().members;
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].client_id, "client-b");
    group.shutdown().await;
    Ok(())
}
