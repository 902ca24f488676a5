//! TLS: a group whose nodes serve TLS on the broker API and mutual TLS on the Raft port, and
//! a nameserver serving TLS, elect, register, replicate and serve the SDK's producer and
//! admin client through a CA they trust; a plain-text client (of a broker or of the
//! nameserver), a client that trusts another CA, and a caller of the Raft port without a
//! certificate from the group's CA are all turned away, and so is 4.x remoting, which has no
//! TLS.

use std::time::Duration;

use anyhow::Context;
use futures::SinkExt;
use futures::StreamExt;

use rocketraft_client::admin::Admin;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::connector::Connector;
use rocketraft_client::group::connect;
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::route::RouteCache;
use rocketraft_client::subscription::Subscription;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_proto::broker as pb;
use rocketraft_proto::raft as raft_pb;
use rocketraft_proto::raft::raft_client::RaftClient;
use rocketraft_remoting::ExtFields;
use rocketraft_remoting::RemotingCodec;
use rocketraft_remoting::RemotingCommand;
use rocketraft_remoting::codes::request;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::start_nameserver;
use rocketraft_tests::tls::TestCerts;
use rocketraft_tests::wait_for;
use tokio::net::TcpStream;
use tokio_util::codec::Framed;
use tonic::transport::Certificate;
use tonic::transport::ClientTlsConfig;
use tonic::transport::Endpoint;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_tls_the_group_should_serve_only_clients_and_peers_that_trust_its_ca()
-> anyhow::Result<()> {
    init_tracing();
    let certs = TestCerts::generate("rocketraft test CA")?;
    let nameserver = start_nameserver(NameServerConfig {
        tls: Some(certs.server_files()),
        ..NameServerConfig::default()
    })
    .await?;
    let namesrv = nameserver.addr().to_string();
    let group = TestGroup::start(3, 0x5EED_7150, |config| {
        config.tls = Some(certs.settings());
        config.namesrv = vec![namesrv.clone()];
    })
    .await?;

    info!("--- the nodes elect a leader over mutual TLS on their Raft ports");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let follower = group.a_follower(leader);

    info!("--- the SDK sends through a CA it trusts; every node applies it");
    let producer = Producer::builder(vec![namesrv.clone()], "tls-producer")
        .tls(certs.client_tls())
        .build()?;
    let sent = wait_for("a send over TLS", TIMEOUT, || async {
        producer
            .send(Message::new("Secured", "sealed").with_tags("T"))
            .await
            .ok()
    })
    .await?;
    group.wait_all_applied(leader, TIMEOUT).await?;
    let admin = Admin::new(vec![namesrv.clone()]).with_tls(certs.client_tls());
    let consumed = admin
        .consume(&ConsumeRequest {
            topic: "Secured".into(),
            consumer_group: "tls-reader".into(),
            subscription: Subscription::All,
            from: ConsumeFrom::First,
            count: 1,
            timeout: TIMEOUT,
            reconsume_later: 0,
        })
        .await?;
    assert_eq!(consumed.len(), 1);
    assert_eq!(
        (consumed[0].msg_id.as_str(), consumed[0].body.as_str()),
        (sent.msg_id.as_str(), "sealed")
    );

    info!("--- plain text: no route from the nameserver");
    let plain_routes = RouteCache::new(vec![namesrv.clone()], Duration::ZERO);
    assert!(plain_routes.route("Secured").await.is_err());

    info!("--- 4.x remoting, which has no TLS, is served beside neither TLS port");
    unanswered_remoting(&namesrv).await?;
    unanswered_remoting(&group.addr(follower).to_string()).await?;

    info!("--- plain text, or TLS trusting another CA: no connection to the broker API");
    let api = group.addr(follower);
    let plain = connect(api).await;
    let refused_plain = match plain {
        Err(_) => true,
        Ok(mut client) => client.node_status(pb::NodeStatusRequest {}).await.is_err(),
    };
    assert!(refused_plain, "a plain-text client was served");
    let strangers = TestCerts::generate("another CA")?;
    let refused_stranger = match Connector::tls(strangers.client_tls()).connect(api).await {
        Err(_) => true,
        Ok(mut client) => client.node_status(pb::NodeStatusRequest {}).await.is_err(),
    };
    assert!(refused_stranger, "a client trusting another CA was served");

    info!("--- the Raft port: a caller without a certificate from the group's CA is refused");
    let raft = group.raft_addr(follower);
    let server_only = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(certs.settings().ca)?));
    // A read-only call a peer may make (repair asks it): answered to any peer with a cert.
    let anonymous = match Endpoint::from_shared(format!("https://{raft}"))?
        .tls_config(server_only)?
        .connect()
        .await
    {
        Err(_) => None,
        Ok(channel) => Some(
            RaftClient::new(channel)
                .commit_log_end(raft_pb::CommitLogEndRequest {})
                .await,
        ),
    };
    assert!(
        anonymous.as_ref().is_none_or(Result::is_err),
        "a Raft call without a client certificate was answered: {anonymous:?}"
    );
    group.shutdown().await;
    nameserver.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn given_a_missing_tls_file_the_node_should_refuse_to_start_naming_it() -> anyhow::Result<()>
{
    init_tracing();
    let certs = TestCerts::generate("rocketraft test CA")?;
    let mut settings = certs.settings();
    settings.cert = settings.cert.with_file_name("no-such-cert.pem");
    let error = TestGroup::start(1, 0x5EED_7151, |config| {
        config.tls = Some(settings.clone());
    })
    .await
    .err()
    .context("a node started without its certificate")?;
    let message = format!("{error:#}");
    assert!(
        message.contains("tls.cert") && message.contains("no-such-cert.pem"),
        "{message}"
    );
    Ok(())
}

/// Checks that a plain-text 4.x request to `addr`, a TLS port, is not answered: the TLS side
/// reads the frame as a bad handshake, and closes or answers with an alert.
async fn unanswered_remoting(addr: &str) -> anyhow::Result<()> {
    let mut remoting = Framed::new(TcpStream::connect(addr).await?, RemotingCodec);
    let mut fields = ExtFields::new();
    fields.insert("topic", "Secured");
    let route_request = RemotingCommand {
        code: request::GET_ROUTEINFO_BY_TOPIC,
        ext_fields: fields,
        ..RemotingCommand::default()
    };
    let _ = remoting.send(route_request).await;
    let answer = tokio::time::timeout(TIMEOUT, remoting.next()).await?;
    anyhow::ensure!(
        !matches!(answer, Some(Ok(_))),
        "a plain-text remoting request to {addr} was answered: {answer:?}"
    );
    Ok(())
}
