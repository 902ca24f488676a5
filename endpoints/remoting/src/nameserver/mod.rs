//! The nameserver's 4.x face: what 4.x clients and tools ask a nameserver, answered from its
//! route registry. Routes (`GET_ROUTEINFO_BY_TOPIC`, and `TBW102`'s for topics created on
//! first send), the cluster (`GET_BROKER_CLUSTER_INFO`) and the topic list
//! (`GET_ALL_TOPIC_LIST_FROM_NAMESERVER`); `GET_KV_CONFIG` finds nothing, as rocketraft keeps
//! no KV config (the Java producer asks it for ordered topics' `ORDER_TOPIC_CONFIG`).
//!
//! Invariant: an answer is read from the registry as it is at the request; nothing is cached
//! here, so a 4.x client sees a new leader as soon as a 5.x or rocketraft client does.

mod route_data;

use rocketraft_nameserver::service::SharedRegistry;

use crate::codes::request;
use crate::codes::response;
use crate::command::RemotingCommand;
use crate::connection::Handler;
use crate::connection::Peer;
use route_data::ClusterInfo;
use route_data::TopicList;
use route_data::TopicRouteData;

/// Answers 4.x clients' nameserver requests from `registry`.
#[derive(Clone)]
pub struct NameServerHandler {
    registry: SharedRegistry,
}

impl NameServerHandler {
    pub fn new(registry: SharedRegistry) -> NameServerHandler {
        NameServerHandler { registry }
    }

    fn route(&self, request: &RemotingCommand) -> RemotingCommand {
        let topic = match request.ext_fields.required_str("topic") {
            Ok(topic) => topic,
            Err(error) => return RemotingCommand::system_error(request, error),
        };
        match self.registry.lock().topic_route(topic) {
            Some(route) => json_reply(request, &TopicRouteData::of(&route)),
            None => RemotingCommand::response_to(
                request,
                response::TOPIC_NOT_EXIST,
                Some(format!(
                    "No topic route info in name server for the topic: {topic}"
                )),
            ),
        }
    }
}

impl Handler for NameServerHandler {
    async fn handle(&self, request: RemotingCommand, _peer: &Peer) -> RemotingCommand {
        match request.code {
            request::GET_ROUTEINFO_BY_TOPIC => self.route(&request),
            request::GET_BROKER_CLUSTER_INFO => {
                let info = self.registry.lock().cluster_info();
                json_reply(&request, &ClusterInfo::of(&info))
            }
            request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => {
                let list = self.registry.lock().topic_list();
                json_reply(&request, &TopicList::of(list))
            }
            request::GET_KV_CONFIG => {
                let field = |name| request.ext_fields.get(name).unwrap_or_default();
                let remark = format!(
                    "No config item, Namespace: {} Key: {}",
                    field("namespace"),
                    field("key")
                );
                RemotingCommand::response_to(&request, response::QUERY_NOT_FOUND, Some(remark))
            }
            _ => RemotingCommand::not_supported(&request),
        }
    }
}

/// A `SUCCESS` reply whose body is `body` in compact JSON.
fn json_reply(request: &RemotingCommand, body: &impl serde::Serialize) -> RemotingCommand {
    match serde_json::to_vec(body) {
        Ok(json) => RemotingCommand::success(request, json),
        Err(error) => {
            RemotingCommand::system_error(request, format!("encoding the answer: {error}"))
        }
    }
}
