//! `broker`: runs one broker node from a TOML config (flags override its keys), or
//! `broker dev`: a whole local broker group in one process for development.

/// mimalloc: the send and apply paths allocate per batch and per record; measured under W1
/// it costs less CPU than glibc malloc (see docs/performance.md). Built with `no_thp`: asking
/// for transparent huge pages made every fresh arena region a 2 MiB page zeroed at its first
/// touch, and kept each broker's RSS under W1 about 55 MB higher for no CPU gained.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::cell::Cell;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use clap::Subcommand;
use rocketraft_broker::config::store_dir;
use rocketraft_broker::data_dir_lock::DataDirLock;
use rocketraft_broker::node::NodeOptions;
use rocketraft_broker::store::power_loss::lose_unsynced as lose_unsynced_writes;
use rocketraft_server::Node;
use rocketraft_server::ServerConfig;
use rocketraft_server_kit::logging::LogFormat;
use rocketraft_server_kit::logging::init_logging;

use crate::dev::DevCluster;
use crate::dev::run_dev;

mod dev;

#[derive(Parser)]
#[command(name = "broker", about = "rocketraft broker node", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// TOML config file; the flags below override its keys.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    cluster: Option<String>,
    #[arg(long)]
    group: Option<String>,
    #[arg(long)]
    node_id: Option<u64>,
    /// The broker API's address (and Raft's, without --raft-listen).
    #[arg(long)]
    listen: Option<String>,
    /// Serve Raft on this address of its own (firewall it to the group's hosts).
    #[arg(long)]
    raft_listen: Option<String>,
    /// A node of the group as ID=ADDR, or ID="ADDR raft=RAFT_ADDR" for a node with a
    /// --raft-listen; repeat for every node, this one included.
    #[arg(long = "peer", value_name = "ID=ADDR")]
    peers: Vec<String>,
    /// Nameserver addresses, comma separated.
    #[arg(long)]
    namesrv: Option<String>,
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// `sync` (fsync before acknowledging) or `async`.
    #[arg(long)]
    flush: Option<String>,
    /// Found a new group on this node's first start (one node, first start only).
    #[arg(long)]
    bootstrap: bool,
    /// Create unknown topics on their first send.
    #[arg(long)]
    auto_create_topic: bool,
    /// Delay levels, e.g. "1s 5s 10s" (units s, m, h, d).
    #[arg(long)]
    delay_levels: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Serve RocketMQ 5.x's gRPC API (for the official 5.x clients) on this address.
    #[arg(long)]
    grpc_v5_listen: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Drills only: what a power cut takes from a stopped node, its CommitLog bytes past the
    /// last checkpoint's flush (zeroed); the next start replays them from the Raft log.
    LoseUnsynced {
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Start a nameserver and a local broker group in this process (data persists across
    /// restarts).
    Dev {
        #[arg(long, default_value = "./data/dev")]
        data_dir: PathBuf,
        /// Nodes in the group: 1, 3 or 5.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        /// Node n listens on base-port + n - 1.
        #[arg(long, default_value_t = 10911)]
        base_port: u16,
        #[arg(long, default_value = "sync")]
        flush: String,
        /// Address of the embedded nameserver.
        #[arg(long, default_value = rocketraft_nameserver::server::LISTEN_DEFAULT)]
        namesrv_listen: SocketAddr,
        /// Delay levels, e.g. "1s 5s 10s" (units s, m, h, d); RocketMQ's 18 by default.
        #[arg(long)]
        delay_levels: Option<String>,
        /// Node n serves RocketMQ 5.x's gRPC API on grpc-v5-base-port + n - 1 (8081: the
        /// port of a RocketMQ 5.x proxy).
        #[arg(long, default_value_t = 8081)]
        grpc_v5_base_port: u16,
    },
}

/// What is logged when `RUST_LOG` is unset.
const LOG_FILTER_DEFAULT: &str = "info,openraft=warn";

/// How often a runtime thread hands the memory it freed back to the OS, at most.
const RELEASE_FREED_MEMORY_EVERY: Duration = Duration::from_secs(1);

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(release_freed_memory)
        .build()
        .context("start the tokio runtime")?
        .block_on(run(Cli::parse()))
}

