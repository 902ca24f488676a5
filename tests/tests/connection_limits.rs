//! Servers cap their connections and the calls open on each: at the cap everything is served,
//! one past it is refused (a connection, with HTTP/2's own answer) or queued by the client (a
//! call), and a freed place is used again.

use std::time::Duration;

use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_proto::broker as pb;
use rocketraft_proto::nameserver as ns_pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;
use rocketraft_server_kit::connection_limit::refusal_frames;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::start_nameserver;
use rocketraft_tests::wait_for;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn given_connections_max_open_the_next_connection_should_be_refused_until_one_closes()
-> anyhow::Result<()> {
    init_tracing();
    const MAX: usize = 2;
    let nameserver = start_nameserver(NameServerConfig {
        connections_max: MAX,
        ..NameServerConfig::default()
    })
    .await?;
    let addr = nameserver.addr();

    info!("--- {MAX} connections are served; one more is told why and closed");
    let first = TcpStream::connect(addr).await?;
    let _second = TcpStream::connect(addr).await?;
    let mut refused = TcpStream::connect(addr).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(TIMEOUT, refused.read_to_end(&mut answer)).await??;
    // HTTP/2 frames (RFC 9113): 3-byte length, type, flags, 4-byte stream id, payload.
    assert_eq!(
        &answer[..9],
        &[0, 0, 0, 0x4, 0, 0, 0, 0, 0],
        "an empty SETTINGS first"
    );
    assert_eq!(answer[9 + 3], 0x7, "then GOAWAY");
    let error_code = u32::from_be_bytes(answer[9 + 9 + 4..9 + 9 + 8].try_into()?);
    assert_eq!(error_code, 0xb, "ENHANCE_YOUR_CALM");
    assert_eq!(answer, refusal_frames());

    info!("--- once one closes, a client is served again");
    drop(first);
    let info = wait_for("a freed connection place", TIMEOUT, || async {
        let mut client = NameServerClient::connect(format!("http://{addr}"))
            .await
            .ok()?;
        client
            .get_cluster_info(ns_pb::GetClusterInfoRequest {})
            .await
            .ok()
    })
    .await?;
    assert!(info.into_inner().groups.is_empty());
    nameserver.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_streams_per_connection_max_calls_open_the_next_call_should_wait_for_one_to_end()
-> anyhow::Result<()> {
    init_tracing();
    const STREAMS: u32 = 2;
    let group = TestGroup::start(1, 0x5EED_0C01, |config| {
        config.streams_per_connection_max = STREAMS;
    })
    .await?;
    let node = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(node).await?;
    client
        .send(send_request("Held", 0, [b"first".to_vec()]))
        .await?;
    let held_pull = || pb::PullRequest {
        group: "readers".into(),
        topic: "Held".into(),
        queue_id: 0,
        queue_offset: 1,
        max_messages: 1,
        tags: Vec::new(),
        max_wait_ms: 15_000,
        sql: String::new(),
        stored_records: false,
    };

    info!("--- {STREAMS} held pulls fill one connection");
    let held: Vec<_> = (0..STREAMS)
        .map(|_| {
            let mut client = client.clone();
            let request = held_pull();
            tokio::spawn(async move { client.pull(request).await })
        })
        .collect();
    wait_for("both pulls held", TIMEOUT, || async {
        (group.status(node).await.ok()?.pulls_held == u64::from(STREAMS)).then_some(())
    })
    .await?;

    info!("--- a third call on that connection waits; other connections are served");
    let mut queued_client = client.clone();
    let mut queued =
        tokio::spawn(async move { queued_client.node_status(pb::NodeStatusRequest {}).await });
    let waited = tokio::time::timeout(Duration::from_millis(500), &mut queued).await;
    assert!(waited.is_err(), "the call past the cap must wait");
    group
        .client(node)
        .await?
        .send(send_request("Held", 0, [b"second".to_vec()]))
        .await?;
    for pull in held {
        assert_eq!(
            pull.await??.into_inner().messages[0].body.as_ref(),
            b"second"
        );
    }
    // It went through once a held pull ended.
    let status = tokio::time::timeout(TIMEOUT, queued).await???;
    assert_eq!(status.into_inner().node_id, node);
    group.shutdown().await;
    Ok(())
}
