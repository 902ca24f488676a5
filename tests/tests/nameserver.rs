//! Nameservers learn broker groups from registrations: every node and the current leader,
//! a leader change at once, silent nodes dropped after the expiry, each nameserver on its own.
//! Clients that look a topic up at the same time share one query.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_client::route::RouteCache;
use rocketraft_client::route::RouteError;
use rocketraft_nameserver::server::NameServer;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_nameserver::service::NameServerService;
use rocketraft_nameserver::service::SharedRegistry;
use rocketraft_proto::nameserver as pb;
use rocketraft_proto::nameserver::name_server_client::NameServerClient;
use rocketraft_proto::nameserver::name_server_server::NameServerServer;
use rocketraft_tests::TestGroup;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tonic::transport::server::TcpIncoming;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(20);

async fn start_nameserver(expiry: Duration) -> anyhow::Result<NameServer> {
    rocketraft_tests::start_nameserver(NameServerConfig {
        broker_expiry: expiry,
        ..NameServerConfig::default()
    })
    .await
}

async fn cluster_info(nameserver: SocketAddr) -> Option<pb::ClusterInfo> {
    let mut client = NameServerClient::connect(format!("http://{nameserver}"))
        .await
        .ok()?;
    Some(
        client
            .get_cluster_info(pb::GetClusterInfoRequest {})
            .await
            .ok()?
            .into_inner(),
    )
}

