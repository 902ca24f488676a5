//! The nameserver's gRPC service over the shared [`RouteRegistry`].

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Instant;

use rocketraft_domain::secrets::CLUSTER_SECRET_HEADER;
use rocketraft_proto::common::ResponseCode;
use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_server::NameServer;
use tonic::Request;
use tonic::Response;
use tonic::Status;

use crate::metrics::NameServerMetrics;
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
    metrics: Arc<NameServerMetrics>,
    /// Registrations must carry it, when one is configured.
    cluster_secret: Option<String>,
}

impl NameServerService {
    pub fn new(
        registry: SharedRegistry,
        metrics: Arc<NameServerMetrics>,
        cluster_secret: Option<String>,
    ) -> NameServerService {
        NameServerService {
            registry,
            metrics,
            cluster_secret,
        }
    }
}

/// What the nameserver refuses, each with its one wire code.
#[derive(Debug, thiserror::Error)]
pub enum NameServerError {
    #[error("no broker group serves topic {topic:?}")]
    RouteNotFound { topic: String },
    #[error("bad registration: {0}")]
    BadRegistration(&'static str),
    #[error(
        "registration refused: it lacks this nameserver's cluster secret ({CLUSTER_SECRET_HEADER})"
    )]
    NoClusterSecret,
}

impl NameServerError {
    pub fn code(&self) -> ResponseCode {
        match self {
            NameServerError::RouteNotFound { .. } => ResponseCode::TopicRouteNotExist,
            NameServerError::BadRegistration(_) => ResponseCode::BadRequest,
            NameServerError::NoClusterSecret => ResponseCode::NoPermission,
        }
    }
}

impl From<NameServerError> for Status {
    fn from(error: NameServerError) -> Self {
        let grpc_code = match error {
            NameServerError::RouteNotFound { .. } => tonic::Code::NotFound,
            NameServerError::BadRegistration(_) => tonic::Code::InvalidArgument,
            NameServerError::NoClusterSecret => tonic::Code::PermissionDenied,
        };
        rocketraft_proto::error_status(grpc_code, error.code(), error.to_string(), None)
    }
}

fn validate(registration: &pb::RegisterBrokerRequest) -> Result<(), NameServerError> {
    if registration.group.is_empty() || registration.addr.is_empty() {
        return Err(NameServerError::BadRegistration(
            "a registration names its group and address",
        ));
    }
    if registration.role() == pb::Role::Unknown {
        return Err(NameServerError::BadRegistration(
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
        if let Some(secret) = &self.cluster_secret
            && !rocketraft_domain::secrets::carries(&request, CLUSTER_SECRET_HEADER, secret)
        {
            tracing::warn!(peer = ?request.remote_addr(), "registration refused: no or wrong cluster secret");
            NameServerMetrics::count(&self.metrics.registrations, "refused");
            return Err(NameServerError::NoClusterSecret.into());
        }
        let registration = request.into_inner();
        if let Err(error) = validate(&registration) {
            NameServerMetrics::count(&self.metrics.registrations, "refused");
            return Err(error.into());
        }
        self.registry.lock().register(registration, Instant::now());
        NameServerMetrics::count(&self.metrics.registrations, "accepted");
        Ok(Response::new(pb::RegisterBrokerResponse {}))
    }

    async fn get_topic_route(
        &self,
        request: Request<pb::GetTopicRouteRequest>,
    ) -> Result<Response<pb::TopicRoute>, Status> {
        let topic = request.into_inner().topic;
        let route = self.registry.lock().topic_route(&topic);
        let outcome = if route.is_some() {
            "found"
        } else {
            "not_found"
        };
        NameServerMetrics::count(&self.metrics.route_queries, outcome);
        route
            .map(Response::new)
            .ok_or_else(|| NameServerError::RouteNotFound { topic }.into())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_topic_is_answered_with_its_own_code() {
        let status = Status::from(NameServerError::RouteNotFound {
            topic: "Nowhere".into(),
        });
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(
            rocketraft_proto::response_code(&status),
            Some(ResponseCode::TopicRouteNotExist)
        );
        assert!(status.message().contains("\"Nowhere\""));
    }
}
