//! `NOTIFY_CONSUMER_IDS_CHANGED`: a 4.x consumer rebalances at once when its group's members
//! change, told so by the brokers it heartbeats, instead of at its next 20 s rebalance.
//!
//! A node watches the membership of each consumer group that has a 4.x connection here, on
//! the group leader (`WatchConsumers`), and on every change sends the notice to each of the
//! group's connections ([`super::peer_groups`]). A client heartbeats every broker it reads
//! from, so every member hears of a change from each node it is connected to.

use std::sync::Arc;

use rocketraft_client::brokers::Brokers;
use rocketraft_proto::broker as pb;

use super::BrokerHandler;
use super::peer_groups::Connection;
use super::peer_groups::PeerGroups;
use super::peer_groups::WATCH_OPEN_TIMEOUT;
use super::peer_groups::follow;
use crate::codes::request;
use crate::command::RemotingCommand;
use crate::connection::Peer;

impl BrokerHandler {
    /// Follows `peer` as a member connection of consumer `group`, for its notices.
    pub(super) fn follow_consumer(&self, group: &str, peer: &Peer, connection: Connection) {
        let (brokers, broker_group) = (self.brokers.clone(), self.group.clone());
        let (consumers, consumer_group) = (self.consumers.clone(), group.to_owned());
        follow(&self.consumers, group, peer, connection, move || {
            watch_members(
                brokers.clone(),
                broker_group.clone(),
                consumers.clone(),
                consumer_group.clone(),
            )
        });
    }
}

/// One watch of `group`'s members on `broker_group`'s leader, until it ends: each change is
/// sent to the group's connections in `consumers`.
async fn watch_members(
    brokers: Arc<Brokers>,
    broker_group: String,
    consumers: Arc<PeerGroups>,
    group: String,
) -> Result<(), String> {
    let request = pb::WatchConsumersRequest {
        group: group.clone(),
    };
    let mut changes = brokers
        .on_leader(&broker_group, WATCH_OPEN_TIMEOUT, |mut client, _| {
            let request = request.clone();
            async move { Ok(client.watch_consumers(request).await?.into_inner()) }
        })
        .await
        .map_err(|error| error.to_string())?;
    loop {
        match changes.message().await {
            Ok(Some(_changed)) => {
                let told = consumers
                    .peers(&group)
                    .iter()
                    .filter(|peer| peer.send_oneway(ids_changed(&group)))
                    .count();
                tracing::debug!(group, told, "consumer group changed; notices sent");
            }
            Ok(None) => return Ok(()),
            Err(status) => {
                brokers.leader_failed(&broker_group, &status);
                return Err(status.to_string());
            }
        }
    }
}

/// The notice that `group`'s members changed.
fn ids_changed(group: &str) -> RemotingCommand {
    let mut notice = RemotingCommand {
        code: request::NOTIFY_CONSUMER_IDS_CHANGED,
        version: crate::BROKER_VERSION,
        ..RemotingCommand::default()
    };
    notice.ext_fields.insert("consumerGroup", group);
    notice
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_names_its_group() {
        let notice = ids_changed("G");
        assert_eq!(notice.code, request::NOTIFY_CONSUMER_IDS_CHANGED);
        assert_eq!(notice.ext_fields.get("consumerGroup"), Some("G"));
        assert!(notice.body.is_empty());
    }
}
