//! 4.x transactions: `END_TRANSACTION` (a producer commits or rolls back a half message, or
//! answers a check-back) and `CHECK_TRANSACTION_STATE`, the broker's check-back of a
//! transaction left open, sent to a producer of its group.
//!
//! A transactional producer heartbeats its producer group to broker id 0, the leader as its
//! last route named it. A node watches the check-backs of each producer group that has a 4.x
//! connection here, on the group leader (`WatchTransactionChecks`, as one watcher per node),
//! and sends each check to one of the group's connections in turn ([`super::peer_groups`]).
//! The producer answers with `END_TRANSACTION` (`fromTransactionCheck`) on that connection.
//!
//! Invariants: an end names its half message by its CommitLog offset and its unique id, which
//! the leader checks against the stored half message (a client takes the offset from the
//! offset message id its send was answered with); an end that is neither commit nor
//! rollback (`TRANSACTION_NOT_TYPE`, a producer that does not know yet) changes nothing and
//! leaves the transaction to its check-backs.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use rocketraft_client::brokers::Brokers;
use rocketraft_proto::broker as pb;

use super::Answered;
use super::BrokerHandler;
use super::peer_groups::Connection;
use super::peer_groups::PeerGroups;
use super::peer_groups::WATCH_OPEN_TIMEOUT;
use super::peer_groups::follow;
use super::read;
use crate::codes::request;
use crate::command::RemotingCommand;
use crate::connection::Peer;

/// `MessageSysFlag.TRANSACTION_NOT_TYPE`: the producer does not know the outcome yet.
const TRANSACTION_NOT_TYPE: i32 = 0;
/// `MessageSysFlag.TRANSACTION_COMMIT_TYPE`.
const TRANSACTION_COMMIT_TYPE: i32 = 0x8;
/// `MessageSysFlag.TRANSACTION_ROLLBACK_TYPE`.
const TRANSACTION_ROLLBACK_TYPE: i32 = 0xC;
/// Producer groups every 4.x client declares for itself, never transactional.
const CLIENT_INNER_PRODUCER_GROUPS: [&str; 2] = ["CLIENT_INNER_PRODUCER", "DEFAULT_PRODUCER"];

impl BrokerHandler {
    pub(super) async fn end_transaction(&self, request: &RemotingCommand) -> Answered {
        let (end, state) = read(request, |fields| {
            let end = pb::EndTransactionRequest {
                producer_group: fields.required_str("producerGroup")?.to_owned(),
                msg_id: fields.required_str("msgId")?.to_owned(),
                commit_log_offset: fields.required_i64("commitLogOffset")?,
                outcome: pb::TransactionOutcome::Unspecified as i32,
                from_check: fields
                    .optional_bool("fromTransactionCheck")?
                    .unwrap_or(false),
            };
            Ok((end, fields.required_i32("commitOrRollback")?))
        })?;
        let outcome = match state {
            TRANSACTION_COMMIT_TYPE => pb::TransactionOutcome::Commit,
            TRANSACTION_ROLLBACK_TYPE => pb::TransactionOutcome::Rollback,
            TRANSACTION_NOT_TYPE => return Ok(RemotingCommand::success(request, Bytes::new())),
            other => {
                return Err(Box::new(RemotingCommand::system_error(
                    request,
                    format!(
                        "commitOrRollback {other} is not {TRANSACTION_COMMIT_TYPE} (commit), \
                         {TRANSACTION_ROLLBACK_TYPE} (rollback) or {TRANSACTION_NOT_TYPE}"
                    ),
                )));
            }
        };
        let end = pb::EndTransactionRequest {
            outcome: outcome as i32,
            ..end
        };
        self.on_leader(request, |mut client, _| {
            let end = end.clone();
            async move { client.end_transaction(end).await }
        })
        .await?;
        Ok(RemotingCommand::success(request, Bytes::new()))
    }

