//! 5.x transactions on rocketraft's: a TRANSACTION message is stored as a half message of the
//! endpoint's producer group, and its transaction id says where (`<broker group>:<commit log
//! offset>`), so `EndTransaction` through any endpoint ends it. The brokers check unresolved
//! transactions back with the endpoints' producer group, one endpoint in turn; an endpoint
//! hands the check to a client of its own that publishes the topic, as
//! `RecoverOrphanedTransactionCommand` on its Telemetry stream, and the client answers with
//! an `EndTransaction` from the check. An endpoint without such a client answers nothing, and
//! the transaction is checked again later (through the next endpoint in turn).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rocketraft_client::brokers::CallError;
use rocketraft_client::message::MessageExt;
use rocketraft_client::producer::Producer;
use rocketraft_client::transaction::LocalTransactionState;
use rocketraft_client::transaction::TransactionChecker;
use rocketraft_domain::property_keys::REAL_TOPIC;

use crate::clients::Clients;
use crate::message::to_v5;
use crate::pb;
use crate::pb::Code;
use crate::status;

/// The transaction id of the half message stored at `commit_log_offset` in `group`.
pub fn transaction_id(group: &str, commit_log_offset: i64) -> String {
    format!("{group}:{commit_log_offset}")
}

/// The broker group and commit log offset a transaction id names.
fn parse_transaction_id(id: &str) -> Option<(&str, i64)> {
    let (group, offset) = id.rsplit_once(':')?;
    let offset = offset.parse().ok().filter(|offset| *offset >= 0)?;
    (!group.is_empty()).then_some((group, offset))
}

/// Ends the transaction `request` names with its resolution.
pub async fn end(producer: &Producer, request: pb::EndTransactionRequest) -> Option<pb::Status> {
    let Some((group, offset)) = parse_transaction_id(&request.transaction_id) else {
        return status::status(
            Code::InvalidTransactionId,
            format!(
                "transaction id {:?} is not one this endpoint gave out",
                request.transaction_id
            ),
        );
    };
    let state = match request.resolution() {
        pb::TransactionResolution::Commit => LocalTransactionState::Commit,
        pb::TransactionResolution::Rollback => LocalTransactionState::Rollback,
        // An unknown outcome ends nothing: the transaction is checked back later.
        pb::TransactionResolution::Unspecified => return status::ok(),
    };
    let from_check = request.source() == pb::TransactionSource::SourceServerCheck;
    match producer
        .end_transaction(group, &request.message_id, offset, state, from_check)
        .await
    {
        Ok(_) => status::ok(),
        Err(CallError::Rejected { status, .. }) => status::status(
            Code::InvalidTransactionId,
            format!(
                "transaction {} of message {}: {}",
                request.transaction_id,
                request.message_id,
                status.message()
            ),
        ),
        Err(error @ CallError::Unavailable { .. }) => {
            status::status(Code::HaNotAvailable, error.to_string())
        }
    }
}

/// Hands the brokers' check-backs to this endpoint's clients.
pub struct ForwardChecks {
    pub clients: Arc<Clients>,
}

impl TransactionChecker for ForwardChecks {
    fn check(
        &self,
        message: MessageExt,
    ) -> Pin<Box<dyn Future<Output = LocalTransactionState> + Send>> {
        let topic = message
            .properties
            .get(REAL_TOPIC)
            .unwrap_or(&message.topic)
            .to_owned();
        let command = pb::TelemetryCommand {
            status: None,
            command: Some(
                pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(
                    pb::RecoverOrphanedTransactionCommand {
                        message: Some(to_v5(&message, pb::MessageType::Transaction)),
                        transaction_id: transaction_id(&message.group, message.commit_log_offset),
                    },
                ),
            ),
        };
        if !self.clients.offer_to_publisher(&topic, command) {
            tracing::debug!(msg_id = message.msg_id, %topic, "no 5.x client of this endpoint publishes the topic; the check waits for the next round");
        }
        // The client answers with an `EndTransaction` of its own.
        Box::pin(async { LocalTransactionState::Unknown })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_id_names_its_group_and_offset() {
        let id = transaction_id("broker-a", 4096);
        assert_eq!(parse_transaction_id(&id), Some(("broker-a", 4096)));
        for forged in ["", "broker-a", ":12", "broker-a:-1", "broker-a:x"] {
            assert_eq!(parse_transaction_id(forged), None, "{forged:?}");
        }
    }
}
