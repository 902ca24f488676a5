//! The commands replicated through a broker group's Raft log.
//!
//! Every change to a broker group's durable state is one [`Command`], applied in log order by
//! every node. A command carries everything time- or node-dependent already stamped by the
//! leader, so applying it is a pure function of the command and the state before it.

use std::fmt;

use bytes::Bytes;
use serde::Deserialize;
use serde::Serialize;

use crate::metadata::GroupConfig;
use crate::metadata::QueueOffset;
use crate::metadata::TopicConfig;
use crate::metadata::TopicMessageType;
use crate::pop::state::Pop;
use crate::pop::state::PopChange;
use crate::pop::state::PopChangeOutcome;
use crate::pop::state::PopQueueKey;

/// A replicated change to a broker group's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Messages encoded as store records (queue and commitlog offsets still zero),
    /// concatenated; each gets its offsets when applied.
    Append {
        #[serde(with = "crate::raft::codec::shared_bytes")]
        records: Bytes,
    },
    /// Consumer progress of one group.
    CommitOffsets {
        group: String,
        offsets: Vec<QueueOffset>,
    },
    UpsertTopic(TopicConfig),
    DeleteTopic {
        name: String,
    },
    UpsertGroup(GroupConfig),
    /// Due delayed messages restored to their real topic (encoded records, as in `Append`),
    /// together with the schedule progress of their level: both land or neither does. It
    /// applies only if the level's progress is still `from_offset` (compare and set), so a
    /// range is delivered once even if two leaders, or one retrying leader, propose it.
    DeliverDelayed {
        level: u32,
        from_offset: i64,
        next_offset: i64,
        #[serde(with = "crate::raft::codec::shared_bytes")]
        records: Bytes,
    },
    /// Messages of a send that may be stored already (a producer's retry after an unknown
    /// outcome), encoded as in `Append`. A message whose topic in this group already holds
    /// its `UNIQ_KEY` is not stored again; its result is where the first copy is. Applied
    /// in log order, so every node decides alike, and an earlier attempt that committed at
    /// all is in the log before this entry. (New variants go last: the log stores the
    /// variant's index.)
    AppendOnce {
        #[serde(with = "crate::raft::codec::shared_bytes")]
        records: Bytes,
    },
    /// The end of a transaction: its op record (and, for a commit, the restored message),
    /// encoded as in `Append`. Applied only if the transaction of half message `msg_id`
    /// (first stored at CommitLog offset `half_offset`) has no op record yet, so a
    /// transaction ends once, however many ends race (the producer's, a check-back's
    /// answer, the broker's discard).
    EndTransaction {
        msg_id: String,
        half_offset: i64,
        #[serde(with = "crate::raft::codec::shared_bytes")]
        records: Bytes,
    },
    /// Several transactions' ends, each applied in order as one `EndTransaction` would be
    /// (an end of a transaction ended by an earlier one, in this entry or before, is
    /// skipped).
    EndTransactions {
        ends: Vec<TransactionEnd>,
    },
    /// Messages of one group's queue delivered to a pop consumer
    /// ([`crate::pop::state::PopState::apply_pop`]): applied whole, only if the queue is as
    /// the leader read it; their receipt is this entry's log index. `dead_letters` are the
    /// copies of `pop.dead` for the group's dead-letter topic, encoded as in `Append`,
    /// appended only if the pop applies.
    Pop {
        pop: Pop,
        #[serde(with = "crate::raft::codec::shared_bytes")]
        dead_letters: Bytes,
    },
    /// Acks and invisibility changes of a group's in-flight messages
    /// ([`crate::pop::state::PopState::apply_changes`]), as of `now_ms`.
    PopChange {
        key: PopQueueKey,
        changes: Vec<PopChange>,
        now_ms: i64,
    },
    /// An in-flight message its consumer gave up on: acked as `change` (which it must be),
    /// and, if that applies, `record` (its copy for the group's dead-letter topic, encoded as
    /// in `Append`) appended.
    PopDeadLetter {
        key: PopQueueKey,
        change: PopChange,
        now_ms: i64,
        #[serde(with = "crate::raft::codec::shared_bytes")]
        record: Bytes,
    },
    /// Whether consumer group `group`'s pops deliver in order (FIFO).
    SetPopOrderly {
        group: String,
        orderly: bool,
    },
    /// Creates or updates a topic and sets its message type, unless `message_type` is
    /// `None` (keep the topic's). `UpsertTopic` stays for entries written before types.
    UpsertTypedTopic {
        topic: TopicConfig,
        message_type: Option<TopicMessageType>,
    },
}

