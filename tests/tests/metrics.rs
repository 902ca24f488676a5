//! `/metrics` scraped over HTTP, as Prometheus would: a 3-node group and a nameserver with
//! `metrics_listen` set; after sends, a pull and a committed offset, the leader's text shows
//! what went in and out, its role, each follower's replication lag and the consumer group's
//! lag, and the nameserver's shows the registrations it took. Other paths and methods are
//! refused, and a scrape connection past `METRICS_CONNECTIONS_MAX` is closed.

use std::time::Duration;

use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_proto::broker as pb;
use rocketraft_server_kit::metrics_endpoint::CLASSIC_METRICS_CONTENT_TYPE;
use rocketraft_server_kit::metrics_endpoint::METRICS_CONNECTIONS_MAX;
use rocketraft_server_kit::metrics_endpoint::METRICS_CONTENT_TYPE;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::pull_request;
use rocketraft_tests::send_request;
use rocketraft_tests::start_nameserver;
use rocketraft_tests::wait_for;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;

const TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "Metered";
const SENT: usize = 10;
const COMMITTED: i64 = 4;

/// One HTTP/1.1 request; returns the status line, the headers and the body.
async fn http(addr: std::net::SocketAddr, method: &str, path: &str) -> anyhow::Result<String> {
    http_accepting(addr, method, path, "*/*").await
}

/// [`http`] with an `Accept` header.
async fn http_accepting(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    accept: &str,
) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

