//! `rocketraft-bench`: append throughput and latency of a running broker group.
//!
//! Workload W1 of `bench/`: `--size`-byte messages, `--producers` connections, each
//! keeping `--inflight` sends outstanding, one message per send (the broker's group commit
//! does the batching). Either straight to the leader of `--broker`'s group (found through
//! `NodeStatus`), or through the producer SDK with `--namesrv`, or with `--v5-endpoint`
//! through a node's RocketMQ 5.x endpoint (`SendMessage`, one message per call, as the
//! official 5.x clients send; `--namesrv` still creates the topic and finds the servers), or
//! with `--remoting` through a node's RocketMQ 4.x face (`SEND_MESSAGE_V2` on one connection
//! per producer, pipelined as the Java client pipelines, the queues chosen round-robin).
//!
//! With `--consume GROUP` (needs `--namesrv`) a push consumer of that new group then drains
//! `--messages` messages of the topic from the first offset; `--skip-send` only drains.
//!
//! Each phase reports CPU time per message: the bench's own (the client) and, with
//! `--namesrv`, that of every broker process of the cluster (from `NodeStatus`, summed per
//! process). A progress line goes to stderr every second; `--json` adds one JSON object
//! with every figure as the last line.

/// mimalloc, as the broker: the bench is the client whose CPU per message it reports, and
/// glibc malloc's free-list upkeep (`_int_malloc`, `malloc_consolidate`, `unlink_chunk`) was
/// about a sixth of that CPU under W1.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use clap::Parser;
use rocketraft_cli::access::AccessArgs;
use rocketraft_cli::access::ClusterAccess;
use rocketraft_cli::remoting_producer::RemotingProducer;
use rocketraft_client::consumer::ConsumeFrom;
use rocketraft_client::consumer::ConsumeOrderlyResult;
use rocketraft_client::consumer::ConsumeResult;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::group::BrokerGroupClient;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::message::encode_properties;
use rocketraft_client::message::property;
use rocketraft_client::producer::Producer;
use rocketraft_client::transaction::LocalTransactionState;
use rocketraft_client::transaction::TransactionEnd;
use rocketraft_domain::time::now_ms;
use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use rocketraft_proto::common as common_pb;
use rocketraft_proto::v5;
use rocketraft_proto::v5::messaging_service_client::MessagingServiceClient;
use std::net::SocketAddr;
use tonic::transport::Channel;

/// How long to wait for the group to have a leader.
const LEADER_WAIT: Duration = Duration::from_secs(30);
/// How long draining may take before the run fails.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Parser)]
#[command(about = "append benchmark against a running rocketraft broker group")]
struct Args {
    /// Any node of the group.
    #[arg(long, default_value = "127.0.0.1:10911")]
    broker: SocketAddr,
    #[arg(short = 'n', long, default_value_t = 200_000)]
    messages: u64,
    #[arg(short = 's', long, default_value_t = 1024)]
    size: usize,
    #[arg(short = 'c', long, default_value_t = 4)]
    producers: usize,
    #[arg(long, default_value_t = 256)]
    inflight: usize,
    #[arg(long, default_value = "BenchTopic")]
    topic: String,
    /// Queues of the topic, created (or updated) before the run.
    #[arg(long, default_value_t = 8)]
    queues: u32,
    /// Send through the producer SDK, routed by these nameservers (comma separated),
    /// instead of straight to the leader of `--broker`'s group.
    #[arg(long, value_delimiter = ',')]
    namesrv: Vec<String>,
    /// Drain the topic with a push consumer of this group (from the first offset).
    #[arg(long)]
    consume: Option<String>,
    /// Messages per listener call when draining.
    #[arg(long, default_value_t = 32)]
    consume_batch: usize,
    /// Only drain (the topic was filled before).
    #[arg(long)]
    skip_send: bool,
    /// Send delayed messages of this level (0: not delayed).
    #[arg(long, default_value_t = 0, conflicts_with = "timers_due_in_ms")]
    delay_level: u32,
    /// Send timer messages all due at one time, this many ms after the bench starts; the
    /// drain then reports how long after that time the last one arrived.
    #[arg(long)]
    timers_due_in_ms: Option<u64>,
    /// Send every message as a transaction (half message, then commit through the SDK).
    #[arg(long, requires = "namesrv")]
    transactional: bool,
    /// Send through this RocketMQ 5.x endpoint (a node's `grpc_v5_listen`) instead of the SDK.
    #[arg(long, requires = "namesrv", conflicts_with_all = ["transactional", "delay_level", "timers_due_in_ms"])]
    v5_endpoint: Option<SocketAddr>,
    /// Send as a 4.x producer to this broker node (its port serves RocketMQ's remoting).
    #[arg(long, requires = "namesrv", conflicts_with_all = ["transactional", "delay_level", "timers_due_in_ms", "v5_endpoint"])]
    remoting: Option<SocketAddr>,
    /// Drain with an orderly listener: each queue's messages in order, under its lock.
    #[arg(long, requires = "consume")]
    orderly: bool,
    /// Also print every figure as one JSON object (the last line).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    access: AccessArgs,
}

