//! [`LabCluster`]: the cluster of `deploy/` on a [`Lab`] of network namespaces: hosts 1-3
//! each run a nameserver and a node of broker group `broker-a` (the workspace's own binaries,
//! as real processes), host 4 is the client ([`LabOptions`] adds client hosts and broker
//! settings). A test that panics prints the tail of every server log.
//!
//! Invariant: the processes and namespaces go (with the lab) before the files they used.

use crate::wait_for;
use anyhow::Context;
use rocketraft_broker::config::BrokerConfig;
use rocketraft_broker::config::COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER;
use rocketraft_client::admin::Admin;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;
use tempfile::TempDir;

use crate::netns::Lab;

/// Hosts that run servers: a nameserver and node `n` of [`BROKER_GROUP`] on host `n`.
pub const SERVER_HOSTS: [usize; 3] = [1, 2, 3];
/// The host test clients run on; it runs no server. Further client hosts follow it.
pub const CLIENT_HOST: usize = 4;
pub const BROKER_GROUP: &str = "broker-a";
const NAMESERVER_PORT: u16 = 9876;
const BROKER_PORT: u16 = 10911;
const RAFT_PORT: u16 = 10912;
/// How long the cluster may take to start, elect and register everywhere.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one readiness probe may wait for an answer.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Lines of each server log a failure prints,
const LOG_TAIL_LINES: usize = 40;
/// leaving out these, which a node repeats every heartbeat while a peer is cut off.
const LOG_NOISE: [&str; 1] = ["failed to send a heartbeat"];

/// What a test changes in a [`LabCluster`]; the default is the cluster of `deploy/` with one
/// client host.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Client hosts, numbered from [`CLIENT_HOST`] on; at least 1.
    pub client_hosts: usize,
    /// Top-level settings added to every broker's config, one TOML line each, such as
    /// `client_expiry_ms = 3000`; checked as the broker checks its config.
    pub broker_settings: Vec<String>,
}

impl Default for LabOptions {
    fn default() -> LabOptions {
        LabOptions {
            client_hosts: 1,
            broker_settings: Vec::new(),
        }
    }
}

/// The cluster of `deploy/` on a lab (see the module comment): real `nameserver` and `broker`
/// processes with the Raft timings of a default deployment, files in a temp dir. A test that
/// panics prints the tail of every server log.
pub struct LabCluster {
    // Dropped in this order: the processes and namespaces before the files they used.
    pub lab: Lab,
    dir: TempDir,
    options: LabOptions,
}

impl LabCluster {
    /// Starts the nameservers, then the brokers; waits until every nameserver knows the
    /// group's leader.
    pub async fn start() -> anyhow::Result<LabCluster> {
        LabCluster::start_with(LabOptions::default()).await
    }

    /// [`LabCluster::start`] with `options`' client hosts and broker settings.
    pub async fn start_with(options: LabOptions) -> anyhow::Result<LabCluster> {
        anyhow::ensure!(
            options.client_hosts >= 1,
            "a lab cluster has at least one client host"
        );
        let (broker_bin, nameserver_bin) = server_binaries()?;
        let lab = Lab::new(CLIENT_HOST + options.client_hosts - 1)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{}-", lab.name()))
            .tempdir()?;
        let cluster = LabCluster { lab, dir, options };
        println!(
            "lab {}: hosts {} to {}, server logs in {}",
            cluster.lab.name(),
            cluster.lab.addr(1),
            cluster.lab.addr(cluster.lab.host_count()),
            cluster.dir.path().display()
        );
        for host in SERVER_HOSTS {
            let listen = cluster.nameserver(host);
            cluster.lab.spawn(
                host,
                &nameserver_bin,
                ["--listen", &listen],
                &cluster.log(&format!("nameserver-{host}")),
            )?;
        }
        cluster.wait_listening().await?;
        for host in SERVER_HOSTS {
            let config = cluster.write_broker_config(host)?;
            cluster.lab.spawn(
                host,
                &broker_bin,
                [OsStr::new("--config"), config.as_os_str()],
                &cluster.log(&format!("{BROKER_GROUP}-{host}")),
            )?;
        }
        let leader = cluster
            .wait_for_leader(&SERVER_HOSTS)
            .await
            .with_context(|| cluster.log_tails())?;
        println!(
            "lab {}: {BROKER_GROUP} led by node {leader}",
            cluster.lab.name()
        );
        Ok(cluster)
    }

