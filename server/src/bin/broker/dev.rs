//! `broker dev`: a nameserver and a local broker group in one process, for development. Each
//! node is configured as an operator's would be, through the same flags (`node_config`).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use rocketraft_broker::node::NodeOptions;
use rocketraft_nameserver::server::NameServerConfig;
use rocketraft_server::Node;
use rocketraft_server::nameserver::start_nameserver;

use crate::Cli;
use crate::node_config;

/// What `broker dev` starts.
pub(crate) struct DevCluster {
    pub(crate) data_dir: PathBuf,
    pub(crate) nodes: u64,
    pub(crate) base_port: u16,
    pub(crate) flush: String,
    pub(crate) namesrv_listen: SocketAddr,
    pub(crate) delay_levels: Option<String>,
    pub(crate) grpc_v5_base_port: u16,
}

pub(crate) async fn run_dev(dev: DevCluster) -> anyhow::Result<()> {
    let DevCluster {
        data_dir,
        nodes,
        base_port,
        flush,
        namesrv_listen,
        delay_levels,
        grpc_v5_base_port,
    } = dev;
    let listener = tokio::net::TcpListener::bind(namesrv_listen)
        .await
        .with_context(|| format!("bind the nameserver on {namesrv_listen}"))?;
    // Metrics on ports the OS picks (printed below): zero-config, never in the way.
    let metrics_listen = "127.0.0.1:0";
    let nameserver = start_nameserver(
        listener,
        NameServerConfig {
            metrics_listen: metrics_listen.parse().ok(),
            ..NameServerConfig::default()
        },
    )?;
    let addr = |id: u64| format!("127.0.0.1:{}", u64::from(base_port) + id - 1);
    let grpc_v5_addr = |id: u64| format!("127.0.0.1:{}", u64::from(grpc_v5_base_port) + id - 1);
    let peers: Vec<String> = (1..=nodes).map(|id| format!("{id}={}", addr(id))).collect();
    let mut started = Vec::new();
    for id in 1..=nodes {
        let cli = Cli {
            command: None,
            config: None,
            cluster: Some("DevCluster".into()),
            group: Some("broker-a".into()),
            node_id: Some(id),
            listen: Some(addr(id)),
            // Raft shares the port: a dev cluster is reachable on loopback only.
            raft_listen: None,
            peers: peers.clone(),
            namesrv: Some(nameserver.addr().to_string()),
            data_dir: Some(data_dir.join(format!("node-{id}"))),
            flush: Some(flush.clone()),
            bootstrap: id == 1,
            auto_create_topic: true,
            delay_levels: delay_levels.clone(),
            metrics_listen: Some(metrics_listen.to_owned()),
            grpc_v5_listen: Some(grpc_v5_addr(id)),
        };
        let node = Node::start(node_config(&cli)?, NodeOptions::default()).await?;
        started.push(node);
    }
    println!(
        "rocketraft dev cluster: broker group broker-a, {nodes} node(s), data under {}",
        data_dir.display()
    );
    let metrics = |addr: Option<SocketAddr>| {
        addr.map_or_else(String::new, |addr| {
            format!("  (metrics http://{addr}/metrics)")
        })
    };
    println!(
        "  nameserver -> {}{}",
        nameserver.addr(),
        metrics(nameserver.metrics_addr())
    );
    for node in &started {
        let broker = node.broker();
        println!(
            "  node {} -> {}{}",
            broker.node_id(),
            broker.addr(),
            metrics(broker.metrics_addr())
        );
    }
    if let Some(endpoint) = started.first().and_then(Node::grpc_v5_addr) {
        println!(
            "  RocketMQ 5.x clients -> {endpoint} (gRPC endpoint; every node serves one, on \
             {grpc_v5_base_port}..)"
        );
    }
    println!("press Ctrl-C to stop");
    tokio::signal::ctrl_c().await.context("wait for ctrl-c")?;
    for node in started {
        node.shutdown().await;
    }
    nameserver.shutdown().await;
    Ok(())
}
