//! A local cluster of real processes for drills: one nameserver and broker groups of three
//! `broker` processes each, on loopback ports the OS picks, data under a work directory.
//!
//! Faults are done to processes as an operator's would be: SIGKILL, SIGSTOP/SIGCONT, and
//! restarts on the same address and data; a partition goes through the broker's own fault
//! hook, which the drill's nodes (and only they) enable. Every process is killed when the cluster is
//! dropped, so a drill that fails or is interrupted leaves nothing running.

use crate::access::ClusterAccess;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use rocketraft_proto::broker as pb;

use rocketraft_client::group::BrokerGroupClient;

/// Nodes of each drill broker group.
pub const DRILL_GROUP_NODES: u64 = 3;
/// File sizes of drill nodes: files are preallocated, and the defaults (1 GiB CommitLog
/// segments, 84 MB index files) would take over a gigabyte of disk per node for a drill that
/// writes a few tens of megabytes. Smaller files also make a long drill roll them.
const DRILL_STORE_SIZES: &str =
    "commit_log_segment_bytes = 67108864\nindex_entries_per_file = 1000000\n";
/// With `retention_churn`: the smallest CommitLog segment a broker takes (room for the
/// largest record), rounded up to 64 KiB, so segments roll every few seconds under load.
const CHURN_SEGMENT_BYTES: u64 = 4 * 1024 * 1024 + 64 * 1024;
/// With `retention_churn`: a snapshot (and purge) this often, keeping this many entries, so
/// a follower that was away catches up by snapshot.
const CHURN_COMPACTION_INTERVAL_MS: u64 = 2000;
const CHURN_RETAINED_ENTRIES: u64 = 64;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "{what} not found at {path:?}; build the workspace binaries (cargo build --bins) or pass its path"
    )]
    BinaryMissing { what: &'static str, path: PathBuf },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no such node: group {group} node {node}")]
    NoSuchNode { group: String, node: u64 },
    #[error("{what}: {reason}")]
    Refused { what: String, reason: String },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let what = what.into();
    move |source| ClusterError::Io { what, source }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub broker_bin: PathBuf,
    pub nameserver_bin: PathBuf,
    pub work_dir: PathBuf,
    pub groups: usize,
    pub delay_levels: String,
    /// Raft timings for the nodes; `None` leaves the broker's default, so a drill measures
    /// the failover a default deployment gets.
    pub heartbeat_interval_ms: Option<u64>,
    pub election_timeout_min_ms: Option<u64>,
    pub election_timeout_max_ms: Option<u64>,
    /// Tiny segments deleted as soon as it is safe, and frequent snapshots: retention and
    /// snapshot catch-up run under the faults.
    pub retention_churn: bool,
    /// The nodes' admin token (`admin_token`), which every admin call and fault injection of
    /// the drill then carries; `None`: admin calls are open.
    pub admin_token: Option<String>,
}

impl ClusterSpec {
    /// How the drill's own clients get into the cluster it starts.
    pub fn access(&self) -> ClusterAccess {
        ClusterAccess::with_admin_token(self.admin_token.clone())
    }

    /// Binaries next to the running executable (where cargo puts them all).
    pub fn binaries_next_to_me() -> (PathBuf, PathBuf) {
        let dir = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        // A test binary lives in target/<profile>/deps.
        let dir = if dir.ends_with("deps") {
            dir.parent().map(Path::to_path_buf).unwrap_or(dir)
        } else {
            dir
        };
        (dir.join("broker"), dir.join("nameserver"))
    }
}

/// What [`LocalCluster::inject_fault`] does to a node's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkFault {
    Partition,
    Blackhole,
    Heal,
}

struct Process {
    name: String,
    command: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Process {
    fn start(&mut self) -> Result<(), ClusterError> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io(format!("open {}", self.log.display())))?;
        let err = log.try_clone().map_err(io("clone log handle"))?;
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(io(format!("start {}", self.name)))?;
        self.child = Some(child);
        Ok(())
    }

    fn signal(&self, signal: libc::c_int) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on a pid this process spawned and has not reaped.
            unsafe {
                libc::kill(child.id() as libc::pid_t, signal);
            }
        }
    }

    /// SIGKILL, and reap it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

struct Node {
    addr: SocketAddr,
    process: Process,
    paused: bool,
    data_dir: PathBuf,
}

pub struct LocalCluster {
    spec: ClusterSpec,
    nameserver: Process,
    nameserver_addr: SocketAddr,
    /// group name -> node id -> node.
    groups: BTreeMap<String, BTreeMap<u64, Node>>,
}

