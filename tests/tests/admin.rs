//! `mqadmin`'s operations against a nameserver and two 3-node groups: list the cluster,
//! create a topic everywhere or in one group, route it, and read its queue offsets.

use rocketraft_client::admin::Admin;
use rocketraft_client::admin::AdminError;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::subscription::Subscription;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use std::time::Duration;

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
    assert_eq!(admin.create_topic("Orders", 3, None).await?, GROUPS);
    assert_eq!(
        admin.create_topic("Local", 1, Some("broker-b")).await?,
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
    let timeout = Duration::from_millis(800);
    let messages = admin
        .consume("Orders", group, &subscription, from, count, timeout)
        .await?;
    assert!(
        messages
            .iter()
            .all(|m| m.msg_id.len() == 48 && subscription.matches(m.tags.as_deref()))
    );
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