    /// The client hosts: [`CLIENT_HOST`] and those after it.
    pub fn client_hosts(&self) -> Vec<usize> {
        (CLIENT_HOST..CLIENT_HOST + self.options.client_hosts).collect()
    }

    /// Host `host`'s nameserver.
    pub fn nameserver(&self, host: usize) -> String {
        format!("{}:{NAMESERVER_PORT}", self.lab.addr(host))
    }

    /// Every nameserver, `first`'s first, then the others in host order.
    pub fn nameservers(&self, first: usize) -> Vec<String> {
        std::iter::once(first)
            .chain(SERVER_HOSTS.into_iter().filter(|host| *host != first))
            .map(|host| self.nameserver(host))
            .collect()
    }

    /// Node `host`'s broker API.
    pub fn broker(&self, host: usize) -> String {
        format!("{}:{BROKER_PORT}", self.lab.addr(host))
    }

    /// The host of a `10.A.B.n:port` address.
    pub fn host_of(&self, addr: &str) -> Option<usize> {
        let ip = addr.rsplit_once(':')?.0.parse().ok()?;
        self.lab.host_of(ip)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// Waits until every nameserver accepts connections from the client host, so no broker
    /// starts registering into a closed port (and backs off).
    async fn wait_listening(&self) -> anyhow::Result<()> {
        let addrs = self.nameservers(1);
        self.lab
            .in_host(CLIENT_HOST, move || async move {
                wait_for("every nameserver to listen", READY_TIMEOUT, || async {
                    for addr in &addrs {
                        let connect = tokio::net::TcpStream::connect(addr.as_str());
                        tokio::time::timeout(PROBE_TIMEOUT, connect)
                            .await
                            .ok()?
                            .ok()?;
                    }
                    Some(())
                })
                .await
            })
            .await?
            .with_context(|| self.log_tails())
    }

    /// Waits until the nameservers of `hosts` all name the same leader of the group, with the
    /// group's every node; returns it (node `n` runs on host `n`). Asked from the client host,
    /// each nameserver on its own.
    pub async fn wait_for_leader(&self, hosts: &[usize]) -> anyhow::Result<u64> {
        let nameservers: Vec<String> = hosts.iter().map(|host| self.nameserver(*host)).collect();
        self.lab
            .in_host(CLIENT_HOST, move || async move {
                wait_for("every nameserver to know the leader", READY_TIMEOUT, || {
                    agreed_leader(&nameservers)
                })
                .await
            })
            .await?
    }

    /// Moves the group's leadership to node `to` (from the client host) and waits until every
    /// nameserver names it.
    pub async fn transfer_leader(&self, to: u64) -> anyhow::Result<()> {
        let nameservers = self.nameservers(1);
        self.lab
            .in_host(CLIENT_HOST, move || async move {
                Admin::new(nameservers.clone())
                    .transfer_leader(BROKER_GROUP, to)
                    .await
                    .with_context(|| format!("transfer {BROKER_GROUP}'s leadership to {to}"))?;
                wait_for(
                    "every nameserver to name the new leader",
                    READY_TIMEOUT,
                    || async { (agreed_leader(&nameservers).await? == to).then_some(()) },
                )
                .await
            })
            .await?
    }

    /// Creates `topic` with `queues` queues (from the client host, through every nameserver)
    /// and waits until every nameserver routes it.
    pub async fn create_topic(&self, topic: &str, queues: u32) -> anyhow::Result<()> {
        let topic = topic.to_owned();
        let nameservers = self.nameservers(1);
        self.lab
            .in_host(CLIENT_HOST, move || async move {
                Admin::new(nameservers.clone())
                    .create_topic(&topic, queues, None)
                    .await
                    .with_context(|| format!("create topic {topic}"))?;
                wait_for(
                    "every nameserver to route the topic",
                    READY_TIMEOUT,
                    || async {
                        for nameserver in &nameservers {
                            let admin = Admin::new(vec![nameserver.clone()]);
                            let route =
                                tokio::time::timeout(PROBE_TIMEOUT, admin.topic_route(&topic))
                                    .await
                                    .ok()?
                                    .ok()?;
                            route.queues.iter().find(|q| q.group == BROKER_GROUP)?;
                        }
                        Some(())
                    },
                )
                .await
            })
            .await?
    }

    /// Writes node `host`'s config, as `deploy/broker-a-<host>.toml` has it on host `host`,
    /// with small files, default Raft timings and the options' broker settings; checks it as
    /// the broker will.
    fn write_broker_config(&self, host: usize) -> anyhow::Result<PathBuf> {
        let quoted = |items: Vec<String>| {
            items
                .iter()
                .map(|item| format!("\"{item}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let peers: String = SERVER_HOSTS
            .iter()
            .map(|peer| {
                let ip = self.lab.addr(*peer);
                format!("{peer} = \"{ip}:{BROKER_PORT} raft={ip}:{RAFT_PORT}\"\n")
            })
            .collect();
        let ip = self.lab.addr(host);
        let data_dir = self.dir.path().join(format!("{BROKER_GROUP}-{host}"));
        let text = format!(
            r#"cluster = "LabCluster"
group = "{BROKER_GROUP}"
node_id = {host}
listen = "{ip}:{BROKER_PORT}"
raft_listen = "{ip}:{RAFT_PORT}"
data_dir = "{data_dir}"
flush = "sync"
bootstrap = {bootstrap}
namesrv = [{namesrv}]
auto_create_topic = true
{settings}
[peers]
{peers}
[store]
commit_log_segment_bytes = {segment}
consume_queue_units_per_segment = 1024
index_entries_per_file = 4096
raft_log_segment_bytes = 1048576

# The machine's disk fullness must not refuse sends.
[retention]
disk_max_used_ratio = 1.0
disk_full_ratio = 1.0
"#,
            data_dir = data_dir.display(),
            bootstrap = host == 1,
            namesrv = quoted(self.nameservers(1)),
            segment = COMMIT_LOG_SEGMENT_BYTES_MIN_BROKER,
            settings = self
                .options
                .broker_settings
                .iter()
                .map(|line| format!("{line}\n"))
                .collect::<String>(),
        );
        BrokerConfig::from_toml(&text)
            .and_then(|config| config.validate())
            .with_context(|| format!("node {host}'s config:\n{text}"))?;
        let path = self.dir.path().join(format!("{BROKER_GROUP}-{host}.toml"));
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        Ok(path)
    }

    /// The last lines of every server log.
    pub fn log_tails(&self) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|entry| entry.path())
                    .filter(|path| path.extension() == Some(OsStr::new("log")))
                    .collect()
            })
            .unwrap_or_default();
        logs.sort();
        let mut tails = String::new();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let (noise, lines): (Vec<&str>, Vec<&str>) = text
                .lines()
                .partition(|line| LOG_NOISE.iter().any(|noise| line.contains(noise)));
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            tails.push_str(&format!(
                "--- {} (last {} lines; {} lines of {LOG_NOISE:?} left out)\n",
                log.display(),
                tail.len(),
                noise.len()
            ));
            for line in tail {
                tails.push_str(line);
                tails.push('\n');
            }
        }
        tails
    }
}

impl Drop for LabCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails());
        }
    }
}

/// The leader every nameserver of `nameservers` names for the group, if they all know one
/// and agree, each listing the group's every node.
async fn agreed_leader(nameservers: &[String]) -> Option<u64> {
    let mut leaders = Vec::new();
    for nameserver in nameservers {
        let admin = Admin::new(vec![nameserver.clone()]);
        let info = tokio::time::timeout(PROBE_TIMEOUT, admin.cluster_info())
            .await
            .ok()?
            .ok()?;
        let group = info.groups.iter().find(|g| g.group == BROKER_GROUP)?;
        if group.nodes.len() != SERVER_HOSTS.len() || group.leader_addr.is_empty() {
            return None;
        }
        leaders.push(group.leader_id?);
    }
    let first = *leaders.first()?;
    leaders.iter().all(|id| *id == first).then_some(first)
}

/// The `broker` and `nameserver` binaries.
fn server_binaries() -> anyhow::Result<(PathBuf, PathBuf)> {
    Ok((
        crate::workspace_binary("broker")?,
        crate::workspace_binary("nameserver")?,
    ))
}