impl LocalCluster {
    pub fn start(spec: &ClusterSpec) -> Result<LocalCluster, ClusterError> {
        for (what, path) in [
            ("the broker binary", &spec.broker_bin),
            ("the nameserver binary", &spec.nameserver_bin),
        ] {
            if !path.is_file() {
                return Err(ClusterError::BinaryMissing {
                    what,
                    path: path.clone(),
                });
            }
        }
        std::fs::create_dir_all(&spec.work_dir)
            .map_err(io(format!("create {}", spec.work_dir.display())))?;
        let node_count = spec.groups * DRILL_GROUP_NODES as usize;
        let addrs = free_addrs(1 + node_count)?;
        let nameserver_addr = addrs[0];
        let mut nameserver = Process {
            name: "nameserver".into(),
            command: vec![
                spec.nameserver_bin.display().to_string(),
                "--listen".into(),
                nameserver_addr.to_string(),
            ],
            log: spec.work_dir.join("nameserver.log"),
            child: None,
        };
        nameserver.start()?;
        let mut groups = BTreeMap::new();
        for group_index in 0..spec.groups {
            let name = format!("drill-{}", (b'a' + group_index as u8) as char);
            let first = 1 + group_index * DRILL_GROUP_NODES as usize;
            let peers: BTreeMap<u64, SocketAddr> = (1..=DRILL_GROUP_NODES)
                .zip(&addrs[first..first + DRILL_GROUP_NODES as usize])
                .map(|(id, addr)| (id, *addr))
                .collect();
            let mut nodes = BTreeMap::new();
            for id in 1..=DRILL_GROUP_NODES {
                let config = write_config(spec, &name, id, &peers, nameserver_addr)?;
                let mut node = broker_node(spec, &name, id, peers[&id], &config);
                if id == 1 {
                    node.process.command.push("--bootstrap".into());
                }
                node.process.start()?;
                // Bootstrap only on the group's very first start.
                node.process.command.retain(|arg| arg != "--bootstrap");
                nodes.insert(id, node);
            }
            groups.insert(name, nodes);
        }
        Ok(LocalCluster {
            spec: spec.clone(),
            nameserver,
            nameserver_addr,
            groups,
        })
    }

    pub fn nameservers(&self) -> Vec<String> {
        vec![self.nameserver_addr.to_string()]
    }

    /// How the drill's clients get in: with the nodes' admin token, if they have one.
    pub fn access(&self) -> ClusterAccess {
        self.spec.access()
    }

    pub fn group_names(&self) -> Vec<String> {
        self.groups.keys().cloned().collect()
    }

    pub fn node_ids(&self, group: &str) -> Vec<u64> {
        self.groups
            .get(group)
            .map(|nodes| nodes.keys().copied().collect())
            .unwrap_or_default()
    }

    /// The status of every node of `group` that answers.
    pub async fn statuses(&self, group: &str) -> Vec<(u64, pb::NodeStatusResponse)> {
        let Some(nodes) = self.groups.get(group) else {
            return Vec::new();
        };
        let mut statuses = Vec::new();
        for (id, node) in nodes {
            if !node.process.is_running() || node.paused {
                continue;
            }
            let client = BrokerGroupClient::new(vec![node.addr]);
            let status =
                tokio::time::timeout(Duration::from_millis(500), client.node_status(node.addr))
                    .await;
            if let Ok(Ok(status)) = status {
                statuses.push((*id, status));
            }
        }
        statuses
    }

    /// The node that leads `group` in the highest term any node reports.
    pub async fn leader(&self, group: &str) -> Option<u64> {
        self.statuses(group)
            .await
            .into_iter()
            .filter(|(_, status)| status.role == "leader")
            .max_by_key(|(_, status)| status.term)
            .map(|(id, _)| id)
    }

    /// Starts a new node for `group`, the next id, at a fresh loopback address on an empty
    /// data dir, naming only itself as a peer: it runs outside the group until the leader
    /// adds it (`mqadmin node-add`). Returns its id and address.
    pub fn start_new_node(&mut self, group: &str) -> Result<(u64, SocketAddr), ClusterError> {
        let id = self
            .groups
            .get(group)
            .and_then(|nodes| nodes.keys().max())
            .map(|last| last + 1)
            .ok_or_else(|| ClusterError::NoSuchNode {
                group: group.to_owned(),
                node: 0,
            })?;
        let addr = free_addrs(1)?[0];
        let peers = BTreeMap::from([(id, addr)]);
        let config = write_config(&self.spec, group, id, &peers, self.nameserver_addr)?;
        let mut node = broker_node(&self.spec, group, id, addr, &config);
        node.process.start()?;
        if let Some(nodes) = self.groups.get_mut(group) {
            nodes.insert(id, node);
        }
        Ok((id, addr))
    }