/// CPU time of the broker processes, keyed by (host, pid).
type ServerCpu = HashMap<(String, u32), Duration>;

/// CPU spent by the client and the servers between two points of a run.
struct CpuMark {
    client: Duration,
    servers: Option<ServerCpu>,
}

impl CpuMark {
    async fn now(access: &ClusterAccess, namesrv: &[String]) -> CpuMark {
        CpuMark {
            client: rocketraft_domain::process::cpu_time(),
            servers: if namesrv.is_empty() {
                None
            } else {
                match servers_cpu(access, namesrv).await {
                    Ok(cpu) => Some(cpu),
                    Err(error) => {
                        eprintln!("server CPU unknown: {error:#}");
                        None
                    }
                }
            },
        }
    }

    /// Microseconds of CPU per message since `self`: (client, servers and their count).
    async fn per_message(
        &self,
        access: &ClusterAccess,
        namesrv: &[String],
        messages: u64,
    ) -> CpuPerMessage {
        let later = CpuMark::now(access, namesrv).await;
        let per = |spent: Duration| spent.as_secs_f64() * 1e6 / messages.max(1) as f64;
        let servers = match (&self.servers, &later.servers) {
            (Some(before), Some(after)) => {
                let spent: Duration = after
                    .iter()
                    .filter_map(|(process, cpu)| Some(cpu.saturating_sub(*before.get(process)?)))
                    .sum();
                Some((per(spent), after.len()))
            }
            _ => None,
        };
        CpuPerMessage {
            client_us: per(later.client.saturating_sub(self.client)),
            servers,
        }
    }
}

struct CpuPerMessage {
    client_us: f64,
    /// Microseconds per message over all server processes, and how many there were.
    servers: Option<(f64, usize)>,
}

impl CpuPerMessage {
    fn print(&self, phase: &str) {
        let servers = match self.servers {
            Some((us, processes)) => format!("servers {us:.1} us ({processes} processes)"),
            None => "servers unknown (needs --namesrv)".to_owned(),
        };
        println!(
            "{phase} cpu per message: client {:.1} us, {servers}",
            self.client_us
        );
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "client_cpu_us_per_msg": self.client_us,
            "servers_cpu_us_per_msg": self.servers.map(|(us, _)| us),
            "server_processes": self.servers.map(|(_, count)| count),
        })
    }
}

/// CPU time of every broker process of the cluster the nameservers know.
async fn servers_cpu(access: &ClusterAccess, namesrv: &[String]) -> anyhow::Result<ServerCpu> {
    let cluster = access.admin(namesrv.to_vec()).cluster_info().await?;
    let mut cpu = ServerCpu::new();
    for group in cluster.groups {
        for addr in group.nodes.values() {
            let addr: SocketAddr = addr.parse()?;
            let status = access
                .connect(addr)
                .await?
                .node_status(pb::NodeStatusRequest {})
                .await?
                .into_inner();
            cpu.insert(
                (addr.ip().to_string(), status.process_id),
                Duration::from_micros(status.process_cpu_micros),
            );
        }
    }
    Ok(cpu)
}

