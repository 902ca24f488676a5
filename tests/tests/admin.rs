//! `mqadmin`'s operations against a nameserver and two 3-node groups: list the cluster,
//! create a topic everywhere or in one group, route it, and read its queue offsets.

use rocketraft_client::admin::Admin;
use rocketraft_client::admin::AdminError;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::admin::DeliveryResult;
use rocketraft_client::admin::GroupSettings;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::subscription::Subscription;
use rocketraft_domain::limits::RETRY_MAX_TIMES_MAX;
use rocketraft_proto::common::TopicMessageType;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use std::time::Duration;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_two_groups_admin_should_create_route_and_report_topics() -> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x5EED_0301).await?;
    let admin = Admin::new(cluster.nameservers());

    let info = wait_for("both groups with leaders", TIMEOUT, || async {
        let info = admin.cluster_info().await.ok()?;
        (info.groups.len() == 2
            && info
                .groups
                .iter()
                .all(|g| g.leader_id.is_some() && g.nodes.len() == 3))
        .then_some(info)
    })
    .await?;
    assert_eq!(
        info.groups
            .iter()
            .map(|g| g.group.as_str())
            .collect::<Vec<_>>(),
        GROUPS
    );

    assert!(matches!(
        admin.topic_route("Orders").await,
        Err(AdminError::NoRoute(_))
    ));

    info!("--- broker-status asks every node of a group for itself");
    let reports = admin.node_statuses("broker-a").await?;
    assert_eq!(
        reports.iter().map(|r| r.node_id).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let statuses: Vec<_> = reports
        .iter()
        .map(|report| report.status.as_ref().map_err(Clone::clone))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    assert!(statuses.iter().all(|status| status.group == "broker-a"));
    let leaders = statuses.iter().filter(|s| s.role == "leader").count();
    assert!(leaders <= 1, "{statuses:?}");
    assert!(statuses.iter().all(|status| status.voters.len() == 3));
    assert!(matches!(
        admin.node_statuses("broker-z").await,
        Err(AdminError::UnknownGroup(_))
    ));

    assert_eq!(admin.create_topic("Orders", 3, None).await?, GROUPS);
    assert_eq!(
        admin
            .create_typed_topic("Local", 1, TopicMessageType::Transaction, Some("broker-b"))
            .await?,
        vec!["broker-b"]
    );
    assert!(matches!(
        admin.create_topic("X", 1, Some("broker-z")).await,
        Err(AdminError::UnknownGroup(_))
    ));

    let route = wait_for("the route", TIMEOUT, || async {
        admin
            .topic_route("Orders")
            .await
            .ok()
            .filter(|route| route.queues.len() == 2)
    })
    .await?;
    assert!(route.queues.iter().all(|q| q.write_queue_count == 3));
    assert!(
        route
            .queues
            .iter()
            .all(|q| q.message_type() == TopicMessageType::Mixed),
        "created without a type: every type"
    );
    let local = wait_for("the typed topic's route", TIMEOUT, || async {
        admin
            .topic_route("Local")
            .await
            .ok()
            .filter(|route| !route.queues.is_empty())
    })
    .await?;
    assert_eq!(
        local
            .queues
            .iter()
            .map(|q| q.message_type())
            .collect::<Vec<_>>(),
        [TopicMessageType::Transaction]
    );
    let topics = wait_for("both topics listed", TIMEOUT, || async {
        admin
            .topic_list()
            .await
            .ok()
            .filter(|topics| topics.len() == 2)
    })
    .await?;
    assert_eq!(topics, vec!["Local".to_owned(), "Orders".to_owned()]);

    let producer = Producer::builder(cluster.nameservers(), "admin-test").build()?;
    for i in 0..12 {
        producer
            .send(Message::new("Orders", format!("m{i}")))
            .await?;
    }
    let status = admin.topic_status("Orders").await?;
    assert_eq!(status.len(), 6, "3 queues in each of 2 groups");
    assert_eq!(
        status.iter().map(|s| s.max_offset).sum::<i64>(),
        12,
        "every message counted once"
    );
    assert!(status.iter().all(|s| s.min_offset == 0));
    cluster.shutdown().await;
    Ok(())
}

