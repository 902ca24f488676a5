//! Locked doors: with an admin token configured, a broker refuses admin calls that lack it
//! (and logs them) while data calls go on; with a cluster secret, a nameserver refuses
//! registrations that lack it, and brokers that carry it are routed; with a `raft_listen`,
//! the broker API's port serves no Raft call and the Raft port no broker call.

use std::time::Duration;

use rocketraft_client::admin::Admin;
use rocketraft_client::admin::AdminError;
use rocketraft_domain::secrets::ADMIN_TOKEN_HEADER;
use rocketraft_domain::secrets::CLUSTER_SECRET_HEADER;
use rocketraft_domain::secrets::attach;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_proto::nameserver as ns_pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;
use rocketraft_proto::response_code;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::start_nameserver;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);
const TOKEN: &str = "admin-s3cret";
const SECRET: &str = "cluster-s3cret";

fn with_token<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        attach(&mut request, ADMIN_TOKEN_HEADER, token);
    }
    request
}

fn refused(result: Result<impl std::fmt::Debug, tonic::Status>) {
    let status = result.expect_err("an admin call without the token");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");
    assert_eq!(response_code(&status), Some(ResponseCode::NoPermission));
    assert!(status.message().contains(ADMIN_TOKEN_HEADER), "{status}");
}