/// What a benchmark message waits for.
#[derive(Clone, Copy)]
enum Delay {
    None,
    Level(u32),
    /// A timer due at this time, ms since the epoch.
    TimerAt(i64),
}

impl Delay {
    fn of(args: &Args, started_ms: i64) -> Delay {
        match (args.timers_due_in_ms, args.delay_level) {
            (Some(due_in), _) => Delay::TimerAt(started_ms + due_in as i64),
            (None, 0) => Delay::None,
            (None, level) => Delay::Level(level),
        }
    }

    /// The property that asks for it, if any.
    fn property(self) -> Option<(&'static str, String)> {
        match self {
            Delay::None => None,
            Delay::Level(level) => Some((property::DELAY, level.to_string())),
            Delay::TimerAt(at) => Some((property::TIMER_DELIVER_MS, at.to_string())),
        }
    }
}

/// How a benchmark producer sends one message.
#[derive(Clone)]
enum Sender {
    /// Straight to the group leader's broker API, queues chosen round-robin.
    Direct {
        client: BrokerClient<Channel>,
        queues: u32,
        delay: Delay,
    },
    /// Through a 5.x endpoint, as an official 5.x client sends (the endpoint picks the queue).
    V5 {
        client: MessagingServiceClient<Channel>,
        /// Names this run's messages apart from other runs'.
        run: i64,
    },
    /// As a 4.x producer, to one broker node, queues chosen round-robin.
    Remoting {
        producer: RemotingProducer,
        queues: u32,
        /// Names this run's messages apart from other runs'.
        run: i64,
    },
    /// Through the SDK: route lookup, queue selection and retries included.
    Sdk {
        producer: Producer,
        delay: Delay,
        transactional: bool,
    },
}

impl Sender {
    async fn send(self, topic: String, body: Bytes, sequence: u64) -> anyhow::Result<()> {
        match self {
            Sender::Direct {
                client,
                queues,
                delay,
            } => Box::pin(send_direct(client, queues, delay, topic, body, sequence)).await,
            Sender::V5 { client, run } => {
                Box::pin(send_v5(client, run, topic, body, sequence)).await
            }
            Sender::Remoting {
                producer,
                queues,
                run,
            } => {
                let properties = format!("UNIQ_KEY\u{1}BENCH{run:X}{sequence:016X}\u{2}");
                let queue_id = (sequence % u64::from(queues)) as i32;
                Box::pin(producer.send(&topic, queue_id, &properties, body)).await?;
                Ok(())
            }
            Sender::Sdk {
                producer,
                delay,
                transactional,
            } => {
                let mut message = Message::new(topic, body);
                if let Some((key, value)) = delay.property() {
                    message = message.with_property(key, value);
                }
                if !transactional {
                    producer.send(message).await?;
                    return Ok(());
                }
                let commit = |_| async { LocalTransactionState::Commit };
                let sent = producer.send_in_transaction(message, commit).await?;
                anyhow::ensure!(
                    sent.end == Some(TransactionEnd::Committed),
                    "transaction {} not committed: {:?}",
                    sent.send.msg_id,
                    sent.end
                );
                Ok(())
            }
        }
    }
}

/// One send straight to the leader. Boxed by its caller: its gRPC call makes a large future,
/// which would otherwise size every SDK send the bench keeps in flight too.
async fn send_direct(
    mut client: BrokerClient<Channel>,
    queues: u32,
    delay: Delay,
    topic: String,
    body: Bytes,
    sequence: u64,
) -> anyhow::Result<()> {
    let delay = delay.property();
    let message = common_pb::Message {
        topic: topic.clone(),
        body,
        properties: encode_properties(delay.as_ref().map(|(key, value)| (*key, value.as_str()))),
        ..Default::default()
    };
    let request = pb::SendRequest {
        topic,
        queue_id: (sequence % u64::from(queues)) as i32,
        messages: vec![message],
        born_timestamp_ms: 0,
        born_host: String::new(),
        deduplicate: false,
        queue_ids: Vec::new(),
    };
    client.send(request).await?;
    Ok(())
}

