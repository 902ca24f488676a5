//! The nameserver's gRPC service over the shared [`RouteRegistry`].

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Instant;

use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_server::NameServer;
use tonic::Request;
use tonic::Response;
use tonic::Status;

use crate::registry::RouteRegistry;

/// The registry behind a lock held only for in-memory work, never across `.await`.
#[derive(Clone, Default)]
pub struct SharedRegistry(Arc<Mutex<RouteRegistry>>);

impl SharedRegistry {
    pub fn lock(&self) -> MutexGuard<'_, RouteRegistry> {
        // The registry is rebuilt from registrations anyway; a panic mid-update leaves at
        // worst one stale entry, so keep serving.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub struct NameServerService {
    registry: SharedRegistry,
}

impl NameServerService {
    pub fn new(registry: SharedRegistry) -> NameServerService {
        NameServerService { registry }
    }
}

fn validate(registration: &pb::RegisterBrokerRequest) -> Result<(), Status> {
    if registration.group.is_empty() || registration.addr.is_empty() {
        return Err(Status::invalid_argument(
            "a registration names its group and address",
        ));
    }
    if registration.role() == pb::Role::Unknown {
        return Err(Status::invalid_argument(
            "a registration states the node's role",
        ));
    }
    Ok(())
}

#[tonic::async_trait]
impl NameServer for NameServerService {
    async fn register_broker(
        &self,
        request: Request<pb::RegisterBrokerRequest>,
    ) -> Result<Response<pb::RegisterBrokerResponse>, Status> {
        let registration = request.into_inner();
        validate(&registration)?;
        self.registry.lock().register(registration, Instant::now());
        Ok(Response::new(pb::RegisterBrokerResponse {}))
    }

    async fn get_topic_route(
        &self,
        request: Request<pb::GetTopicRouteRequest>,
    ) -> Result<Response<pb::TopicRoute>, Status> {
        let topic = request.into_inner().topic;
        let route = self.registry.lock().topic_route(&topic);
        route
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no broker group serves topic {topic:?}")))
    }

    async fn get_cluster_info(
        &self,
        _request: Request<pb::GetClusterInfoRequest>,
    ) -> Result<Response<pb::ClusterInfo>, Status> {
        Ok(Response::new(self.registry.lock().cluster_info()))
    }

    async fn get_topic_list(
        &self,
        _request: Request<pb::GetTopicListRequest>,
    ) -> Result<Response<pb::TopicList>, Status> {
        Ok(Response::new(self.registry.lock().topic_list()))
    }
}
