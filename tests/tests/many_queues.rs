//! A broker group holds at most `GROUP_QUEUES_MAX` queues over all its topics: a topic
//! creation that would pass it is refused with a clear error, at the boundary exactly, and
//! the topics already held stay served.

use std::time::Duration;

use rocketraft_broker::topic::GROUP_QUEUES_MAX;
use rocketraft_broker::topic::QUEUE_COUNT_MAX;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;

const TIMEOUT: Duration = Duration::from_secs(20);

fn create(topic: &str, queues: u32) -> pb::CreateTopicRequest {
    pb::CreateTopicRequest {
        topic: topic.into(),
        read_queue_count: queues,
        write_queue_count: queues,
        perm: 0,
        message_type: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_group_at_its_queue_limit_a_topic_past_it_should_be_refused() -> anyhow::Result<()>
{
    init_tracing();
    let group = TestGroup::start(1, 0x5EED_0A11, |config| {
        config.auto_create_topic = false;
    })
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;

    let full_topics = GROUP_QUEUES_MAX / QUEUE_COUNT_MAX;
    for n in 0..full_topics {
        client
            .create_topic(create(&format!("Full{n}"), QUEUE_COUNT_MAX))
            .await?;
    }
    let left = GROUP_QUEUES_MAX - full_topics * QUEUE_COUNT_MAX;
    client.create_topic(create("Last", left)).await?;

    let refused = client
        .create_topic(create("Over", 1))
        .await
        .expect_err("one queue past the limit");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert_eq!(
        rocketraft_proto::response_code(&refused),
        Some(ResponseCode::LimitExceeded)
    );
    assert!(
        refused.message().contains(&GROUP_QUEUES_MAX.to_string())
            && refused.message().contains("Over"),
        "the error names the limit and the topic: {}",
        refused.message()
    );

    // A topic updated in place counts only its change.
    client.create_topic(create("Last", left)).await?;
    let grown = client
        .create_topic(create("Last", left + 1))
        .await
        .expect_err("the update would pass the limit");
    assert_eq!(grown.code(), tonic::Code::ResourceExhausted);
    client.create_topic(create("Last", left - 1)).await?;
    client.create_topic(create("Over", 1)).await?;
    group.shutdown().await;
    Ok(())
}
