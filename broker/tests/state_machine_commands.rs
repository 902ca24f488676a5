//! Every replicated command changes a node's state when applied, and that state
//! survives a restart (checkpoint) and moves to another node whole (snapshot).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::EntryPayload;
use openraft::RaftSnapshotBuilder;
use openraft::storage::RaftStateMachine;
use rocketraft_broker::group_state::GroupState;
use rocketraft_broker::metadata::GroupConfig;
use rocketraft_broker::metadata::Metadata;
use rocketraft_broker::metadata::QueueOffset;
use rocketraft_broker::metadata::TopicConfig;
use rocketraft_broker::metadata::TopicMessageType;
use rocketraft_broker::raft::types::Entry;
use rocketraft_broker::raft::types::LogId;
use rocketraft_broker::raft::types::TypeConfig;
use rocketraft_broker::state_machine::StateMachine;
use rocketraft_broker::state_machine::command::Command;
use rocketraft_broker::store::MessageStore;
use rocketraft_broker::store::StoreConfig;
use rocketraft_broker::store::properties::Properties;
use rocketraft_broker::store::properties::UNIQ_KEY;
use rocketraft_broker::store::record::MessageRecord;

const TOPIC: &str = "Orders";

fn open(dir: &Path) -> anyhow::Result<(StateMachine, Arc<GroupState>)> {
    let (store, _) = MessageStore::open(StoreConfig::new(dir.join("store")))?;
    // A zero interval checkpoints after every apply.
    Ok(StateMachine::open(
        &dir.join("state"),
        store,
        Duration::ZERO,
    )?)
}

fn record(queue_id: i32, body: &str) -> anyhow::Result<bytes::Bytes> {
    keyed_record(queue_id, body, None)
}

/// A record carrying `unique_key` as its `UNIQ_KEY`, if given.
fn keyed_record(
    queue_id: i32,
    body: &str,
    unique_key: Option<&str>,
) -> anyhow::Result<bytes::Bytes> {
    let host = "127.0.0.1:10911".parse()?;
    let mut properties = Properties::new();
    if let Some(key) = unique_key {
        properties.insert(UNIQ_KEY, key)?;
    }
    let record = MessageRecord {
        queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: 1,
        born_host: host,
        store_timestamp_ms: 2,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: body.as_bytes().to_vec().into(),
        topic: TOPIC.into(),
        properties,
    };
    Ok(record.encode()?.into())
}

fn commands() -> anyhow::Result<Vec<Command>> {
    let topic = |name: &str| TopicConfig {
        name: name.into(),
        read_queue_count: 4,
        write_queue_count: 4,
        perm: 6,
    };
    Ok(vec![
        Command::UpsertTopic(topic(TOPIC)),
        Command::UpsertTypedTopic {
            topic: topic("Doomed"),
            message_type: Some(TopicMessageType::Delay),
        },
        Command::UpsertTypedTopic {
            topic: topic("Sequenced"),
            message_type: Some(TopicMessageType::Fifo),
        },
        // Updating the queues keeps the type.
        Command::UpsertTypedTopic {
            topic: topic("Sequenced"),
            message_type: None,
        },
        Command::UpsertGroup(GroupConfig {
            name: "billing".into(),
            retry_max_times: 16,
            retry_queue_count: 1,
        }),
        Command::Append {
            records: record(0, "first")?,
        },
        Command::Append {
            records: keyed_record(0, "once", Some("K1"))?,
        },
        // A producer's retry of K1, which is stored already: answered, not stored again.
        Command::AppendOnce {
            records: keyed_record(0, "once", Some("K1"))?,
        },
        // A retry whose first attempt never committed: stored.
        Command::AppendOnce {
            records: keyed_record(0, "new", Some("K2"))?,
        },
        // An attempt and its retry batched together: stored once.
        Command::AppendOnce {
            records: [
                keyed_record(1, "pair", Some("K3"))?,
                keyed_record(1, "pair", Some("K3"))?,
            ]
            .concat()
            .into(),
        },
        Command::CommitOffsets {
            group: "billing".into(),
            offsets: vec![QueueOffset {
                topic: TOPIC.into(),
                queue_id: 0,
                offset: 1,
            }],
        },
        Command::DeliverDelayed {
            level: 3,
            from_offset: 0,
            next_offset: 5,
            records: record(1, "delayed")?,
        },
        // The same range again (a retry, or a deposed leader): skipped.
        Command::DeliverDelayed {
            level: 3,
            from_offset: 0,
            next_offset: 5,
            records: record(1, "delayed")?,
        },
        Command::DeleteTopic {
            name: "Doomed".into(),
        },
    ])
}

