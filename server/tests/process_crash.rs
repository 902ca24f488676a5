//! Durability with real processes: three `broker` processes form a group, a producer keeps
//! sending, and the leader is killed with SIGKILL mid-traffic. Every acknowledged send must
//! be in the consume queue of every node afterwards, at the offset it was acknowledged with,
//! including the killed node once it restarts. Log compaction runs every 300 ms, so the
//! restarted node recovers from its checkpoint with most of its Raft log purged.
//!
//! Nodes listen on loopback ports picked by the OS; each process is killed when the test
//! ends, pass or fail.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;

use rocketraft_client::group::BrokerGroupClient;
use rocketraft_client::group::connect;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common as common_pb;

const TOPIC: &str = "CrashTopic";
const QUEUES: i32 = 4;
const SEND_TIMEOUT: Duration = Duration::from_secs(30);
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// One `broker` process; killed on drop so no test leaves it running.
struct BrokerProcess {
    child: Child,
}

impl BrokerProcess {
    fn spawn(config: &Path, bootstrap: bool) -> anyhow::Result<BrokerProcess> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_broker"));
        command
            .arg("--config")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if bootstrap {
            command.arg("--bootstrap");
        }
        Ok(BrokerProcess {
            child: command.spawn()?,
        })
    }

    /// SIGKILL: no shutdown path runs, nothing is flushed.
    fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Free loopback ports for the nodes (bound, read, released just before the nodes bind them).
fn free_addrs(count: usize) -> anyhow::Result<Vec<SocketAddr>> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?)
}

fn write_config(
    dir: &Path,
    node_id: usize,
    addrs: &[SocketAddr],
) -> anyhow::Result<std::path::PathBuf> {
    let peers: String = addrs
        .iter()
        .enumerate()
        .map(|(i, addr)| format!("{} = \"{addr}\"\n", i + 1))
        .collect();
    let config = format!(
        "group = \"broker-a\"\nnode_id = {node_id}\nlisten = \"{}\"\ndata_dir = \"{}\"\nflush = \"sync\"\nauto_create_topic = true\n\
         [raft]\nheartbeat_interval_ms = 50\nelection_timeout_min_ms = 400\nelection_timeout_max_ms = 800\nlog_compaction_interval_ms = 300\nlog_retained_entries = 16\n\
         [store]\ncommit_log_segment_bytes = 8388608\nconsume_queue_units_per_segment = 4096\n\
         raft_log_segment_bytes = 1048576\n[peers]\n{peers}",
        addrs[node_id - 1],
        dir.join(format!("node-{node_id}")).display(),
    );
    let path = dir.join(format!("node-{node_id}.toml"));
    std::fs::write(&path, config)?;
    Ok(path)
}

async fn send_range(
    group: &BrokerGroupClient,
    range: std::ops::Range<usize>,
) -> anyhow::Result<Vec<pb::SendResult>> {
    let mut acked = Vec::new();
    for i in range {
        let request = pb::SendRequest {
            topic: TOPIC.into(),
            queue_id: (i % QUEUES as usize) as i32,
            messages: vec![common_pb::Message {
                topic: TOPIC.into(),
                body: format!("m{i}").into_bytes().into(),
                ..Default::default()
            }],
            born_timestamp_ms: 0,
            born_host: String::new(),
            deduplicate: false,
            queue_ids: Vec::new(),
        };
        acked.extend(group.send(request, SEND_TIMEOUT).await?.results);
    }
    Ok(acked)
}

/// The consume queue units of every queue on the node at `addr`: queue -> offset -> commitlog offset.
async fn queues_of(addr: SocketAddr) -> anyhow::Result<BTreeMap<i32, Vec<i64>>> {
    let mut client = connect(addr).await?;
    let mut queues = BTreeMap::new();
    for queue_id in 0..QUEUES {
        let mut units = Vec::new();
        loop {
            let request = pb::ReadConsumeQueueRequest {
                topic: TOPIC.into(),
                queue_id,
                from_queue_offset: units.len() as i64,
                max_units: 4096,
            };
            let response = client.read_consume_queue(request).await?.into_inner();
            if response.units.is_empty() {
                break;
            }
            units.extend(response.units.iter().map(|unit| unit.commit_log_offset));
        }
        queues.insert(queue_id, units);
    }
    Ok(queues)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_leader_killed_mid_traffic_should_keep_every_acknowledged_send() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let addrs = free_addrs(3)?;
    let configs = (1..=3)
        .map(|id| write_config(dir.path(), id, &addrs))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut processes = Vec::new();
    for (index, config) in configs.iter().enumerate() {
        processes.push(BrokerProcess::spawn(config, index == 0)?);
    }
    let group = BrokerGroupClient::new(addrs.clone());

    let mut acked = send_range(&group, 0..300).await?;
    let leader = group
        .find_leader()
        .await
        .ok_or_else(|| anyhow::anyhow!("no leader"))?;
    let leader_index = addrs
        .iter()
        .position(|addr| *addr == leader)
        .expect("leader is a node");
    let killer = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        processes[leader_index].kill()
    };
    // Sends continue while the leader dies; those acknowledged before or after must survive.
    let (sent, killed) = tokio::join!(send_range(&group, 300..900), killer);
    killed?;
    acked.extend(sent?);

    processes[leader_index] = BrokerProcess::spawn(&configs[leader_index], false)?;
    let deadline = tokio::time::Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let mut ends = Vec::new();
        for addr in &addrs {
            ends.push(
                group
                    .node_status(*addr)
                    .await
                    .ok()
                    .map(|s| s.commit_log_max_offset),
            );
        }
        if ends.iter().all(|end| end.is_some() && *end == ends[0]) {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "nodes did not converge: {ends:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let reference = queues_of(addrs[0]).await?;
    for addr in &addrs[1..] {
        assert_eq!(
            queues_of(*addr).await?,
            reference,
            "consume queues of {addr} differ"
        );
    }
    for result in &acked {
        let units = &reference[&result.queue_id];
        assert_eq!(
            units.get(result.queue_offset as usize),
            Some(&result.commit_log_offset),
            "acknowledged send at queue {} offset {} is missing",
            result.queue_id,
            result.queue_offset
        );
    }
    assert!(
        acked.len() >= 900,
        "every send was acknowledged once it succeeded"
    );
    Ok(())
}