/// Waits until `nameserver` sees the group with `nodes` nodes led by `leader`.
async fn wait_for_view(nameserver: SocketAddr, nodes: usize, leader: u64) -> anyhow::Result<()> {
    wait_for(
        &format!("{nameserver} to see {nodes} nodes led by {leader}"),
        TIMEOUT,
        || async {
            let info = cluster_info(nameserver).await?;
            let group = info.groups.iter().find(|group| group.group == "broker-a")?;
            (group.nodes.len() == nodes && group.leader_id == Some(leader)).then_some(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_two_nameservers_when_leader_changes_should_both_route_to_new_leader()
-> anyhow::Result<()> {
    init_tracing();
    let first = start_nameserver(Duration::from_secs(30)).await?;
    let second = start_nameserver(Duration::from_secs(30)).await?;
    let nameservers = vec![first.addr().to_string(), second.addr().to_string()];
    let group = TestGroup::start(3, 0x5EED_0101, |config| {
        config.namesrv = nameservers.clone()
    })
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    info!(leader, "--- both nameservers see all nodes and the leader");
    wait_for_view(first.addr(), 3, leader).await?;
    wait_for_view(second.addr(), 3, leader).await?;
    let route = cluster_info(first.addr()).await.expect("cluster info");
    assert_eq!(
        route.groups[0].nodes[&leader],
        group.addr(leader).to_string()
    );

    info!(
        leader,
        "--- isolate the leader: the new leader registers at once"
    );
    let new_leader = group.isolate_leader(leader, TIMEOUT).await?;
    // The isolated node still believes it leads, in an older term; the newer term wins.
    wait_for_view(first.addr(), 3, new_leader).await?;
    wait_for_view(second.addr(), 3, new_leader).await?;
    group.faults.heal();
    group.shutdown().await;
    first.shutdown().await;
    second.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_node_stopped_when_expiry_passes_should_drop_it() -> anyhow::Result<()> {
    init_tracing();
    let nameserver = start_nameserver(Duration::from_millis(800)).await?;
    let addr = nameserver.addr().to_string();
    let mut group =
        TestGroup::start(3, 0x5EED_0102, |config| config.namesrv = vec![addr.clone()]).await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    wait_for_view(nameserver.addr(), 3, leader).await?;
    let follower = group.a_follower(leader);
    info!(follower, "--- stop a follower; it stops registering");
    group.stop(follower).await;
    wait_for_view(nameserver.addr(), 2, leader).await?;
    let info = cluster_info(nameserver.addr()).await.expect("cluster info");
    assert!(
        !info.groups[0].nodes.contains_key(&follower),
        "the stopped node is gone"
    );
    group.shutdown().await;
    nameserver.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_topic_created_should_be_routed_by_the_nameserver_until_deleted() -> anyhow::Result<()>
{
    init_tracing();
    let nameserver = start_nameserver(Duration::from_secs(30)).await?;
    let addr = nameserver.addr().to_string();
    let group = TestGroup::start(3, 0x5EED_0103, |config| {
        config.namesrv = vec![addr.clone()];
        // Long enough that only the change itself can publish the topic in time.
        config.register_interval_ms = 60_000;
        // Otherwise an unknown topic routes to this group for auto-creation.
        config.auto_create_topic = false;
    })
    .await?;
    let leader = group.wait_for_leader(TIMEOUT).await?;
    let create = rocketraft_proto::broker::CreateTopicRequest {
        topic: "Orders".into(),
        read_queue_count: 8,
        write_queue_count: 8,
        perm: 0,
        ..Default::default()
    };
    group.client(leader).await?.create_topic(create).await?;
    let mut client = NameServerClient::connect(format!("http://{addr}")).await?;
    let route = wait_for("the topic's route", TIMEOUT, || {
        let mut client = client.clone();
        async move {
            let request = pb::GetTopicRouteRequest {
                topic: "Orders".into(),
            };
            client
                .get_topic_route(request)
                .await
                .ok()
                .map(|route| route.into_inner())
        }
    })
    .await?;
    assert_eq!(route.queues.len(), 1);
    assert_eq!(
        (route.queues[0].write_queue_count, route.queues[0].perm),
        (8, 6)
    );
    assert_eq!(route.groups[0].leader_addr, group.addr(leader).to_string());
    let topics = client
        .get_topic_list(pb::GetTopicListRequest {})
        .await?
        .into_inner()
        .topics;
    assert_eq!(topics, vec!["Orders".to_owned()]);

    group
        .client(leader)
        .await?
        .delete_topic(rocketraft_proto::broker::DeleteTopicRequest {
            topic: "Orders".into(),
        })
        .await?;
    wait_for("the route to go", TIMEOUT, || {
        let mut client = client.clone();
        async move {
            let request = pb::GetTopicRouteRequest {
                topic: "Orders".into(),
            };
            let status = client.get_topic_route(request).await.err()?;
            (status.code() == tonic::Code::NotFound).then_some(())
        }
    })
    .await?;
    group.shutdown().await;
    nameserver.shutdown().await;
    Ok(())
}

/// A real nameserver service that counts the calls it serves and answers each only after
/// `answer_after`, as a slow nameserver would. It runs on a thread and runtime of its own, so
/// its slowness never holds up the test's own tasks; it stops when the returned sender drops.
async fn counting_nameserver(
    answer_after: Duration,
) -> anyhow::Result<(
    SharedRegistry,
    SocketAddr,
    Arc<AtomicUsize>,
    tokio::sync::oneshot::Sender<()>,
)> {
    let registry = SharedRegistry::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let service = NameServerServer::with_interceptor(
        NameServerService::new(registry.clone(), Default::default(), None),
        move |request| {
            counter.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(answer_after);
            Ok(request)
        },
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
    });
    Ok((registry, addr, calls, stop))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_many_concurrent_lookups_of_a_topic_should_send_one_route_query() -> anyhow::Result<()>
{
    init_tracing();
    // Each answer takes 100 ms: lookups that start meanwhile share it.
    let (registry, addr, calls, _stop) = counting_nameserver(Duration::from_millis(100)).await?;
    registry.lock().register(
        pb::RegisterBrokerRequest {
            cluster: "C".into(),
            group: "broker-a".into(),
            node_id: 1,
            addr: "127.0.0.1:1".into(),
            role: pb::Role::Leader.into(),
            term: 1,
            topics: vec![pb::TopicConfig {
                name: "T".into(),
                read_queue_count: 4,
                write_queue_count: 4,
                perm: 6,
                ..Default::default()
            }],
            auto_create_queue_count: 0,
            members: vec![1],
        },
        std::time::Instant::now(),
    );
    let cache = Arc::new(RouteCache::new(vec![addr.to_string()], TIMEOUT));
    let lookups = |topic: &'static str| {
        let cache = cache.clone();
        async move {
            let lookups: Vec<_> = (0..200)
                .map(|_| {
                    let cache = cache.clone();
                    tokio::spawn(async move { cache.route(topic).await })
                })
                .collect();
            let mut results = Vec::new();
            for lookup in lookups {
                results.push(lookup.await.expect("lookup task"));
            }
            results
        }
    };

    info!("--- 200 lookups at once: one query, and everyone gets its answer");
    for result in lookups("T").await {
        assert_eq!(result?.write_queue_count(), 4);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    info!("--- a refresh asks again; the next lookup uses what it brought");
    cache.refresh("T").await?;
    cache.route("T").await?;
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    info!("--- an unknown topic: callers that waited share the answer, nobody caches it");
    for result in lookups("Missing").await {
        assert!(matches!(result, Err(RouteError::NoRoute { .. })));
    }
    let after_missing = calls.load(Ordering::SeqCst);
    assert!(
        after_missing - 2 < 20,
        "{} queries for 200 concurrent lookups",
        after_missing - 2
    );
    assert!(cache.route("Missing").await.is_err());
    assert_eq!(calls.load(Ordering::SeqCst), after_missing + 1);
    Ok(())
}

/// A registration of the largest group, with every topic's name as long as a name may be.
fn registration_of(topics: u32) -> pb::RegisterBrokerRequest {
    pb::RegisterBrokerRequest {
        cluster: "c".into(),
        group: "broker-a".into(),
        node_id: 1,
        addr: "127.0.0.1:10911".into(),
        role: pb::Role::Leader as i32,
        term: 1,
        topics: (0..topics)
            .map(|n| pb::TopicConfig {
                name: format!(
                    "{n:0width$}",
                    width = rocketraft_domain::names::NAME_LEN_MAX
                ),
                read_queue_count: 1,
                write_queue_count: 1,
                perm: rocketraft_domain::perm::PERM_READ_WRITE,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_registration_over_its_limit_the_nameserver_should_refuse_it() -> anyhow::Result<()>
{
    use prost::Message;
    use rocketraft_broker::topic::GROUP_QUEUES_MAX;
    use rocketraft_domain::limits::REGISTRATION_BYTES_MAX;
    init_tracing();
    let nameserver = start_nameserver(Duration::from_secs(60)).await?;
    let mut client = NameServerClient::connect(format!("http://{}", nameserver.addr())).await?;

    let largest = registration_of(GROUP_QUEUES_MAX);
    assert!(largest.encoded_len() <= REGISTRATION_BYTES_MAX);
    client.register_broker(largest).await?;
    assert_eq!(
        cluster_info(nameserver.addr())
            .await
            .map(|i| i.groups.len()),
        Some(1)
    );

    let mut over = registration_of(0);
    let topic_bytes = registration_of(1).encoded_len() - over.encoded_len();
    over = registration_of((REGISTRATION_BYTES_MAX / topic_bytes + 1) as u32);
    assert!(over.encoded_len() > REGISTRATION_BYTES_MAX);
    let refused = client
        .register_broker(over)
        .await
        .expect_err("past the limit");
    assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
    Ok(())
}
