//! The `MessagingService` calls: each answers with the protocol's `Status` in its response
//! (the clients read that code), and a gRPC error only for a request the transport could not
//! hand over.

use std::pin::Pin;
use std::sync::Arc;

use rocketraft_client::brokers::Brokers;
use rocketraft_client::producer::Producer;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Request;
use tonic::Response;
use tonic::Streaming;

use crate::clients::Clients;
use crate::consume;
use crate::pb;
use crate::pb::messaging_service_server::MessagingService;
use crate::route;
use crate::send;
use crate::status;
use crate::telemetry;
use crate::transaction;

/// Answers and commands a Telemetry stream holds before the client must read some; a
/// command finding it full goes to another client, or waits for its next round.
const TELEMETRY_COMMANDS_QUEUED_MAX: usize = 16;

pub struct Service {
    pub producer: Producer,
    /// Calls to the groups' leaders for consumers (pops, acks).
    pub brokers: Arc<Brokers>,
    /// The clients with a Telemetry stream open here.
    pub clients: Arc<Clients>,
    pub timer_max_delay_ms: u64,
    /// Ends the streams this service holds open when the endpoint stops.
    pub shutdown: CancellationToken,
}

type TelemetryStream = ReceiverStream<Result<pb::TelemetryCommand, tonic::Status>>;
type ReceiveStream =
    Pin<Box<dyn Stream<Item = Result<pb::ReceiveMessageResponse, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl MessagingService for Arc<Service> {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Result<Response<pb::QueryRouteResponse>, tonic::Status> {
        let local = request.local_addr();
        let request = request.into_inner();
        let topic = request.topic.clone().unwrap_or_default();
        let endpoints = route::access_point(request.endpoints, local);
        let response = match self.producer.route(&topic.name).await {
            Ok(route) => pb::QueryRouteResponse {
                status: status::ok(),
                message_queues: route::message_queues(&route, &topic, &endpoints),
            },
            Err(error) => pb::QueryRouteResponse {
                status: status::of_send_error(&error),
                message_queues: Vec::new(),
            },
        };
        Ok(Response::new(response))
    }

    async fn heartbeat(
        &self,
        _request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, tonic::Status> {
        Ok(Response::new(pb::HeartbeatResponse {
            status: status::ok(),
        }))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, tonic::Status> {
        let peer = request.remote_addr();
        let response = match send::to_batch(request.into_inner(), peer, self.timer_max_delay_ms) {
            Ok(batch) => send::send(&self.producer, batch).await,
            Err(refused) => pb::SendMessageResponse {
                status: status::status(refused.code, refused.reason),
                entries: Vec::new(),
            },
        };
        Ok(Response::new(response))
    }

    async fn query_assignment(
        &self,
        request: Request<pb::QueryAssignmentRequest>,
    ) -> Result<Response<pb::QueryAssignmentResponse>, tonic::Status> {
        let local = request.local_addr();
        let request = request.into_inner();
        let topic = request.topic.clone().unwrap_or_default();
        let endpoints = route::access_point(request.endpoints, local);
        let response = match self.producer.route(&topic.name).await {
            Ok(route) => pb::QueryAssignmentResponse {
                status: status::ok(),
                assignments: route::assignments(&route, &topic, &endpoints),
            },
            Err(error) => pb::QueryAssignmentResponse {
                status: status::of_send_error(&error),
                assignments: Vec::new(),
            },
        };
        Ok(Response::new(response))
    }

    type ReceiveMessageStream = ReceiveStream;

    async fn receive_message(
        &self,
        request: Request<pb::ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, tonic::Status> {
        let responses = consume::receive(&self.brokers, request.into_inner()).await;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            responses.into_iter().map(Ok),
        ))))
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Result<Response<pb::AckMessageResponse>, tonic::Status> {
        Ok(Response::new(
            consume::ack(&self.brokers, request.into_inner()).await,
        ))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<pb::ForwardMessageToDeadLetterQueueResponse>, tonic::Status> {
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status: consume::forward_to_dead_letters(&self.brokers, request.into_inner()).await,
        }))
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Result<Response<pb::EndTransactionResponse>, tonic::Status> {
        Ok(Response::new(pb::EndTransactionResponse {
            status: transaction::end(&self.producer, request.into_inner()).await,
        }))
    }

    type TelemetryStream = TelemetryStream;

    async fn telemetry(
        &self,
        request: Request<Streaming<pb::TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, tonic::Status> {
        let (answers, stream) = mpsc::channel(TELEMETRY_COMMANDS_QUEUED_MAX);
        tokio::spawn(telemetry::serve_stream(
            request.into_inner(),
            answers,
            self.clients.clone(),
            self.brokers.clone(),
            self.shutdown.clone(),
        ));
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn notify_client_termination(
        &self,
        _request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Result<Response<pb::NotifyClientTerminationResponse>, tonic::Status> {
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: status::ok(),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<pb::ChangeInvisibleDurationResponse>, tonic::Status> {
        Ok(Response::new(
            consume::change_invisible(&self.brokers, request.into_inner()).await,
        ))
    }
}
