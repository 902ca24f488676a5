//! The Prometheus scrape endpoint of the `broker` and `nameserver` binaries
//! (`metrics_listen`): `GET /metrics` over HTTP/1.1 answers the metrics the node renders at
//! that moment, as OpenMetrics text to a scraper that accepts it (Prometheus asks for it) and
//! otherwise in Prometheus's classic text format under `text/plain` (curl, `promtool check
//! metrics`); any other path is 404 and any other method 405.
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
/// Prometheus's classic text format, for scrapers that do not ask for OpenMetrics.
pub const CLASSIC_METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// The media type a scraper names in `Accept` to get OpenMetrics.
const OPENMETRICS_MEDIA_TYPE: &str = "application/openmetrics-text";
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
    } else if accepts_openmetrics(&request) {
        response(StatusCode::OK, METRICS_CONTENT_TYPE, render())
    } else {
        response(
            StatusCode::OK,
            CLASSIC_METRICS_CONTENT_TYPE,
            to_classic_text(&render()),
        )
    })
}

fn accepts_openmetrics(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains(OPENMETRICS_MEDIA_TYPE))
}

/// Rewrites OpenMetrics text (as `prometheus_client` writes it: counters, gauges and
/// histograms) in Prometheus's classic text format: a counter family `x` is named by its
/// sample `x_total` in its HELP and TYPE lines, its `x_created` samples go, and the `# UNIT`
/// and `# EOF` lines, which the classic format does not have, are dropped.
pub fn to_classic_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut classic = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let descriptor = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|prefix| Some((prefix, line.strip_prefix(prefix)?)));
        match descriptor {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                classic.push_str(prefix);
                classic.push_str(name);
                if counters.contains(name) {
                    classic.push_str("_total");
                }
                classic.push(' ');
                classic.push_str(tail);
            }
            None => {
                let sample = line.split(['{', ' ']).next().unwrap_or_default();
                let created = sample
                    .strip_suffix("_created")
                    .is_some_and(|family| counters.contains(family));
                if created {
                    continue;
                }
                classic.push_str(line);
            }
        }
        classic.push('\n');
    }
    classic
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_counters_become_classic_total_families() {
        let openmetrics = "# HELP rr_sends Sends.\n# TYPE rr_sends counter\n# UNIT rr_sends ops\n\
                           rr_sends_total{group=\"a\"} 3\nrr_sends_created 1.5\n\
                           # HELP rr_depth Depth.\n# TYPE rr_depth gauge\nrr_depth 7\n\
                           # HELP rr_ack Ack.\n# TYPE rr_ack histogram\n\
                           rr_ack_bucket{le=\"+Inf\"} 2\nrr_ack_sum 0.5\nrr_ack_count 2\n# EOF\n";
        assert_eq!(
            to_classic_text(openmetrics),
            "# HELP rr_sends_total Sends.\n# TYPE rr_sends_total counter\n\
             rr_sends_total{group=\"a\"} 3\n\
             # HELP rr_depth Depth.\n# TYPE rr_depth gauge\nrr_depth 7\n\
             # HELP rr_ack Ack.\n# TYPE rr_ack histogram\n\
             rr_ack_bucket{le=\"+Inf\"} 2\nrr_ack_sum 0.5\nrr_ack_count 2\n"
        );
    }
}