    /// Follows `peer` as a connection of producer `group`, for its check-backs; a client's
    /// own inner producer groups have none.
    pub(super) fn follow_producer(&self, group: &str, peer: &Peer, connection: Connection) {
        if CLIENT_INNER_PRODUCER_GROUPS.contains(&group) {
            return;
        }
        let watch = ChecksWatch {
            brokers: self.brokers.clone(),
            broker_group: self.group.clone(),
            producers: self.producers.clone(),
            producer_group: group.to_owned(),
            watcher_id: format!("remoting@{}", self.own),
            next: Arc::default(),
        };
        follow(&self.producers, group, peer, connection, move || {
            watch.clone().watch_once()
        });
    }
}

/// The watch of one producer group's check-backs on the broker group's leader.
#[derive(Clone)]
struct ChecksWatch {
    brokers: Arc<Brokers>,
    broker_group: String,
    producers: Arc<PeerGroups>,
    producer_group: String,
    /// The name this node watches under.
    watcher_id: String,
    /// Which connection the next check goes to.
    next: Arc<AtomicUsize>,
}

impl ChecksWatch {
    /// One watch, until it ends: each check goes to one of the group's connections.
    async fn watch_once(self) -> Result<(), String> {
        let request = pb::WatchTransactionChecksRequest {
            producer_group: self.producer_group.clone(),
            client_id: self.watcher_id.clone(),
        };
        let mut checks = self
            .brokers
            .on_leader(&self.broker_group, WATCH_OPEN_TIMEOUT, |mut client, _| {
                let request = request.clone();
                async move { Ok(client.watch_transaction_checks(request).await?.into_inner()) }
            })
            .await
            .map_err(|error| error.to_string())?;
        loop {
            match checks.message().await {
                Ok(Some(check)) => self.send_check(check),
                Ok(None) => return Ok(()),
                Err(status) => {
                    self.brokers.leader_failed(&self.broker_group, &status);
                    return Err(status.to_string());
                }
            }
        }
    }

    /// Sends `check` to the next of the group's connections that takes it; with none, the
    /// leader checks again at its next round.
    fn send_check(&self, check: pb::TransactionCheck) {
        let peers = self.producers.peers(&self.producer_group);
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let command = check_command(&check);
        let sent = (0..peers.len())
            .map(|turn| &peers[(first + turn) % peers.len()])
            .any(|peer| peer.send_oneway(command.clone()));
        if !sent {
            tracing::debug!(
                group = self.producer_group,
                msg_id = check.msg_id,
                "no 4.x producer of the group took a check-back"
            );
        }
    }
}

/// The `CHECK_TRANSACTION_STATE` request of `check`: the half message's places and id, and
/// the message as a stored record.
fn check_command(check: &pb::TransactionCheck) -> RemotingCommand {
    let mut command = RemotingCommand {
        code: request::CHECK_TRANSACTION_STATE,
        version: crate::BROKER_VERSION,
        body: check.stored_record.clone(),
        ..RemotingCommand::default()
    };
    let (queue_offset, commit_log_offset) = check.message.as_ref().map_or((0, 0), |message| {
        (message.queue_offset, message.commit_log_offset)
    });
    let fields = &mut command.ext_fields;
    fields.insert("tranStateTableOffset", queue_offset.to_string());
    fields.insert("commitLogOffset", commit_log_offset.to_string());
    fields.insert("msgId", check.msg_id.clone());
    fields.insert("transactionId", check.msg_id.clone());
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_names_the_half_message_and_carries_its_record() {
        let check = pb::TransactionCheck {
            message: Some(pb::PulledMessage {
                queue_offset: 4,
                commit_log_offset: 8192,
                ..pb::PulledMessage::default()
            }),
            msg_id: "ID".into(),
            check_times: 1,
            stored_record: Bytes::from_static(b"record"),
        };
        let command = check_command(&check);
        assert_eq!(command.code, request::CHECK_TRANSACTION_STATE);
        let field = |name| command.ext_fields.get(name);
        assert_eq!(field("tranStateTableOffset"), Some("4"));
        assert_eq!(field("commitLogOffset"), Some("8192"));
        assert_eq!(
            (field("msgId"), field("transactionId")),
            (Some("ID"), Some("ID"))
        );
        assert_eq!(&command.body[..], b"record");
    }
}
