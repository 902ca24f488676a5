//! The Prometheus scrape endpoint of the `broker` and `nameserver` binaries
//! (`metrics_listen`): `GET /metrics` over HTTP/1.1 answers the OpenMetrics text the node
//! renders at that moment; any other path is 404 and any other method 405.
//!
//! Invariants: at most [`METRICS_CONNECTIONS_MAX`] connections are served at once (more are
//! closed at once), a connection idle for [`METRICS_CONNECTION_IDLE_MAX`] is closed, and the
//! endpoint stops with the node's shutdown token. Rendering never blocks the node: it reads
//! counters and a snapshot of the node's state.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::Method;
use hyper::Request;
use hyper::Response;
use hyper::StatusCode;
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The path Prometheus scrapes.
pub const METRICS_PATH: &str = "/metrics";
/// The exposition format `prometheus_client::encoding::text::encode` writes.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Scrape connections served at once, at most.
pub const METRICS_CONNECTIONS_MAX: usize = 64;
/// A scrape connection with no request for this long is closed.
pub const METRICS_CONNECTION_IDLE_MAX: Duration = Duration::from_secs(60);

/// Renders the node's metrics for one scrape.
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves scrapes on `listener` until `shutdown`.
pub async fn serve_metrics(
    listener: TcpListener,
    render: RenderMetrics,
    shutdown: CancellationToken,
) {
    let connections = Arc::new(Semaphore::new(METRICS_CONNECTIONS_MAX));
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "metrics endpoint: too many scrape connections; closing one");
            continue;
        };
        let render = render.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| answer(request, render.clone()));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(METRICS_CONNECTION_IDLE_MAX)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = shutdown.cancelled() => {}
                served = connection => if let Err(error) = served {
                    tracing::debug!(%peer, %error, "metrics endpoint: connection ended");
                },
            }
            drop(permit);
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    render: RenderMetrics,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = |status: StatusCode, content_type: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response.headers_mut().insert(CONTENT_TYPE, value);
        }
        response
    };
    let text = "text/plain; charset=utf-8";
    Ok(if request.uri().path() != METRICS_PATH {
        response(
            StatusCode::NOT_FOUND,
            text,
            format!("only {METRICS_PATH} is served\n"),
        )
    } else if request.method() != Method::GET {
        response(
            StatusCode::METHOD_NOT_ALLOWED,
            text,
            "GET only\n".to_owned(),
        )
    } else {
        response(StatusCode::OK, METRICS_CONTENT_TYPE, render())
    })
}