/// The value of the sample whose line starts with `series` (name and labels, exactly).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_traffic_metrics_should_show_it_over_http() -> anyhow::Result<()> {
    init_tracing();
    let nameserver = start_nameserver(NameServerConfig {
        metrics_listen: "127.0.0.1:0".parse().ok(),
        ..NameServerConfig::default()
    })
    .await?;
    let namesrv = nameserver.addr().to_string();
    let group = TestGroup::start(3, 0x5EED_1102, |config| {
        config.metrics_listen = "127.0.0.1:0".parse().ok();
        config.namesrv = vec![namesrv.clone()];
    })
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(leader).await?;
    for i in 0..SENT {
        client
            .send(send_request(TOPIC, 0, [format!("m{i}").into_bytes()]))
            .await?;
    }
    let pulled = client.pull(pull_request(TOPIC, 0, 0)).await?.into_inner();
    assert_eq!(pulled.messages.len(), SENT);
    client
        .commit_offsets(pb::CommitOffsetsRequest {
            group: "readers".into(),
            offsets: vec![pb::QueueOffsetEntry {
                topic: TOPIC.into(),
                queue_id: 0,
                offset: COMMITTED,
            }],
        })
        .await?;

    let metrics_addr = group
        .node(leader)
        .metrics_addr()
        .expect("metrics_listen set");
    // What Prometheus asks for.
    let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let response = http_accepting(metrics_addr, "GET", "/metrics", accept).await?;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains(METRICS_CONTENT_TYPE), "{response}");
    assert!(response.trim_end().ends_with("# EOF"), "{response}");
    assert!(response.contains("# TYPE rocketraft_broker_messages_in counter"));
    // What curl and promtool get: the classic format, counters named by their samples.
    let classic = http(metrics_addr, "GET", "/metrics").await?;
    assert!(classic.contains(CLASSIC_METRICS_CONTENT_TYPE), "{classic}");
    assert!(classic.contains("# TYPE rocketraft_broker_messages_in_total counter"));
    assert!(!classic.contains("# EOF"), "{classic}");
    let text = response;
    let topic = format!("{{topic=\"{TOPIC}\"}}");
    assert_eq!(
        sample(
            &text,
            &format!("rocketraft_broker_messages_in_total{topic}")
        ),
        Some(SENT as f64),
        "{text}"
    );
    // Bodies "m0".."m9": two bytes each.
    assert_eq!(
        sample(&text, &format!("rocketraft_broker_bytes_in_total{topic}")),
        Some(2.0 * SENT as f64)
    );
    assert_eq!(
        sample(
            &text,
            &format!("rocketraft_broker_messages_out_total{topic}")
        ),
        Some(SENT as f64)
    );
    assert_eq!(
        sample(&text, "rocketraft_broker_send_seconds_count"),
        Some(SENT as f64)
    );
    assert!(sample(&text, "rocketraft_broker_commit_seconds_count") >= Some(SENT as f64));
    assert_eq!(sample(&text, "rocketraft_broker_raft_is_leader"), Some(1.0));
    assert!(sample(&text, "rocketraft_broker_raft_applied_index") >= Some(SENT as f64));
    assert!(
        sample(&text, "rocketraft_broker_raft_log_bytes") > Some(0.0),
        "the log holds the sends"
    );
    assert_eq!(
        sample(
            &text,
            &format!(
                "rocketraft_broker_consumer_lag{{group=\"readers\",topic=\"{TOPIC}\",queue=\"0\"}}"
            )
        ),
        Some((SENT as i64 - COMMITTED) as f64),
        "{text}"
    );
    for follower in [1, 2, 3].into_iter().filter(|id| *id != leader) {
        let lag = format!("rocketraft_broker_raft_replication_lag{{node=\"{follower}\"}}");
        assert!(
            sample(&text, &lag).is_some_and(|lag| lag >= 0.0),
            "{lag}: {text}"
        );
    }
    assert!(sample(&text, "rocketraft_broker_commit_log_max_offset") > Some(0.0));
    assert!(sample(&text, "rocketraft_broker_process_cpu_seconds_total") > Some(0.0));
    assert!(sample(&text, "rocketraft_broker_process_resident_memory_bytes") > Some(0.0));

    let follower = group.a_follower(leader);
    let text = http(
        group
            .node(follower)
            .metrics_addr()
            .expect("metrics_listen set"),
        "GET",
        "/metrics",
    )
    .await?;
    assert_eq!(sample(&text, "rocketraft_broker_raft_is_leader"), Some(0.0));

    let not_found = http(metrics_addr, "GET", "/elsewhere").await?;
    assert!(not_found.starts_with("HTTP/1.1 404"), "{not_found}");
    let not_allowed = http(metrics_addr, "POST", "/metrics").await?;
    assert!(not_allowed.starts_with("HTTP/1.1 405"), "{not_allowed}");

    let nameserver_metrics = nameserver.metrics_addr().expect("metrics_listen set");
    wait_for(
        "the nameserver to count the group's nodes",
        TIMEOUT,
        || async {
            let text = http(nameserver_metrics, "GET", "/metrics").await.ok()?;
            (sample(&text, "rocketraft_nameserver_nodes") == Some(3.0)
                && sample(
                    &text,
                    "rocketraft_nameserver_registrations_total{outcome=\"accepted\"}",
                ) >= Some(3.0))
            .then_some(())
        },
    )
    .await?;
    group.shutdown().await;
    nameserver.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_most_scrape_connections_one_more_should_be_closed() -> anyhow::Result<()> {
    init_tracing();
    let nameserver = start_nameserver(NameServerConfig {
        metrics_listen: "127.0.0.1:0".parse().ok(),
        ..NameServerConfig::default()
    })
    .await?;
    let addr = nameserver.metrics_addr().expect("metrics_listen set");
    let mut held = Vec::new();
    for _ in 0..METRICS_CONNECTIONS_MAX {
        held.push(tokio::net::TcpStream::connect(addr).await?);
    }
    // The connections are accepted in order: all the held ones take a place first.
    // Closed at once: the request finds the connection shut (or reset), never answered.
    let response = http(addr, "GET", "/metrics").await.unwrap_or_default();
    assert!(
        response.is_empty(),
        "connection {} is closed unanswered: {response}",
        METRICS_CONNECTIONS_MAX + 1
    );
    held.pop();
    wait_for("a place to free up", TIMEOUT, || async {
        http(addr, "GET", "/metrics")
            .await
            .ok()
            .filter(|response| response.starts_with("HTTP/1.1 200"))
    })
    .await?;
    drop(held);
    nameserver.shutdown().await;
    Ok(())
}
