//! Pulls from a 3-node group: long polling, tag filtering by hash, SQL92 filtering by
//! properties, offset checks, followers serving committed messages, and the byte budget that
//! keeps large messages pullable; and pulls answered as the CommitLog's stored records.

use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use rocketraft_broker::store::RecordView;
use rocketraft_client::message::encode_properties;
use rocketraft_domain::limits::PULL_RESPONSE_BYTES_MAX;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common as common_pb;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "PullTopic";

fn pull(queue_offset: i64, tags: &[&str], max_wait_ms: u32) -> pb::PullRequest {
    pb::PullRequest {
        group: "readers".into(),
        topic: TOPIC.into(),
        queue_id: 0,
        queue_offset,
        max_messages: 32,
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        max_wait_ms,
        sql: String::new(),
        stored_records: false,
    }
}

fn tagged(tag: &str, body: &str) -> pb::SendRequest {
    let message = common_pb::Message {
        topic: TOPIC.into(),
        body: body.as_bytes().to_vec().into(),
        properties: encode_properties([("TAGS", tag)]),
        ..Default::default()
    };
    pb::SendRequest {
        topic: TOPIC.into(),
        queue_id: 0,
        messages: vec![message],
        born_timestamp_ms: 1,
        born_host: String::new(),
        deduplicate: false,
        queue_ids: Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_held_pull_when_message_arrives_should_answer_at_once() -> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0401, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    client.send(tagged("TagA", "first")).await?;

    info!("--- an empty pull without a wait answers NO_NEW_MESSAGE at once");
    let empty = client.pull(pull(1, &[], 0)).await?.into_inner();
    assert_eq!(
        (empty.status(), empty.next_offset),
        (pb::PullStatus::NoNewMessage, 1)
    );

    info!("--- a held pull is answered as soon as a message is applied");
    let mut held_client = client.clone();
    let pulls_before = group.status(leader).await?.pull_requests;
    let held = tokio::spawn(async move {
        let started = Instant::now();
        let response = held_client
            .pull(pull(1, &[], 10_000))
            .await
            .map(tonic::Response::into_inner);
        (response, started.elapsed())
    });
    wait_for("the held pull reached the leader", TIMEOUT, || async {
        let received = group.status(leader).await.ok()?.pull_requests;
        (received > pulls_before).then_some(())
    })
    .await?;
    let sent_at = Instant::now();
    client.send(tagged("TagA", "second")).await?;
    let (response, waited) = held.await?;
    let response = response?;
    assert_eq!(response.status(), pb::PullStatus::Found);
    assert_eq!(response.messages[0].body.as_ref(), b"second");
    assert_eq!(response.next_offset, 2);
    assert!(
        waited < Duration::from_secs(5),
        "held until the message came, not the full wait"
    );
    info!(
        after_send_ms = sent_at.elapsed().as_millis() as u64,
        "--- delivered"
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_pull_holds_max_held_pulls_when_one_more_would_wait_should_refuse_it()
-> anyhow::Result<()> {
    init_tracing();
    const HOLDS: usize = 2;
    let group = TestGroup::start(3, 0x5EED_0404, |config| config.pull_holds_max = HOLDS).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    client.send(tagged("TagA", "first")).await?;

    info!("--- {HOLDS} pulls wait for a message: the most this node holds");
    let mut held = Vec::new();
    for _ in 0..HOLDS {
        let mut held_client = client.clone();
        held.push(tokio::spawn(async move {
            held_client.pull(pull(1, &[], 15_000)).await
        }));
    }
    wait_for("the leader to hold the pulls", TIMEOUT, || async {
        let status = group.status(leader).await.ok()?;
        (status.pulls_held == HOLDS as u64).then_some(())
    })
    .await?;

    info!("--- one more that would wait is refused; one that finds a message is not");
    let refused = client
        .pull(pull(1, &[], 15_000))
        .await
        .expect_err("beyond pull_holds_max");
    assert_eq!(
        rocketraft_proto::response_code(&refused),
        Some(rocketraft_proto::common::ResponseCode::LimitExceeded),
        "{refused}"
    );
    assert!(refused.message().contains("pull_holds_max"), "{refused}");
    let found = client.pull(pull(0, &[], 15_000)).await?.into_inner();
    assert_eq!(found.status(), pb::PullStatus::Found);

    info!("--- a message releases the held pulls, and the node holds pulls again");
    client.send(tagged("TagA", "second")).await?;
    for pull in held {
        let response = pull.await??.into_inner();
        assert_eq!(response.messages[0].body.as_ref(), b"second");
    }
    assert_eq!(group.status(leader).await?.pulls_held, 0);
    let mut held_client = client.clone();
    let again = tokio::spawn(async move { held_client.pull(pull(2, &[], 15_000)).await });
    wait_for("the leader to hold a pull again", TIMEOUT, || async {
        (group.status(leader).await.ok()?.pulls_held == 1).then_some(())
    })
    .await?;
    client.send(tagged("TagA", "third")).await?;
    assert_eq!(
        again.await??.into_inner().messages[0].body.as_ref(),
        b"third"
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_tags_should_filter_by_hash_and_check_offsets_on_any_node() -> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0402, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    for (tag, body) in [
        ("TagA", "a1"),
        ("Aa", "aa"),
        ("TagB", "b1"),
        ("BB", "bb"),
        ("TagA", "a2"),
    ] {
        client.send(tagged(tag, body)).await?;
    }

    let bodies = |response: &pb::PullResponse| -> Vec<String> {
        response
            .messages
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect()
    };
    let only_a = client.pull(pull(0, &["TagA"], 0)).await?.into_inner();
    assert_eq!(bodies(&only_a), ["a1", "a2"]);
    assert_eq!(only_a.next_offset, 5);
    // "Aa" and "BB" share a Java hash code: the broker returns both; consumers re-filter.
    let colliding = client.pull(pull(0, &["Aa"], 0)).await?.into_inner();
    assert_eq!(bodies(&colliding), ["aa", "bb"]);
    assert_eq!(
        bodies(&client.pull(pull(0, &["*"], 0)).await?.into_inner()).len(),
        5
    );
    let none = client.pull(pull(0, &["TagZ"], 0)).await?.into_inner();
    assert_eq!(
        (none.status(), none.next_offset),
        (pb::PullStatus::NoMatchedMessage, 5)
    );

    let beyond = client.pull(pull(9, &[], 0)).await?.into_inner();
    assert_eq!(
        (beyond.status(), beyond.next_offset),
        (pb::PullStatus::OffsetIllegal, 5)
    );

    info!("--- a follower serves the same committed messages");
    let follower = group.a_follower(leader);
    let mut follower_client = group.client(follower).await?;
    let from_follower = wait_for("the follower to apply", TIMEOUT, || {
        let mut follower_client = follower_client.clone();
        async move {
            let response = follower_client
                .pull(pull(0, &["TagA"], 0))
                .await
                .ok()?
                .into_inner();
            (response.messages.len() == 2).then_some(response)
        }
    })
    .await?;
    assert_eq!(bodies(&from_follower), ["a1", "a2"]);

    info!("--- asked for stored records, it answers the CommitLog's bytes of the same messages");
    let stored = follower_client
        .pull(pb::PullRequest {
            stored_records: true,
            ..pull(0, &["TagA"], 0)
        })
        .await?
        .into_inner();
    assert!(stored.messages.is_empty());
    assert_eq!(
        (stored.status(), stored.next_offset),
        (pb::PullStatus::Found, 5)
    );
    let mut records = &stored.stored_records[..];
    for message in &from_follower.messages {
        let record = RecordView::parse(records)?;
        assert_eq!(record.topic(), message.topic);
        assert_eq!(record.queue_offset(), message.queue_offset);
        assert_eq!(record.physical_offset(), message.commit_log_offset);
        assert_eq!(record.body(), &message.body[..]);
        assert_eq!(record.properties_bytes(), &message.properties[..]);
        assert_eq!(record.store_host()?.to_string(), message.store_host);
        records = &records[record.total_size()..];
    }
    assert!(
        records.is_empty(),
        "{} bytes past the records",
        records.len()
    );
    assert!(from_follower.stored_records.is_empty());

    let bad = follower_client
        .pull(pb::PullRequest {
            max_messages: 0,
            ..pull(0, &[], 0)
        })
        .await;
    assert_eq!(
        bad.expect_err("zero messages").code(),
        tonic::Code::InvalidArgument
    );
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_sql92_filter_the_broker_should_return_only_what_it_selects() -> anyhow::Result<()>
{
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0406, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    for (body, properties) in [
        ("a5", vec![("TAGS", "A"), ("price", "5")]),
        ("a15", vec![("TAGS", "A"), ("price", "15")]),
        ("b15", vec![("TAGS", "B"), ("price", "15")]),
        ("a-none", vec![("TAGS", "A")]),
        ("a-text", vec![("TAGS", "A"), ("price", "cheap")]),
        ("a25", vec![("TAGS", "A"), ("price", "25.5")]),
    ] {
        let message = common_pb::Message {
            body: body.as_bytes().to_vec().into(),
            properties: encode_properties(properties),
            ..Default::default()
        };
        client
            .send(pb::SendRequest {
                messages: vec![message],
                ..tagged("unused", "unused")
            })
            .await?;
    }
    let with_sql = |sql: &str| pb::PullRequest {
        sql: sql.into(),
        ..pull(0, &[], 0)
    };
    let selected = client
        .pull(with_sql("TAGS = 'A' AND price > 10"))
        .await?
        .into_inner();
    let bodies: Vec<String> = selected
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(
        bodies,
        ["a15", "a25"],
        "absent or non-numeric prices are not selected"
    );
    assert_eq!(selected.next_offset, 6);
    let none = client
        .pull(with_sql("price IS NULL AND TAGS = 'B'"))
        .await?
        .into_inner();
    assert_eq!(
        (none.status(), none.next_offset),
        (pb::PullStatus::NoMatchedMessage, 6)
    );

    info!("--- a bad filter is refused with where and why");
    let bad = client
        .pull(with_sql("price >> 10"))
        .await
        .expect_err("invalid SQL");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("at byte 7"), "{}", bad.message());
    let both = client
        .pull(pb::PullRequest {
            tags: vec!["A".into()],
            ..with_sql("price > 1")
        })
        .await
        .expect_err("tags and SQL");
    assert!(both.message().contains("not both"), "{}", both.message());
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_large_messages_a_pull_should_stay_within_its_byte_budget() -> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0403, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    let body_bytes = PULL_RESPONSE_BYTES_MAX * 3 / 4;
    let bodies: Vec<Vec<u8>> = (0..5u8).map(|i| vec![b'a' + i; body_bytes]).collect();
    for body in &bodies {
        client.send(send_request(TOPIC, 0, [body.clone()])).await?;
    }

    info!("--- 32 wanted, but each pull brings one: two would pass the budget");
    let mut offset = 0;
    let mut pulled = Vec::new();
    while offset < bodies.len() as i64 {
        let response = client.pull(pull(offset, &[], 0)).await?.into_inner();
        assert_eq!(response.status(), pb::PullStatus::Found);
        assert_eq!(response.messages.len(), 1, "pull at {offset}");
        offset = response.next_offset;
        pulled.extend(response.messages.into_iter().map(|m| m.body.to_vec()));
    }
    assert_eq!(pulled, bodies, "every body intact, in order");

    info!("--- small messages still come many to a pull");
    client
        .send(send_request(TOPIC, 0, (0..40).map(|_| vec![b'z'; 100])))
        .await?;
    let response = client.pull(pull(offset, &[], 0)).await?.into_inner();
    assert_eq!(response.messages.len(), 32);
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_leader_cut_off_from_its_group_its_held_pulls_should_end_and_new_ones_be_refused()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0405, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    client.send(tagged("TagA", "first")).await?;
    let mut held_client = client.clone();
    let held = tokio::spawn(async move { held_client.pull(pull(1, &[], 15_000)).await });
    wait_for("the leader to hold the pull", TIMEOUT, || async {
        (group.status(leader).await.ok()?.pulls_held == 1).then_some(())
    })
    .await?;

    info!("--- the leader is cut off from its group: its held pull ends long before 15 s");
    let cut_at = Instant::now();
    group.faults.isolate(leader);
    let ended = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .context("the held pull outlived the leader's lease")??
        .expect_err("refused, not answered empty");
    assert_eq!(
        rocketraft_proto::response_code(&ended),
        Some(rocketraft_proto::common::ResponseCode::ServiceUnavailable),
        "{ended}"
    );
    assert!(ended.message().contains("quorum"), "{ended}");
    info!(after = ?cut_at.elapsed(), "held pull ended");

    info!("--- a new pull that would wait is refused at once; one that finds a message is served");
    let refused = tokio::time::timeout(Duration::from_secs(1), client.pull(pull(1, &[], 15_000)))
        .await?
        .expect_err("refused");
    assert_eq!(
        rocketraft_proto::response_code(&refused),
        Some(rocketraft_proto::common::ResponseCode::ServiceUnavailable)
    );
    let found = client.pull(pull(0, &[], 15_000)).await?.into_inner();
    assert_eq!(found.status(), pb::PullStatus::Found);
    group.faults.heal();
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_consumer_ahead_of_a_lagging_node_the_node_should_keep_its_offset_and_answer_when_caught_up()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0406, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    for body in ["m0", "m1", "m2"] {
        client.send(tagged("TagA", body)).await?;
    }
    group.wait_all_applied(leader, TIMEOUT).await?;
    let follower = group.a_follower(leader);
    group.faults.isolate(follower);
    for body in ["m3", "m4", "m5"] {
        client.send(tagged("TagA", body)).await?;
    }

    info!("--- a consumer that took m0..m4 elsewhere pulls offset 5 from the node holding 3");
    let mut follower_client = group.client(follower).await?;
    let behind = follower_client.pull(pull(5, &[], 0)).await?.into_inner();
    assert_eq!(
        (behind.status(), behind.next_offset, behind.max_offset),
        (pb::PullStatus::NoNewMessage, 5, 3),
        "the offset is kept, not moved back to what this node holds"
    );
    let mut held_client = follower_client.clone();
    let held = tokio::spawn(async move { held_client.pull(pull(5, &[], 15_000)).await });
    wait_for("the lagging node to hold the pull", TIMEOUT, || async {
        (group.status(follower).await.ok()?.pulls_held == 1).then_some(())
    })
    .await?;

    info!("--- the node catches up: the held pull answers from offset 5");
    group.faults.heal();
    let caught_up = tokio::time::timeout(TIMEOUT, held)
        .await
        .context("the held pull was not answered")???
        .into_inner();
    assert_eq!(caught_up.status(), pb::PullStatus::Found);
    let bodies: Vec<_> = caught_up
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(bodies, ["m5"]);
    assert_eq!(caught_up.next_offset, 6);

    info!("--- a ready leader still corrects an offset past its end");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let beyond = wait_for("a ready leader to answer", TIMEOUT, || async {
        let mut client = group.client(leader).await.ok()?;
        let response = client.pull(pull(9, &[], 0)).await.ok()?.into_inner();
        (response.status() == pb::PullStatus::OffsetIllegal).then_some(response)
    })
    .await?;
    assert_eq!(beyond.next_offset, 6);
    group.shutdown().await;
    Ok(())
}
