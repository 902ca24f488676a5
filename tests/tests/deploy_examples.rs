//! The deployment examples under `deploy/` (docs/operators/deploy.md)
//! cannot rot: every broker and nameserver file parses and validates as the binaries would
//! take it, the two groups are consistent (same peers everywhere, each node listening where
//! its peers reach it, one founding node), the secrets match, no two processes of a host
//! share a port, and the systemd units start each file by its name.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use rocketraft_broker::config::BrokerConfig;
use rocketraft_nameserver::settings::NameServerSettings;
use rocketraft_server::ServerConfig;

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(name: &str) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(deploy_dir().join(name))?)
}

/// Every broker example by file stem (`broker-a-1`).
fn brokers() -> anyhow::Result<BTreeMap<String, BrokerConfig>> {
    let mut brokers = BTreeMap::new();
    for entry in std::fs::read_dir(deploy_dir())? {
        let path = entry?.path();
        let stem = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .unwrap_or_default()
            .to_owned();
        if stem.starts_with("broker-") && path.extension().is_some_and(|ext| ext == "toml") {
            let config = ServerConfig::from_toml(&std::fs::read_to_string(&path)?)
                .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
            config
                .validate()
                .map_err(|error| anyhow::anyhow!("{}: {error}", path.display()))?;
            brokers.insert(stem, config.broker);
        }
    }
    Ok(brokers)
}

#[test]
fn the_deploy_examples_are_valid_and_consistent() -> anyhow::Result<()> {
    let brokers = brokers()?;
    assert_eq!(brokers.len(), 6, "2 groups x 3 nodes: {:?}", brokers.keys());
    let nameserver = NameServerSettings::from_toml(&read("nameserver.toml")?)?;
    let (nameserver_listen, nameserver_config) = nameserver.resolve()?;

    let mut groups: BTreeMap<&str, Vec<&BrokerConfig>> = BTreeMap::new();
    for (stem, config) in &brokers {
        assert_eq!(
            stem,
            &format!("{}-{}", config.group, config.node_id),
            "a file is named after its group and node"
        );
        groups.entry(&config.group).or_default().push(config);
    }
    assert_eq!(groups.len(), 2);
    for (group, nodes) in &groups {
        let peers = &nodes[0].peers;
        assert_eq!(peers.len(), 3, "{group}");
        for node in nodes {
            assert_eq!(
                &node.peers, peers,
                "{group}: every node names the same peers"
            );
            let own = &node.peer_map()?[&node.node_id];
            assert_eq!(
                (own.api.clone(), Some(own.raft.clone())),
                (
                    node.listen.to_string(),
                    node.raft_listen.map(|addr| addr.to_string())
                ),
                "{group} node {}: it listens where its peers reach it, Raft on a port of its own",
                node.node_id
            );
            assert_eq!(node.cluster_secret, nameserver_config.cluster_secret);
            assert!(
                node.admin_token.is_some(),
                "{group}: admin calls are locked"
            );
            for namesrv in &node.namesrv {
                let namesrv: SocketAddr = namesrv.parse()?;
                assert_eq!(namesrv.port(), nameserver_listen.port(), "{namesrv}");
            }
        }
        let founders = nodes.iter().filter(|node| node.bootstrap).count();
        assert_eq!(founders, 1, "{group}: one founding node");
    }

    // No two processes of one host share a port: the host's brokers, plus its nameserver.
    let mut ports: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    for config in brokers.values() {
        let host = config.listen.ip().to_string();
        let used = ports.entry(host.clone()).or_insert_with(|| {
            [nameserver_listen.port()]
                .into_iter()
                .chain(nameserver_config.metrics_listen.map(|addr| addr.port()))
                .collect()
        });
        for port in [
            Some(config.listen.port()),
            config.raft_listen.map(|addr| addr.port()),
            config.metrics_listen.map(|addr| addr.port()),
        ]
        .into_iter()
        .flatten()
        {
            assert!(used.insert(port), "host {host}: port {port} is taken twice");
        }
    }
    assert_eq!(ports.len(), 3, "three hosts");

    let broker_unit = read("rocketraft-broker@.service")?;
    assert!(
        broker_unit.contains("ExecStart=/usr/local/bin/broker --config /etc/rocketraft/%i.toml"),
        "{broker_unit}"
    );
    let nameserver_unit = read("rocketraft-nameserver.service")?;
    assert!(
        nameserver_unit.contains(
            "ExecStart=/usr/local/bin/nameserver --config /etc/rocketraft/nameserver.toml"
        ),
        "{nameserver_unit}"
    );
    Ok(())
}
