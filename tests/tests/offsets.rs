//! Consumer offsets go through Raft: none until committed, the committed value on the
//! leader, and the same value on a new leader after a failover.

use std::time::Duration;

use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_proto::response_code;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);

fn commit(entries: &[(i32, i64)]) -> pb::CommitOffsetsRequest {
    pb::CommitOffsetsRequest {
        group: "billing".into(),
        offsets: entries
            .iter()
            .map(|(queue_id, offset)| pb::QueueOffsetEntry {
                topic: "Orders".into(),
                queue_id: *queue_id,
                offset: *offset,
            })
            .collect(),
    }
}

fn query(queue_id: i32) -> pb::QueryOffsetRequest {
    pb::QueryOffsetRequest {
        group: "billing".into(),
        topic: "Orders".into(),
        queue_id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_committed_offsets_when_leader_changes_should_not_rewind() -> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_0501, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;

    assert_eq!(
        client.query_offset(query(0)).await?.into_inner().offset,
        None,
        "never committed"
    );
    client.commit_offsets(commit(&[(0, 7), (1, 3)])).await?;
    assert_eq!(
        client.query_offset(query(0)).await?.into_inner().offset,
        Some(7)
    );
    assert_eq!(
        client.query_offset(query(1)).await?.into_inner().offset,
        Some(3)
    );

    let follower = group.a_follower(leader);
    let refused = group
        .client(follower)
        .await?
        .query_offset(query(0))
        .await
        .expect_err("follower");
    assert_eq!(response_code(&refused), Some(ResponseCode::NotLeader));
    let empty = client.commit_offsets(commit(&[])).await.expect_err("empty");
    assert_eq!(empty.code(), tonic::Code::InvalidArgument);
    let negative = client
        .commit_offsets(commit(&[(0, -1)]))
        .await
        .expect_err("negative");
    assert_eq!(negative.code(), tonic::Code::InvalidArgument);

    info!(
        leader,
        "--- isolate the leader; the new one reports the same offsets"
    );
    let new_leader = group.isolate_leader(leader, TIMEOUT).await?;
    let mut new_client = group.client(new_leader).await?;
    assert_eq!(
        new_client.query_offset(query(0)).await?.into_inner().offset,
        Some(7)
    );
    new_client.commit_offsets(commit(&[(0, 9)])).await?;
    assert_eq!(
        new_client.query_offset(query(0)).await?.into_inner().offset,
        Some(9)
    );
    group.faults.heal();
    group.shutdown().await;
    Ok(())
}