#[tokio::test]
async fn given_an_admin_token_admin_calls_without_it_should_be_refused() -> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(1, 0x5EED_A001, |config| {
        config.admin_token = Some(TOKEN.into());
    })
    .await?;
    let node = group.wait_for_leader(TIMEOUT).await?;
    let mut client = group.client(node).await?;
    let create = || pb::CreateTopicRequest {
        topic: "Locked".into(),
        read_queue_count: 2,
        write_queue_count: 2,
        perm: 0,
        ..Default::default()
    };

    info!("--- no token, a wrong one, one a byte short: refused");
    for token in [None, Some("admin-s3creT"), Some("admin-s3cre")] {
        refused(client.create_topic(with_token(create(), token)).await);
    }
    refused(
        client
            .delete_topic(with_token(
                pb::DeleteTopicRequest {
                    topic: "Locked".into(),
                },
                None,
            ))
            .await,
    );
    refused(
        client
            .upsert_group(with_token(
                pb::UpsertGroupRequest {
                    group: "readers".into(),
                    ..Default::default()
                },
                None,
            ))
            .await,
    );
    refused(
        client
            .transfer_leader(with_token(
                pb::TransferLeaderRequest { to_node_id: node },
                None,
            ))
            .await,
    );
    refused(
        client
            .prepare_node_replacement(with_token(
                pb::PrepareNodeReplacementRequest { node_id: 2 },
                None,
            ))
            .await,
    );
    refused(
        client
            .inject_fault(with_token(
                pb::InjectFaultRequest {
                    isolate: true,
                    blackhole: false,
                },
                None,
            ))
            .await,
    );
    refused(
        client
            .change_membership(with_token(
                pb::ChangeMembershipRequest {
                    add_node_id: 2,
                    add_addr: "127.0.0.1:1".into(),
                    ..Default::default()
                },
                None,
            ))
            .await,
    );
    let status = group.status(node).await?;
    assert_eq!(
        status.voters.len(),
        1,
        "the membership is unchanged: {status:?}"
    );
    assert!(
        status.role == "leader",
        "nothing an admin call does happened"
    );

    info!("--- with the token: served; data calls need none");
    client
        .create_topic(with_token(create(), Some(TOKEN)))
        .await?;
    client
        .send(send_request("Locked", 0, [b"data".to_vec()]))
        .await?;
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_cluster_secret_only_brokers_with_it_should_be_routed() -> anyhow::Result<()> {
    init_tracing();
    let nameserver = start_nameserver(NameServerConfig {
        cluster_secret: Some(SECRET.into()),
        ..NameServerConfig::default()
    })
    .await?;
    let addr = nameserver.addr();

    info!("--- a registration without the secret is refused and leaves no route");
    let mut client = NameServerClient::connect(format!("http://{addr}")).await?;
    let stranger = ns_pb::RegisterBrokerRequest {
        cluster: "C".into(),
        group: "intruder".into(),
        node_id: 1,
        addr: "127.0.0.1:1".into(),
        role: ns_pb::Role::Leader.into(),
        term: u64::MAX,
        topics: vec![ns_pb::TopicConfig {
            name: "Orders".into(),
            read_queue_count: 1,
            write_queue_count: 1,
            perm: 6,
            ..Default::default()
        }],
        auto_create_queue_count: 0,
        members: vec![1],
    };
    let status = client
        .register_broker(stranger.clone())
        .await
        .expect_err("no secret");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status}");
    assert_eq!(response_code(&status), Some(ResponseCode::NoPermission));
    let mut wrong = tonic::Request::new(stranger);
    attach(&mut wrong, CLUSTER_SECRET_HEADER, "guess");
    client
        .register_broker(wrong)
        .await
        .expect_err("wrong secret");
    let info = client
        .get_cluster_info(ns_pb::GetClusterInfoRequest {})
        .await?
        .into_inner();
    assert!(info.groups.is_empty(), "{info:?}");

    info!("--- a group configured with the secret and the token registers and is administered");
    let group = TestGroup::start(1, 0x5EED_A002, |config| {
        config.namesrv = vec![addr.to_string()];
        config.cluster_secret = Some(SECRET.into());
        config.admin_token = Some(TOKEN.into());
    })
    .await?;
    group.wait_for_leader(TIMEOUT).await?;
    let admin = Admin::new(vec![addr.to_string()]);
    wait_for("the group registered", TIMEOUT, || async {
        let info = admin.cluster_info().await.ok()?;
        info.groups
            .iter()
            .any(|route| route.group == "broker-a" && route.leader_id.is_some())
            .then_some(())
    })
    .await?;
    match admin.create_topic("Orders", 2, None).await {
        Err(AdminError::Refused { status, .. }) => {
            assert_eq!(response_code(&status), Some(ResponseCode::NoPermission))
        }
        other => panic!("expected a refusal without the token, got {other:?}"),
    }
    let created = admin
        .with_admin_token(TOKEN)
        .create_topic("Orders", 2, None)
        .await?;
    assert_eq!(created, ["broker-a"]);
    group.shutdown().await;
    nameserver.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_raft_listen_the_broker_port_should_serve_no_raft_call() -> anyhow::Result<()> {
    use rocketraft_proto::broker::broker_client::BrokerClient;
    use rocketraft_proto::raft as raft_pb;
    use rocketraft_proto::raft::raft_client::RaftClient;
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_A003, |_| {}).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let follower = group.a_follower(leader);
    let (api, raft) = (group.addr(follower), group.raft_addr(follower));
    assert_ne!(api, raft, "the test group serves Raft on ports of its own");

    info!(
        "--- a Raft call on the broker API's port, a broker call on the Raft port: UNIMPLEMENTED"
    );
    let vote = raft_pb::RaftPayload {
        data: vec![0; 16].into(),
    };
    let mut raft_on_api = RaftClient::connect(format!("http://{api}")).await?;
    let refused = raft_on_api
        .vote(vote.clone())
        .await
        .expect_err("no Raft service on the broker port");
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused}");
    let mut broker_on_raft = BrokerClient::connect(format!("http://{raft}")).await?;
    let refused = broker_on_raft
        .node_status(pb::NodeStatusRequest {})
        .await
        .expect_err("no broker service on the Raft port");
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused}");

    info!("--- the Raft port is the one that answers Raft calls");
    let mut raft_client = RaftClient::connect(format!("http://{raft}")).await?;
    let answered = raft_client.vote(vote).await;
    assert_ne!(
        answered.as_ref().map_err(tonic::Status::code).err(),
        Some(tonic::Code::Unimplemented),
        "{answered:?}"
    );

    info!("--- the group replicates over the Raft ports");
    let mut client = group.client(leader).await?;
    client
        .send(send_request("Orders", 0, [b"over the raft port".to_vec()]))
        .await?;
    group.wait_all_applied(leader, TIMEOUT).await?;
    group.shutdown().await;
    Ok(())
}