    /// Kills node `id` and forgets it: it left its group (its data dir stays for a
    /// post-mortem).
    pub fn forget(&mut self, group: &str, id: u64) -> Result<(), ClusterError> {
        self.kill(group, id)?;
        if let Some(nodes) = self.groups.get_mut(group) {
            nodes.remove(&id);
        }
        Ok(())
    }

    /// SIGKILL one node.
    pub fn kill(&mut self, group: &str, id: u64) -> Result<(), ClusterError> {
        let node = self.node_mut(group, id)?;
        node.process.kill();
        node.paused = false;
        Ok(())
    }

    /// Starts a stopped node on its address and data.
    pub fn restart(&mut self, group: &str, id: u64) -> Result<(), ClusterError> {
        self.node_mut(group, id)?.process.start()
    }

    /// Flips one byte a third into the stopped node's largest Raft log segment and one in the
    /// body of its first CommitLog record, as a failing disk would; says what it flipped.
    pub fn damage(&mut self, group: &str, id: u64) -> Result<Vec<String>, ClusterError> {
        let node = self.node_mut(group, id)?;
        assert!(!node.process.is_running(), "damage a stopped node only");
        let segments = node.data_dir.join("raft").join("log").join("segments");
        let largest = std::fs::read_dir(&segments)
            .map_err(io(format!("list {}", segments.display())))?
            .filter_map(Result::ok)
            .filter_map(|entry| Some((entry.metadata().ok()?.len(), entry.path())))
            .max();
        let commit_log = node
            .data_dir
            .join("store")
            .join("commitlog")
            .join(format!("{:020}", 0));
        let mut flipped = Vec::new();
        if let Some((len, path)) = largest {
            flipped.push(flip_byte(&path, len / 3)?);
        }
        // 500 bytes in lies in the first record's body (a record's header is 100 bytes or so).
        if commit_log.exists() {
            flipped.push(flip_byte(&commit_log, 500)?);
        }
        Ok(flipped)
    }

