//! `mqadmin`'s operations against a nameserver and two 3-node groups: list the cluster,
//! create a topic everywhere or in one group, route it, and read its queue offsets.

use rocketraft_client::admin::Admin;
use rocketraft_client::admin::AdminError;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
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