/// One `SendMessage` of one NORMAL message to a 5.x endpoint. Boxed by its caller, as
/// [`send_direct`].
async fn send_v5(
    mut client: MessagingServiceClient<Channel>,
    run: i64,
    topic: String,
    body: Bytes,
    sequence: u64,
) -> anyhow::Result<()> {
    let message = v5::Message {
        topic: Some(v5::Resource {
            resource_namespace: String::new(),
            name: topic,
        }),
        user_properties: HashMap::new(),
        system_properties: Some(v5::SystemProperties {
            message_id: format!("BENCH{run:X}{sequence:016X}"),
            message_type: v5::MessageType::Normal as i32,
            body_encoding: v5::Encoding::Identity as i32,
            ..Default::default()
        }),
        body,
    };
    let response = client
        .send_message(v5::SendMessageRequest {
            messages: vec![message],
        })
        .await?
        .into_inner();
    let status = response.status.unwrap_or_default();
    anyhow::ensure!(
        status.code() == v5::Code::Ok,
        "5.x send refused: {:?} {}",
        status.code(),
        status.message
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let access = ClusterAccess::load(&args.access)?;
    let started_ms = now_ms();
    anyhow::ensure!(
        args.consume.is_none() || !args.namesrv.is_empty(),
        "--consume needs --namesrv"
    );
    let mut report = serde_json::Map::new();
    if !args.skip_send {
        report.insert(
            "send".into(),
            produce_all(&args, &access, started_ms).await?,
        );
    }
    if let Some(group) = &args.consume {
        report.insert(
            "consume".into(),
            drain(&args, &access, group, started_ms).await?,
        );
    }
    if args.json {
        println!("{}", serde_json::Value::Object(report));
    }
    Ok(())
}

/// Prints how far a phase got, every second, until `done` reaches `total`.
fn spawn_progress(
    phase: &'static str,
    done: Arc<AtomicU64>,
    total: u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut ticker = tokio::time::interval(Duration::from_secs(1));
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let count = done.load(Ordering::Relaxed);
            eprintln!(
                "progress: {count}/{total} {phase}, {:.0} per s so far",
                count as f64 / started.elapsed().as_secs_f64()
            );
            if count >= total {
                return;
            }
        }
    })
}