/// Runs whenever a runtime thread parks (it has nothing to do). mimalloc gives a thread's
/// freed pages back to the OS only during that thread's later allocations, so a worker that
/// goes quiet after a burst would keep them for as long as the node stays idle (measured
/// under W1: 71-94 MB anonymous memory per broker 45 s after the load, against 27 MB at start).
/// At most once a second per thread, it collects them here.
fn release_freed_memory() {
    thread_local! {
        static LAST_RELEASE: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    LAST_RELEASE.with(|last| {
        if last
            .get()
            .is_some_and(|at| now.duration_since(at) < RELEASE_FREED_MEMORY_EVERY)
        {
            return;
        }
        last.set(Some(now));
        // SAFETY: `mi_collect` has no preconditions; it frees only memory that no live
        // allocation uses.
        unsafe { libmimalloc_sys::mi_collect(false) };
    });
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Dev {
            ref data_dir,
            nodes,
            base_port,
            ref flush,
            namesrv_listen,
            ref delay_levels,
            grpc_v5_base_port,
        }) => {
            let dev = DevCluster {
                data_dir: data_dir.clone(),
                nodes,
                base_port,
                flush: flush.clone(),
                namesrv_listen,
                delay_levels: delay_levels.clone(),
                grpc_v5_base_port,
            };
            init_logging(LogFormat::Text, LOG_FILTER_DEFAULT);
            run_dev(dev).await
        }
        Some(Command::LoseUnsynced { ref data_dir }) => lose_unsynced(data_dir),
        None => run_node(cli).await,
    }
}

fn lose_unsynced(data_dir: &Path) -> anyhow::Result<()> {
    // Held while the files change: a running node keeps the data dir locked.
    let _stopped = DataDirLock::acquire(data_dir)?;
    let lost = lose_unsynced_writes(&store_dir(data_dir))?;
    println!(
        "lost {} CommitLog bytes past offset {} (the last checkpoint's flush)",
        lost.bytes_lost, lost.flushed_offset
    );
    Ok(())
}

async fn run_node(cli: Cli) -> anyhow::Result<()> {
    let config = node_config(&cli)?;
    init_logging(config.broker.log_format, LOG_FILTER_DEFAULT);
    let node = Node::start(config, NodeOptions::default()).await?;
    let broker = node.broker();
    println!(
        "broker node {} serving on {}",
        broker.node_id(),
        broker.addr()
    );
    if let Some(endpoint) = node.grpc_v5_addr() {
        println!("RocketMQ 5.x gRPC endpoint on {endpoint}");
    }
    tokio::signal::ctrl_c().await.context("wait for ctrl-c")?;
    node.shutdown().await;
    Ok(())
}

/// The config file's table with the flags written over it, then parsed and validated, so an
/// error names the key whether it came from the file or a flag.
fn node_config(cli: &Cli) -> anyhow::Result<ServerConfig> {
    let mut table = match &cli.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read config {}", path.display()))?;
            text.parse::<toml::Table>()
                .with_context(|| format!("parse config {}", path.display()))?
        }
        None => toml::Table::new(),
    };
    let mut set = |key: &str, value: Option<toml::Value>| {
        if let Some(value) = value {
            table.insert(key.to_owned(), value);
        }
    };
    set("cluster", cli.cluster.clone().map(Into::into));
    set("group", cli.group.clone().map(Into::into));
    set(
        "node_id",
        cli.node_id.map(|id| toml::Value::Integer(id as i64)),
    );
    set("listen", cli.listen.clone().map(Into::into));
    set("raft_listen", cli.raft_listen.clone().map(Into::into));
    set(
        "data_dir",
        cli.data_dir
            .as_ref()
            .map(|dir| dir.display().to_string().into()),
    );
    set("flush", cli.flush.clone().map(Into::into));
    set("delay_levels", cli.delay_levels.clone().map(Into::into));
    set("metrics_listen", cli.metrics_listen.clone().map(Into::into));
    set("grpc_v5_listen", cli.grpc_v5_listen.clone().map(Into::into));
    set("bootstrap", cli.bootstrap.then_some(true.into()));
    set(
        "auto_create_topic",
        cli.auto_create_topic.then_some(true.into()),
    );
    set(
        "namesrv",
        cli.namesrv.as_ref().map(|list| {
            list.split(',')
                .map(|a| toml::Value::from(a.trim()))
                .collect::<Vec<_>>()
                .into()
        }),
    );
    if !cli.peers.is_empty() {
        let mut peers = toml::Table::new();
        for peer in &cli.peers {
            let (id, addr) = peer
                .split_once('=')
                .with_context(|| format!("--peer {peer:?}: expected ID=ADDR"))?;
            peers.insert(id.trim().to_owned(), addr.trim().into());
        }
        table.insert("peers".to_owned(), peers.into());
    }
    let config = ServerConfig::from_table(table)?;
    config.validate()?;
    Ok(config)
}
