//! Proposing commands to the group's Raft log and learning their outcome, in the broker's
//! own terms: the rest of the broker never sees an openraft error type.

use std::future::Future;
use std::time::Duration;

use openraft::errors::ClientWriteError;
use openraft::errors::Fatal;
use openraft::errors::LinearizableReadError;
use openraft::impls::ProgressResponder;

use crate::raft::control::role::leader_ready;
use crate::raft::types::Raft;
use crate::raft::types::TypeConfig;
use crate::state_machine::command::Command;
use crate::state_machine::command::CommandResult;

/// Why a proposed command has no result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    /// This node does not lead; `leader_addr` names the leader if one is known.
    #[error("not the leader")]
    NotLeader { leader_addr: Option<String> },
    /// The command's fate is unknown: it may still commit.
    #[error("the outcome is unknown; it may still commit")]
    Unknown(#[source] Undecided),
    /// Raft has stopped on this node.
    #[error("raft stopped on this node")]
    Stopped(#[source] Fatal<TypeConfig>),
}

/// Why a command's (or a read's) outcome is unknown.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Undecided {
    #[error(transparent)]
    Write(ClientWriteError<TypeConfig>),
    #[error(transparent)]
    Read(LinearizableReadError<TypeConfig>),
    #[error("leadership was lost before the command committed")]
    LeadershipLost,
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
}

/// Submits `command` now, in submission order with other proposals, and returns a future
/// of its applied result, so the caller can keep proposing while earlier ones commit.
pub async fn propose(
    raft: &Raft,
    command: Command,
) -> Result<impl Future<Output = Result<CommandResult, ProposeError>> + Send + 'static, ProposeError>
{
    let (responder, applied) = ProgressResponder::complete_only();
    raft.client_write_ff(command, Some(responder))
        .await
        .map_err(ProposeError::Stopped)?;
    Ok(async move {
        match applied.await {
            Ok(Ok(response)) => Ok(response.data),
            Ok(Err(ClientWriteError::ForwardToLeader(forward))) => Err(ProposeError::NotLeader {
                leader_addr: forward.leader_node.map(|node| node.api),
            }),
            Ok(Err(error)) => Err(ProposeError::Unknown(Undecided::Write(error))),
            Err(_) => Err(ProposeError::Unknown(Undecided::LeadershipLost)),
        }
    })
}

/// Fails with [`ProposeError::NotLeader`] unless this node leads its group.
pub fn ensure_leader(raft: &Raft) -> Result<(), ProposeError> {
    raft.as_leader()
        .map(|_| ())
        .map_err(|forward| ProposeError::NotLeader {
            leader_addr: forward.leader_node.map(|node| node.api),
        })
}

/// Waits until this leader has applied everything committed before the call (a ReadIndex
/// round), so a read of the state machine that follows cannot see an older state than a
/// previous leader acknowledged. A new leader's state machine may still lag right after an
/// election; this closes that window.
pub async fn linearizable_read(raft: &Raft) -> Result<(), ProposeError> {
    use openraft::errors::RaftError;
    match raft
        .ensure_linearizable(openraft::ReadPolicy::ReadIndex)
        .await
    {
        Ok(_) => Ok(()),
        Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(forward))) => {
            Err(ProposeError::NotLeader {
                leader_addr: forward.leader_node.map(|node| node.api),
            })
        }
        Err(RaftError::APIError(error)) => Err(ProposeError::Unknown(Undecided::Read(error))),
        Err(RaftError::Fatal(fatal)) => Err(ProposeError::Stopped(fatal)),
    }
}

/// Waits, at most `wait`, until this leader has applied an entry of its own term: it has then
/// applied everything committed before it led, and every write it acknowledged since. Enough
/// for a request that reads its group's state and then proposes a command whose apply checks
/// that state again (a compare-and-set): unlike [`linearizable_read`] it costs no quorum
/// round. A deposed leader that does not know it yet may read an older state, but its
/// proposal cannot commit.
pub async fn leader_caught_up(raft: &Raft, wait: Duration) -> Result<(), ProposeError> {
    ensure_leader(raft)?;
    match tokio::time::timeout(wait, leader_ready(raft)).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(ProposeError::NotLeader { leader_addr: None }),
        Err(_) => Err(ProposeError::Unknown(Undecided::NoAnswer(wait))),
    }
}