fn expected_metadata() -> Metadata {
    let mut metadata = Metadata::default();
    metadata.upsert_topic(TopicConfig {
        name: TOPIC.into(),
        read_queue_count: 4,
        write_queue_count: 4,
        perm: 6,
    });
    metadata.upsert_typed_topic(
        TopicConfig {
            name: "Sequenced".into(),
            read_queue_count: 4,
            write_queue_count: 4,
            perm: 6,
        },
        Some(TopicMessageType::Fifo),
    );
    metadata.upsert_group(GroupConfig {
        name: "billing".into(),
        retry_max_times: 16,
        retry_queue_count: 1,
    });
    metadata.commit_offsets(
        "billing",
        &[QueueOffset {
            topic: TOPIC.into(),
            queue_id: 0,
            offset: 1,
        }],
    );
    metadata.set_schedule_progress(3, 5);
    metadata
}

fn queue_lengths(group: &GroupState) -> Vec<i64> {
    (0..2)
        .map(|queue| group.store().consume_queue_offsets(TOPIC, queue).1)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_every_command_when_applied_should_survive_restart_and_snapshot() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let (mut machine, group) = open(dir.path())?;
    let entries: Vec<Entry> = commands()?
        .into_iter()
        .enumerate()
        .map(|(i, command)| Entry {
            log_id: LogId::new_term_index(1, i as u64 + 1),
            payload: EntryPayload::Normal(command),
        })
        .collect();
    let last = entries.last().map(|entry| entry.log_id);
    apply(&mut machine, entries).await?;
    assert_eq!(*group.metadata(), expected_metadata());
    assert_eq!(
        queue_lengths(&group),
        vec![3, 2],
        "each Append, each new AppendOnce (one for a batched pair) and the first \
         DeliverDelayed stored one message; the AppendOnce of a stored UNIQ_KEY and the stale \
         DeliverDelayed none"
    );
    drop((machine, group));

    let (mut machine, group) = open(dir.path())?;
    assert_eq!(
        RaftStateMachine::<TypeConfig>::applied_state(&mut machine)
            .await?
            .0,
        last,
        "the checkpoint holds the last applied id"
    );
    assert_eq!(
        *group.metadata(),
        expected_metadata(),
        "metadata survives a restart"
    );
    assert_eq!(queue_lengths(&group), vec![3, 2]);

    let snapshot = RaftSnapshotBuilder::<TypeConfig>::build_snapshot(
        &mut RaftStateMachine::<TypeConfig>::get_snapshot_builder(&mut machine).await,
    )
    .await?;
    let other = tempfile::tempdir()?;
    let (mut receiver, receiver_group) = open(other.path())?;
    RaftStateMachine::<TypeConfig>::install_snapshot(
        &mut receiver,
        &snapshot.meta,
        snapshot.snapshot,
    )
    .await?;
    assert_eq!(
        RaftStateMachine::<TypeConfig>::applied_state(&mut receiver)
            .await?
            .0,
        last
    );
    assert_eq!(
        *receiver_group.metadata(),
        expected_metadata(),
        "a snapshot carries the metadata"
    );
    let end = group.store().commit_log_max_offset();
    assert_eq!(receiver_group.store().commit_log_max_offset(), end);
    assert_eq!(
        receiver_group.store().read_commit_log(0, end as usize)?,
        group.store().read_commit_log(0, end as usize)?,
        "and the CommitLog bytes"
    );
    assert_eq!(queue_lengths(&receiver_group), vec![3, 2]);
    Ok(())
}

/// Applies `entries` as the broker's Raft does.
async fn apply(machine: &mut StateMachine, entries: Vec<Entry>) -> std::io::Result<()> {
    RaftStateMachine::<TypeConfig>::apply(
        machine,
        futures::stream::iter(entries.into_iter().map(|entry| Ok((entry, None)))),
    )
    .await
}