/// Drains `--messages` messages of the topic with a push consumer; prints the rate.
async fn drain(
    args: &Args,
    access: &ClusterAccess,
    group: &str,
    started_ms: i64,
) -> anyhow::Result<serde_json::Value> {
    let consumed = Arc::new(AtomicU64::new(0));
    let counter = consumed.clone();
    // Timers: when the first arrived (ms since the epoch; 0 until then).
    let first_ms = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let first = first_ms.clone();
    let cpu = CpuMark::now(access, &args.namesrv).await;
    let progress = spawn_progress("consumed", consumed.clone(), args.messages);
    let started = Instant::now();
    let mut builder = PushConsumer::builder(args.namesrv.clone(), group);
    if let Some(tls) = access.tls() {
        builder = builder.tls(tls.clone());
    }
    let builder = builder
        .subscribe(&args.topic, "*")
        .consume_from(ConsumeFrom::First)
        .consume_batch_max_size(args.consume_batch);
    let count = move |messages: &[MessageExt]| {
        counter.fetch_add(messages.len() as u64, Ordering::Relaxed);
        if messages
            .iter()
            .any(|message| message.properties.contains_key(property::TIMER_DELIVER_MS))
        {
            let _ = first.compare_exchange(0, now_ms(), Ordering::Relaxed, Ordering::Relaxed);
        }
    };
    let consumer = if args.orderly {
        builder
            .start_orderly(move |messages: Vec<MessageExt>, _context| {
                count(&messages);
                async { ConsumeOrderlyResult::Success }
            })
            .await?
    } else {
        builder
            .start(move |messages: Vec<MessageExt>, _context| {
                count(&messages);
                async { ConsumeResult::Success }
            })
            .await?
    };
    let deadline = started + DRAIN_TIMEOUT;
    while consumed.load(Ordering::Relaxed) < args.messages {
        if Instant::now() >= deadline {
            consumer.shutdown().await;
            anyhow::bail!(
                "consumed only {} of {} messages within {DRAIN_TIMEOUT:?}",
                consumed.load(Ordering::Relaxed),
                args.messages
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    let last_ms = now_ms();
    progress.abort();
    let count = consumed.load(Ordering::Relaxed);
    let cpu = cpu.per_message(access, &args.namesrv, count).await;
    consumer.shutdown().await;
    let rate = count as f64 / elapsed.as_secs_f64();
    println!(
        "consumed {count} in {:.2} s with one {}push consumer: {rate:.0} msg/s",
        elapsed.as_secs_f64(),
        if args.orderly { "orderly " } else { "" },
    );
    cpu.print("consume");
    let mut json = cpu.json();
    if let Some(due_in) = args.timers_due_in_ms {
        let due_ms = started_ms + due_in as i64;
        let (first, last) = (first_ms.load(Ordering::Relaxed) - due_ms, last_ms - due_ms);
        println!(
            "timers due at one time: the first arrived {first} ms after it, the last {last} ms after it"
        );
        json["first_after_due_ms"] = first.into();
        json["last_after_due_ms"] = last.into();
    }
    json["messages"] = count.into();
    json["seconds"] = elapsed.as_secs_f64().into();
    json["msg_per_s"] = rate.into();
    Ok(json)
}

async fn produce_all(
    args: &Args,
    access: &ClusterAccess,
    started_ms: i64,
) -> anyhow::Result<serde_json::Value> {
    println!(
        "{} messages of {} bytes, {} producers x {} in flight, {}",
        args.messages,
        args.size,
        args.producers,
        args.inflight,
        match (&args.v5_endpoint, &args.remoting, args.namesrv.is_empty()) {
            (Some(_), _, _) => "through a RocketMQ 5.x endpoint",
            (None, Some(_), _) => "as 4.x producers",
            (None, None, true) => "straight to the leader",
            (None, None, false) => "through the producer SDK",
        }
    );
    let mut senders = Vec::new();
    if args.namesrv.is_empty() {
        let leader = find_leader(access, args.broker).await?;
        let create = pb::CreateTopicRequest {
            topic: args.topic.clone(),
            read_queue_count: args.queues,
            write_queue_count: args.queues,
            perm: 0,
            ..Default::default()
        };
        access
            .connect(leader)
            .await?
            .create_topic(access.admin_request(create))
            .await?;
        for _ in 0..args.producers {
            senders.push(Sender::Direct {
                client: access.connect(leader).await?,
                queues: args.queues,
                delay: Delay::of(args, started_ms),
            });
        }
    } else {
        access
            .admin(args.namesrv.clone())
            .create_topic(&args.topic, args.queues, None)
            .await?;
        for _ in 0..args.producers {
            senders.push(match (args.v5_endpoint, args.remoting) {
                (Some(endpoint), _) => Sender::V5 {
                    client: MessagingServiceClient::connect(format!("http://{endpoint}")).await?,
                    run: started_ms,
                },
                (None, Some(node)) => Sender::Remoting {
                    producer: RemotingProducer::connect(node, "bench").await?,
                    queues: args.queues,
                    run: started_ms,
                },
                (None, None) => Sender::Sdk {
                    producer: producer(access, &args.namesrv)?,
                    delay: Delay::of(args, started_ms),
                    transactional: args.transactional,
                },
            });
        }
        // The nameserver learns the new topic from the leader's next registration.
        let probe = producer(access, &args.namesrv)?;
        let deadline = Instant::now() + LEADER_WAIT;
        while let Err(error) = probe.send(Message::new(args.topic.clone(), "probe")).await {
            anyhow::ensure!(
                Instant::now() < deadline,
                "no route to {}: {error}",
                args.topic
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let body = Bytes::from(vec![b'x'; args.size]);
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let cpu = CpuMark::now(access, &args.namesrv).await;
    let progress = spawn_progress("sent", acked.clone(), args.messages);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for sender in senders {
        tasks.push(tokio::spawn(produce(
            sender,
            next.clone(),
            acked.clone(),
            args.messages,
            args.inflight,
            args.topic.clone(),
            body.clone(),
        )));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    progress.abort();
    let cpu = cpu
        .per_message(access, &args.namesrv, latencies.len() as u64)
        .await;
    latencies.sort_unstable();
    let percentile = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    println!(
        "sent {} in {:.2} s: {:.0} msg/s, {:.1} MB/s; ack latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        (latencies.len() * args.size) as f64 / elapsed.as_secs_f64() / 1e6,
        ms(percentile(0.50)),
        ms(percentile(0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
    println!("ack latency p99.9 {:.2} ms", ms(percentile(0.999)));
    cpu.print("send");
    let mut json = cpu.json();
    json["messages"] = latencies.len().into();
    json["seconds"] = elapsed.as_secs_f64().into();
    json["msg_per_s"] = (latencies.len() as f64 / elapsed.as_secs_f64()).into();
    json["mb_per_s"] = ((latencies.len() * args.size) as f64 / elapsed.as_secs_f64() / 1e6).into();
    for (name, p) in [("p50", 0.5), ("p99", 0.99), ("p999", 0.999)] {
        json[format!("ack_{name}_ms")] = ms(percentile(p)).into();
    }
    json["ack_max_ms"] = ms(latencies.last().copied().unwrap_or_default()).into();
    Ok(json)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// The bench's producer, of group `bench`.
fn producer(access: &ClusterAccess, namesrv: &[String]) -> anyhow::Result<Producer> {
    let builder = Producer::builder(namesrv.to_vec(), "bench");
    Ok(match access.tls() {
        Some(tls) => builder.tls(tls.clone()),
        None => builder,
    }
    .build()?)
}

/// Waits until the node at `addr` knows its group's leader.
async fn find_leader(access: &ClusterAccess, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
    let group = BrokerGroupClient::with_connector(vec![addr], access.connector());
    let deadline = Instant::now() + LEADER_WAIT;
    loop {
        if let Some(leader) = group.find_leader().await {
            return Ok(leader);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no leader known to {addr} within {LEADER_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn produce(
    sender: Sender,
    next: Arc<AtomicU64>,
    acked: Arc<AtomicU64>,
    total: u64,
    inflight: usize,
    topic: String,
    body: Bytes,
) -> anyhow::Result<Vec<Duration>> {
    // `inflight` senders, each with one send in flight at a time, polled by this task: an app
    // that keeps many sends in flight from one task, without a spawned task or a boxed
    // future per send.
    let worker = |_| {
        let (sender, next, acked, topic, body) = (&sender, &next, &acked, &topic, &body);
        async move {
            let mut latencies = Vec::new();
            loop {
                let sequence = next.fetch_add(1, Ordering::Relaxed);
                if sequence >= total {
                    return anyhow::Ok(latencies);
                }
                let started = Instant::now();
                sender
                    .clone()
                    .send(topic.clone(), body.clone(), sequence)
                    .await?;
                latencies.push(started.elapsed());
                acked.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let mut latencies = Vec::new();
    for done in futures::future::try_join_all((0..inflight).map(worker)).await? {
        latencies.extend(done);
    }
    Ok(latencies)
}
