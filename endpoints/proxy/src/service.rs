//! The `MessagingService` calls: each answers with the protocol's `Status` in its response
//! (the clients read that code), and a gRPC error only for a request the transport could not
//! hand over.

use std::sync::Arc;
use std::time::Duration;

use rocketraft_client::brokers::Brokers;
use rocketraft_client::producer::Producer;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Request;
use tonic::Response;
use tonic::Streaming;

use crate::access::AccessKeys;
use crate::clients::Clients;
use crate::consume;
use crate::pb;
use crate::pb::messaging_service_server::MessagingService;
use crate::receive_stream::ReceiveStream;
use crate::renewals::Renewals;
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
    /// Who may call; a call from anyone else is answered with `UNAUTHORIZED` alone.
    pub access_keys: AccessKeys,
    /// The backoff consumers are told to nack with, by attempt.
    pub consumer_retry_delays: Arc<[Duration]>,
    /// Push consumers' deliveries this endpoint keeps invisible while they work on them.
    pub renewals: Arc<Renewals>,
    /// Ends the streams this service holds open when the endpoint stops.
    pub shutdown: CancellationToken,
}

/// Answers `$request` with a `$response` holding only the `UNAUTHORIZED` status, unless its
/// caller may call.
macro_rules! refuse_unauthorized {
    ($self:ident, $request:ident, $response:ty) => {
        if let Err(status) = $self.access_keys.check($request.metadata()) {
            return Ok(Response::new(<$response>::from_status(status)));
        }
    };
}

/// A response holding only a status.
trait FromStatus {
    fn from_status(status: pb::Status) -> Self;
}

macro_rules! from_status {
    ($($response:ty),+) => {
        $(impl FromStatus for $response {
            // Some responses hold nothing but the status.
            #[allow(clippy::needless_update)]
            fn from_status(status: pb::Status) -> Self {
                Self {
                    status: Some(status),
                    ..Self::default()
                }
            }
        })+
    };
}

from_status!(
    pb::QueryRouteResponse,
    pb::HeartbeatResponse,
    pb::SendMessageResponse,
    pb::QueryAssignmentResponse,
    pb::AckMessageResponse,
    pb::ForwardMessageToDeadLetterQueueResponse,
    pb::EndTransactionResponse,
    pb::NotifyClientTerminationResponse,
    pb::ChangeInvisibleDurationResponse
);

/// The header a 5.x client names itself in.
const CLIENT_ID_HEADER: &str = "x-mq-client-id";

fn client_id(metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    let value = metadata.get(CLIENT_ID_HEADER)?.to_str().ok()?;
    Some(value.to_owned())
}

type TelemetryStream = ReceiverStream<Result<pb::TelemetryCommand, tonic::Status>>;

#[tonic::async_trait]
impl MessagingService for Service {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Result<Response<pb::QueryRouteResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::QueryRouteResponse);
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
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::HeartbeatResponse);
        Ok(Response::new(pb::HeartbeatResponse {
            status: status::ok(),
        }))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::SendMessageResponse);
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
        refuse_unauthorized!(self, request, pb::QueryAssignmentResponse);
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
        let stream = match self.access_keys.check(request.metadata()) {
            Ok(()) => {
                let client_id = client_id(request.metadata());
                let termination = client_id
                    .as_deref()
                    .and_then(|client_id| self.clients.termination(client_id));
                consume::receive(
                    &self.brokers,
                    &self.renewals,
                    (client_id, termination),
                    request.into_inner(),
                )
                .await
            }
            Err(status) => ReceiveStream::new(
                vec![pb::ReceiveMessageResponse {
                    content: Some(pb::receive_message_response::Content::Status(status)),
                }],
                None,
            ),
        };
        Ok(Response::new(stream))
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Result<Response<pb::AckMessageResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::AckMessageResponse);
        Ok(Response::new(
            consume::ack(&self.brokers, &self.renewals, request.into_inner()).await,
        ))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<pb::ForwardMessageToDeadLetterQueueResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::ForwardMessageToDeadLetterQueueResponse);
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status: consume::forward_to_dead_letters(
                &self.brokers,
                &self.renewals,
                request.into_inner(),
            )
            .await,
        }))
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Result<Response<pb::EndTransactionResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::EndTransactionResponse);
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
        if let Err(status) = self.access_keys.check(request.metadata()) {
            let refusal = pb::TelemetryCommand {
                status: Some(status),
                command: None,
            };
            // The stream ends after it: the channel is new, so it has room.
            let _ = answers.try_send(Ok(refusal));
            return Ok(Response::new(ReceiverStream::new(stream)));
        }
        tokio::spawn(telemetry::serve_stream(
            client_id(request.metadata()),
            request.into_inner(),
            answers,
            self.clients.clone(),
            self.brokers.clone(),
            self.consumer_retry_delays.clone(),
            self.shutdown.clone(),
        ));
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn notify_client_termination(
        &self,
        request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Result<Response<pb::NotifyClientTerminationResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::NotifyClientTerminationResponse);
        if let Some(client_id) = client_id(request.metadata()) {
            self.clients.terminate(&client_id);
        }
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: status::ok(),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<pb::ChangeInvisibleDurationResponse>, tonic::Status> {
        refuse_unauthorized!(self, request, pb::ChangeInvisibleDurationResponse);
        Ok(Response::new(
            consume::change_invisible(&self.brokers, &self.renewals, request.into_inner()).await,
        ))
    }
}
