//! The broker API as a drill's blackhole leaves it: while fault injection blackholes this
//! node ([`FaultPlan::blackhole`]), every call to it gets no answer until the heal, as calls
//! to a host that dropped off the network get none, so a drill shows what clients do then
//! without root or network namespaces. `InjectFault` itself still passes, so the drill can
//! heal the node. A node without fault injection passes every call straight through.
//!
//! What the hook cannot do is what the kernel does: the node's connections stay up and still
//! answer HTTP/2 pings, so clients notice the silence by their call timeouts, not by their
//! keep-alives (a vanished host is noticed by both).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::Context;
use std::task::Poll;

use rocketraft_proto::broker::broker_server::BrokerServer;
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::codegen::Service;
use tonic::codegen::http;
use tonic::server::NamedService;

use crate::raft::transport::faults::FaultPlan;
use crate::raft::types::NodeId;
use crate::service::BrokerService;

/// The path of the call that injects and heals faults, which a blackhole lets through.
const INJECT_FAULT_PATH: &str = "/rocketraft.broker.Broker/InjectFault";

/// The broker API, held silent while fault injection blackholes the node.
#[derive(Clone)]
pub struct BlackholeRoutes {
    generated: BrokerServer<BrokerService>,
    faults: Option<(NodeId, Arc<FaultPlan>)>,
}

impl BlackholeRoutes {
    /// Serves `generated`; `faults` is the node's own fault plan, if it takes faults.
    pub fn new(
        generated: BrokerServer<BrokerService>,
        faults: Option<(NodeId, Arc<FaultPlan>)>,
    ) -> BlackholeRoutes {
        BlackholeRoutes { generated, faults }
    }
}

impl NamedService for BlackholeRoutes {
    const NAME: &'static str = <BrokerServer<BrokerService> as NamedService>::NAME;
}

impl Service<http::Request<Body>> for BlackholeRoutes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<http::Request<Body>>::poll_ready(&mut self.generated, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let Some((node, faults)) = self.faults.clone() else {
            return self.generated.call(request);
        };
        if request.uri().path() == INJECT_FAULT_PATH {
            return self.generated.call(request);
        }
        let mut generated = self.generated.clone();
        Box::pin(async move {
            faults.held_while_blackholed(node).await;
            let response = generated.call(request).await;
            // An answer made while the node went silent is held too.
            faults.held_while_blackholed(node).await;
            response
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fault_path_is_the_generated_services() {
        let service = <BrokerServer<BrokerService> as NamedService>::NAME;
        assert_eq!(INJECT_FAULT_PATH, format!("/{service}/InjectFault"));
    }
}