/// The bodies `group` consumes from "Orders" with `expr` (in pull order).
async fn consume(
    admin: &Admin,
    group: &str,
    expr: &str,
    from: ConsumeFrom,
    count: usize,
) -> anyhow::Result<Vec<String>> {
    let subscription = Subscription::parse(expr).map_err(anyhow::Error::msg)?;
    let request = ConsumeRequest {
        topic: "Orders".into(),
        consumer_group: group.into(),
        subscription: subscription.clone(),
        from,
        count,
        timeout: Duration::from_millis(800),
        reconsume_later: 0,
    };
    let messages = admin.consume(&request).await?;
    assert!(messages.iter().all(|m| {
        m.msg_id.len() == 32
            && (subscription.tags().is_empty()
                || m.tags
                    .as_ref()
                    .is_some_and(|tag| subscription.tags().contains(tag)))
    }));
    Ok(messages.into_iter().map(|m| m.body).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_messages_consume_should_filter_by_tag_string_and_resume_from_commits()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x5EED_0303).await?;
    cluster.create_topic("Orders", 2).await?;
    cluster.wait_for_route("Orders").await?;
    let admin = Admin::new(cluster.nameservers());
    let producer = Producer::builder(cluster.nameservers(), "admin-test").build()?;
    for (i, tag) in ["TagA", "TagB", "Aa", "BB", "TagA", "TagA"]
        .iter()
        .enumerate()
    {
        producer
            .send(Message::new("Orders", format!("m{i}")).with_tags(*tag))
            .await?;
    }

    let mut first = consume(&admin, "inspect", "TagA", ConsumeFrom::First, 100).await?;
    first.sort_unstable();
    assert_eq!(first, ["m0", "m4", "m5"]);
    // "Aa" and "BB" share a hash: the broker returns both, the tag string decides.
    assert_eq!(
        consume(&admin, "collide", "Aa", ConsumeFrom::First, 100).await?,
        ["m2"]
    );
    assert!(
        consume(&admin, "inspect", "TagA", ConsumeFrom::First, 100)
            .await?
            .is_empty(),
        "resumes after its commit"
    );
    assert!(
        consume(&admin, "late", "*", ConsumeFrom::Last, 100)
            .await?
            .is_empty(),
        "a new group from the last offset"
    );
    producer
        .send(Message::new("Orders", "m6").with_tags("TagA"))
        .await?;
    assert_eq!(
        consume(&admin, "inspect", "TagA", ConsumeFrom::First, 100).await?,
        ["m6"]
    );

    let limited = consume(&admin, "fresh", "*", ConsumeFrom::First, 2).await?;
    let rest = consume(&admin, "fresh", "*", ConsumeFrom::First, 100).await?;
    assert_eq!(
        limited.len() + rest.len(),
        7,
        "stopping at the count skips nothing"
    );
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_reconsume_later_consume_should_hand_back_and_dlq_list_should_show_dead_letters()
-> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x5EED_0304).await?;
    cluster.create_topic("Orders", 1).await?;
    cluster.wait_for_route("Orders").await?;
    let admin = Admin::new(cluster.nameservers());
    let producer = Producer::builder(cluster.nameservers(), "admin-test").build()?;
    let sent = producer
        .send(Message::new("Orders", "twice").with_tags("TagA"))
        .await?;
    let request = |group: &str, reconsume_later: i32| ConsumeRequest {
        topic: "Orders".into(),
        consumer_group: group.into(),
        subscription: Subscription::All,
        from: ConsumeFrom::First,
        count: 1,
        timeout: Duration::from_secs(8),
        reconsume_later,
    };
    tracing::info!("--- refused once, the retry (level 3 = 3 s) is consumed");
    let deliveries = admin.consume(&request("drill", 1)).await?;
    let seen: Vec<(i32, DeliveryResult)> = deliveries
        .iter()
        .map(|d| (d.reconsume_times, d.result))
        .collect();
    assert_eq!(
        seen,
        [
            (0, DeliveryResult::ReconsumeLater),
            (1, DeliveryResult::Consumed)
        ]
    );
    assert!(
        deliveries
            .iter()
            .all(|d| d.msg_id == sent.msg_id && d.topic == "Orders")
    );

    tracing::info!("--- a group allowing one retry: the second refusal is a dead letter");
    let strict = |retry_max_times| GroupSettings {
        retry_max_times,
        retry_queue_count: 1,
        consume_orderly: false,
    };
    let updated = admin.update_group("strict", strict(1), None).await?;
    assert_eq!(updated.len(), 2, "set in every broker group: {updated:?}");
    let too_many = admin
        .update_group("strict", strict(RETRY_MAX_TIMES_MAX + 1), None)
        .await
        .expect_err("more retries than a group may have");
    assert!(too_many.to_string().contains("at most 64"), "{too_many}");
    let deliveries = admin.consume(&request("strict", 9)).await?;
    assert_eq!(
        deliveries.len(),
        2,
        "the original and its one retry, both refused"
    );
    let dead = wait_for("the dead letter", TIMEOUT, || async {
        let listed = admin.dlq_list("strict", 10).await.ok()?;
        (!listed.is_empty()).then_some(listed)
    })
    .await?;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].msg_id, sent.msg_id);
    assert_eq!(dead[0].reconsume_times, 2);
    assert_eq!(
        admin.dlq_list("strict", 10).await?.len(),
        1,
        "listing consumes nothing"
    );
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_leader_change_consume_should_follow_the_new_leader() -> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x5EED_0307).await?;
    cluster.create_topic("Orders", 1).await?;
    cluster.wait_for_route("Orders").await?;
    let admin = std::sync::Arc::new(Admin::new(cluster.nameservers()));
    let pulls_before = cluster.node_total(|status| status.pull_requests).await?;
    let consuming = tokio::spawn({
        let admin = admin.clone();
        async move {
            let request = ConsumeRequest {
                topic: "Orders".into(),
                consumer_group: "follower".into(),
                subscription: Subscription::All,
                from: ConsumeFrom::First,
                count: 2,
                timeout: TIMEOUT,
                reconsume_later: 0,
            };
            admin.consume(&request).await
        }
    });
    wait_for("consume pulling", TIMEOUT, || async {
        (cluster
            .node_total(|status| status.pull_requests)
            .await
            .ok()?
            > pulls_before)
            .then_some(())
    })
    .await?;

    tracing::info!(
        "--- every group's leadership moves while consume holds pulls on the old leaders"
    );
    for name in GROUPS {
        let group = cluster.group(name);
        let leader = group.wait_for_leader(TIMEOUT).await?;
        admin
            .transfer_leader(name, group.a_follower(leader))
            .await?;
    }
    let producer = Producer::builder(cluster.nameservers(), "admin-test").build()?;
    for body in ["one", "two"] {
        producer.send(Message::new("Orders", body)).await?;
    }
    let consumed = consuming.await??;
    let mut bodies: Vec<&str> = consumed.iter().map(|m| m.body.as_str()).collect();
    bodies.sort();
    assert_eq!(bodies, ["one", "two"]);
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_replaced_disk_replace_node_should_let_the_node_be_rebuilt() -> anyhow::Result<()> {
    init_tracing();
    let mut cluster = TestCluster::start(0x5EED_0305).await?;
    cluster.create_topic("Orders", 1).await?;
    let admin = Admin::new(cluster.nameservers());
    let group = cluster.group_mut("broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let follower = group.a_follower(leader);
    let mut client = group.client(leader).await?;
    client
        .send(rocketraft_tests::send_request(
            "Orders",
            0,
            [b"before".to_vec()],
        ))
        .await?;
    group.stop(follower).await;
    group.wipe(follower)?;

    tracing::info!(
        follower,
        "--- the node's disk is replaced; prepare, then restart it"
    );
    admin.prepare_node_replacement("broker-a", follower).await?;
    group.restart(follower).await?;
    let leader_applied = group.status(leader).await?.last_applied_index;
    wait_for("the replaced node rebuilt", TIMEOUT, || async {
        let status = group.status(follower).await.ok()?;
        (status.last_applied_index >= leader_applied && status.commit_log_max_offset > 0)
            .then_some(())
    })
    .await?;
    assert!(matches!(
        admin.prepare_node_replacement("no-such-group", 1).await,
        Err(AdminError::UnknownGroup(_))
    ));
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_keys_query_msg_should_find_messages_by_key_and_by_id() -> anyhow::Result<()> {
    init_tracing();
    let cluster = TestCluster::start(0x5EED_0306).await?;
    cluster.create_topic("Orders", 2).await?;
    cluster.wait_for_route("Orders").await?;
    let admin = Admin::new(cluster.nameservers());
    let producer = Producer::builder(cluster.nameservers(), "admin-test").build()?;
    let mut sent = Vec::new();
    for i in 0..6 {
        let message = Message::new("Orders", format!("o{i}"))
            .with_keys([format!("order-{}", i % 2), "batch-7".to_owned()]);
        sent.push(producer.send(message).await?);
    }
    let by_id = admin.query_messages(&sent[3].msg_id).await?;
    assert_eq!(by_id.len(), 1);
    assert_eq!(
        (by_id[0].body.as_str(), by_id[0].result),
        ("o3", DeliveryResult::Stored)
    );
    assert_eq!(by_id[0].group, sent[3].group);
    let mut odd: Vec<String> = admin
        .query_messages("order-1")
        .await?
        .into_iter()
        .map(|m| m.body)
        .collect();
    odd.sort();
    assert_eq!(odd, ["o1", "o3", "o5"], "across both groups");
    assert_eq!(admin.query_messages("batch-7").await?.len(), 6);
    assert!(admin.query_messages("order-9").await?.is_empty());
    let longest = "k".repeat(1024);
    assert!(
        admin.query_messages(&longest).await?.is_empty(),
        "a 1024-character key is fine"
    );
    assert!(matches!(
        admin.query_messages(&format!("{longest}k")).await,
        Err(AdminError::Refused { status, .. }) if status.code() == tonic::Code::InvalidArgument
    ));
    assert!(matches!(
        admin.query_messages(" ").await,
        Err(AdminError::Refused { status, .. }) if status.code() == tonic::Code::InvalidArgument
    ));
    cluster.shutdown().await;
    Ok(())
}