/// One end of [`Command::EndTransactions`], with [`Command::EndTransaction`]'s fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionEnd {
    pub msg_id: String,
    pub half_offset: i64,
    #[serde(with = "crate::raft::codec::shared_bytes")]
    pub records: Bytes,
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Command::Append { records } => write!(f, "Append({} bytes)", records.len()),
            Command::CommitOffsets { group, offsets } => {
                write!(f, "CommitOffsets({group}, {} queues)", offsets.len())
            }
            Command::UpsertTopic(topic) => write!(f, "UpsertTopic({})", topic.name),
            Command::DeleteTopic { name } => write!(f, "DeleteTopic({name})"),
            Command::UpsertGroup(group) => write!(f, "UpsertGroup({})", group.name),
            Command::DeliverDelayed {
                level,
                from_offset,
                next_offset,
                records,
            } => write!(
                f,
                "DeliverDelayed(level {level}, {from_offset}..{next_offset}, {} bytes)",
                records.len()
            ),
            Command::AppendOnce { records } => write!(f, "AppendOnce({} bytes)", records.len()),
            Command::EndTransaction {
                msg_id, records, ..
            } => {
                write!(f, "EndTransaction({msg_id}, {} bytes)", records.len())
            }
            Command::EndTransactions { ends } => write!(f, "EndTransactions({})", ends.len()),
            Command::Pop { pop, .. } => write!(
                f,
                "Pop({}, {}#{}, {} fresh, {} revived, {} dead)",
                pop.key.group,
                pop.key.topic,
                pop.key.queue_id,
                pop.fresh.len(),
                pop.revived.len(),
                pop.dead.len()
            ),
            Command::SetPopOrderly { group, orderly } => {
                write!(f, "SetPopOrderly({group}, {orderly})")
            }
            Command::UpsertTypedTopic {
                topic,
                message_type,
            } => write!(f, "UpsertTypedTopic({}, {message_type:?})", topic.name),
            Command::PopDeadLetter { key, change, .. } => write!(
                f,
                "PopDeadLetter({}, {}#{}, {})",
                key.group, key.topic, key.queue_id, change.queue_offset
            ),
            Command::PopChange { key, changes, .. } => write!(
                f,
                "PopChange({}, {}#{}, {})",
                key.group,
                key.topic,
                key.queue_id,
                changes.len()
            ),
        }
    }
}

/// Where one appended message landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendedMessage {
    pub queue_id: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub size: i32,
}

/// The result of applying one [`Command`] on the leader.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CommandResult {
    /// Blank and membership entries, and commands with nothing to report.
    #[default]
    Done,
    /// One element per record of an `Append` or `DeliverDelayed`, in record order.
    Appended(Vec<AppendedMessage>),
    /// Per end of an `EndTransactions`, in order: whether it ended its transaction (false:
    /// an earlier end had).
    Ended(Vec<bool>),
    /// A `Pop`'s delivered (queue offset, attempt), in offset order (`None`: the queue had
    /// moved, nothing applied), and their receipt.
    Popped {
        delivered: Option<Vec<(i64, u32)>>,
        receipt: u64,
    },
    /// What each change of a `PopChange` did, in order.
    PopChanged(Vec<PopChangeOutcome>),
}