    /// What a power cut takes from a stopped node: `broker lose-unsynced` zeroes its
    /// CommitLog past the last checkpoint's flush. Returns what the broker says it took.
    pub fn lose_unsynced(&mut self, group: &str, id: u64) -> Result<String, ClusterError> {
        let broker_bin = self.spec.broker_bin.clone();
        let node = self.node_mut(group, id)?;
        assert!(!node.process.is_running(), "a stopped node only");
        let what = format!("{group} node {id}: broker lose-unsynced");
        let output = std::process::Command::new(&broker_bin)
            .arg("lose-unsynced")
            .arg("--data-dir")
            .arg(&node.data_dir)
            .output()
            .map_err(io(what.clone()))?;
        if !output.status.success() {
            return Err(ClusterError::Refused {
                what,
                reason: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// SIGSTOP: the process stays, answers nothing.
    pub fn pause(&mut self, group: &str, id: u64) -> Result<(), ClusterError> {
        let node = self.node_mut(group, id)?;
        node.process.signal(libc::SIGSTOP);
        node.paused = true;
        Ok(())
    }

    /// Cuts the node off through its own fault hook, or heals it: partitioned from its
    /// group's Raft traffic (clients still reach it, as in a real network partition), or
    /// blackholed (nothing it is asked, by peers or clients, is answered, as when its host
    /// drops off the network).
    pub async fn inject_fault(
        &self,
        group: &str,
        id: u64,
        fault: NetworkFault,
    ) -> Result<(), ClusterError> {
        let addr = self
            .groups
            .get(group)
            .and_then(|nodes| nodes.get(&id))
            .map(|node| node.addr)
            .ok_or_else(|| ClusterError::NoSuchNode {
                group: group.to_owned(),
                node: id,
            })?;
        let refused = |reason: String| ClusterError::Refused {
            what: format!("{fault:?} {group} node {id}"),
            reason,
        };
        let access = self.spec.access();
        let mut client = access
            .connect(addr)
            .await
            .map_err(|error| refused(error.to_string()))?;
        client
            .inject_fault(access.admin_request(pb::InjectFaultRequest {
                isolate: fault == NetworkFault::Partition,
                blackhole: fault == NetworkFault::Blackhole,
            }))
            .await
            .map_err(|status| refused(status.to_string()))?;
        Ok(())
    }

    /// SIGCONT.
    pub fn resume(&mut self, group: &str, id: u64) -> Result<(), ClusterError> {
        let node = self.node_mut(group, id)?;
        node.process.signal(libc::SIGCONT);
        node.paused = false;
        Ok(())
    }

    fn node_mut(&mut self, group: &str, id: u64) -> Result<&mut Node, ClusterError> {
        self.groups
            .get_mut(group)
            .and_then(|nodes| nodes.get_mut(&id))
            .ok_or_else(|| ClusterError::NoSuchNode {
                group: group.to_owned(),
                node: id,
            })
    }
}

impl Drop for LocalCluster {
    /// Brokers first, then the nameserver they register with.
    fn drop(&mut self) {
        for nodes in self.groups.values_mut() {
            for node in nodes.values_mut() {
                node.process.kill();
            }
        }
        self.nameserver.kill();
    }
}

/// A process is killed when it is dropped, so a cluster that fails half-way through its
/// start, or is dropped, leaves nothing running.
impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Broker node `id` of `group` (not started) at `addr`, run from `config`.
fn broker_node(spec: &ClusterSpec, group: &str, id: u64, addr: SocketAddr, config: &Path) -> Node {
    Node {
        data_dir: spec.work_dir.join(format!("{group}-{id}")),
        addr,
        process: Process {
            name: format!("{group} node {id}"),
            command: vec![
                spec.broker_bin.display().to_string(),
                "--config".into(),
                config.display().to_string(),
            ],
            log: spec.work_dir.join(format!("{group}-{id}.log")),
            child: None,
        },
        paused: false,
    }
}

/// Free loopback ports (bound, read, released just before the processes bind them).
fn free_addrs(count: usize) -> Result<Vec<SocketAddr>, ClusterError> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io("bind a loopback port"))?;
    listeners
        .iter()
        .map(|listener| listener.local_addr())
        .collect::<Result<_, _>>()
        .map_err(io("read a loopback port"))
}

/// Inverts one bit of the byte at `at` of `path`, durably; describes what it did.
fn flip_byte(path: &Path, at: u64) -> Result<String, ClusterError> {
    use std::os::unix::fs::FileExt;
    let what = format!("flip byte {at} of {}", path.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io(what.clone()))?;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, at)
        .and_then(|()| file.write_all_at(&[byte[0] ^ 0x10], at))
        .and_then(|()| file.sync_all())
        .map_err(io(what.clone()))?;
    Ok(what)
}

/// Writes node `id`'s config; `peers` are the nodes it names (the founding membership, or
/// only itself for a node that joins later).
fn write_config(
    spec: &ClusterSpec,
    group: &str,
    id: u64,
    peers: &BTreeMap<u64, SocketAddr>,
    nameserver: SocketAddr,
) -> Result<PathBuf, ClusterError> {
    let listen = peers[&id];
    let peers: String = peers
        .iter()
        .map(|(id, addr)| format!("{id} = \"{addr}\"\n"))
        .collect();
    let churn = |value| spec.retention_churn.then_some(value);
    let timings: String = [
        ("heartbeat_interval_ms", spec.heartbeat_interval_ms),
        ("election_timeout_min_ms", spec.election_timeout_min_ms),
        ("election_timeout_max_ms", spec.election_timeout_max_ms),
        (
            "log_compaction_interval_ms",
            churn(CHURN_COMPACTION_INTERVAL_MS),
        ),
        ("log_retained_entries", churn(CHURN_RETAINED_ENTRIES)),
    ]
    .into_iter()
    .filter_map(|(key, value)| value.map(|value| format!("{key} = {value}\n")))
    .collect();
    let (store, retention) = if spec.retention_churn {
        (
            format!(
                "commit_log_segment_bytes = {CHURN_SEGMENT_BYTES}\nindex_entries_per_file = 100000\n"
            ),
            "[retention]\nfile_reserved_hours = 0\ncheck_interval_ms = 500\n",
        )
    } else {
        (DRILL_STORE_SIZES.to_owned(), "")
    };
    let config = format!(
        "cluster = \"DrillCluster\"\ngroup = \"{group}\"\nnode_id = {id}\nlisten = \"{listen}\"\n\
         data_dir = \"{data}\"\nflush = \"sync\"\nauto_create_topic = true\nenable_fault_injection = true\n\
         namesrv = [\"{nameserver}\"]\nregister_interval_ms = 1000\ndelay_levels = \"{levels}\"\n\
         [raft]\n{timings}[store]\n{store}{retention}[peers]\n{peers}",
        data = spec.work_dir.join(format!("{group}-{id}")).display(),
        levels = spec.delay_levels,
    );
    let config = match &spec.admin_token {
        // Top-level keys go before the first table.
        Some(token) => format!("admin_token = {token:?}\n{config}"),
        None => config,
    };
    let path = spec.work_dir.join(format!("{group}-{id}.toml"));
    std::fs::write(&path, config).map_err(io(format!("write {}", path.display())))?;
    Ok(path)
}
