//! `rocketraft-scale`: what many topics, queues and consumer groups cost a running cluster.
//!
//! Sets up `--topics` topics of `--queues` queues (created through the admin API, `--concurrency`
//! at a time, in every broker group), stores one message in every queue, and gives each of
//! `--groups` consumer groups a `%RETRY%` queue holding one message, the way a consumer's first
//! hand-back does (`SendMessageBack` of a stored message, delay level 1). Then it times what
//! clients do against such a cluster: a route query, and the heartbeat of a consumer
//! subscribed to `--subscribed` of the topics. Disk and memory are the nodes' own to report
//! (`du` of their data dirs, their processes' RSS): this tool only loads the cluster.
//!
//! Prints one line per phase, and with `--json` one JSON object with every figure last.

use std::net::SocketAddr;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use futures::TryStreamExt;
use rocketraft_cli::access::AccessArgs;
use rocketraft_cli::access::ClusterAccess;
use rocketraft_client::admin::Admin;
use rocketraft_proto::broker as pb;
use rocketraft_proto::broker::broker_client::BrokerClient;
use rocketraft_proto::common as common_pb;
use tonic::transport::Channel;

/// Route queries and heartbeats timed, each.
const TIMED_CALLS: usize = 100;
/// How long the `%RETRY%` copies may take to come out of their delay.
const RETRY_WAIT: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(about = "load a running rocketraft cluster with many topics, queues and groups")]
struct Args {
    /// Nameservers (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:9876")]
    namesrv: Vec<String>,
    #[arg(long, default_value_t = 1250)]
    topics: u32,
    /// Queues of every topic.
    #[arg(long, default_value_t = 8)]
    queues: u32,
    /// Consumer groups, each given a `%RETRY%` queue holding one message.
    #[arg(long, default_value_t = 1000)]
    groups: u32,
    /// Topics the timed heartbeat subscribes to.
    #[arg(long, default_value_t = 100)]
    subscribed: u32,
    /// Names are `<prefix>T<n>` for topics and `<prefix>G<n>` for groups.
    #[arg(long, default_value = "Scale")]
    prefix: String,
    /// Admin calls and sends in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Also print every figure as one JSON object (the last line).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    access: AccessArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let access = ClusterAccess::load(&args.access)?;
    let admin = access.admin(args.namesrv.clone());
    let mut report = serde_json::Map::new();
    let topic = |n: u32| format!("{}T{n}", args.prefix);

    let started = Instant::now();
    futures::stream::iter(0..args.topics)
        .map(|n| {
            let (admin, name) = (&admin, topic(n));
            async move {
                admin
                    .create_topic(&name, args.queues, None)
                    .await
                    .with_context(|| format!("create {name}"))
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let seconds = started.elapsed().as_secs_f64();
    let per_second = f64::from(args.topics) / seconds;
    println!(
        "created {} topics of {} queues in {seconds:.2} s: {per_second:.0} topics/s",
        args.topics, args.queues
    );
    report.insert("topics_created_per_s".into(), per_second.into());

    let leaders = leaders(&access, &admin).await?;
    let started = Instant::now();
    let stored = futures::stream::iter(0..args.topics)
        .map(|n| {
            let (leaders, name) = (&leaders, topic(n));
            async move { fill_every_queue(leaders, &name, args.queues).await }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    println!(
        "stored a message in each of {} queues in {:.2} s",
        args.topics * args.queues * leaders.len() as u32,
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let (group_leader, commit_log_offset) = stored
        .first()
        .cloned()
        .context("no message stored to hand back")?;
    futures::stream::iter(0..args.groups)
        .map(|n| {
            let group = format!("{}G{n}", args.prefix);
            let mut client = group_leader.1.clone();
            async move {
                client
                    .send_message_back(pb::SendMessageBackRequest {
                        group: group.clone(),
                        commit_log_offset,
                        delay_level: 1,
                        max_reconsume_times: 0,
                        deduplicate: false,
                    })
                    .await
                    .with_context(|| format!("hand back for {group}"))
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    let last_retry = format!("%RETRY%{}G{}", args.prefix, args.groups.saturating_sub(1));
    wait_for_message(&mut group_leader.1.clone(), &last_retry).await?;
    println!(
        "gave {} groups a %RETRY% queue with a message in {:.2} s (via {})",
        args.groups,
        started.elapsed().as_secs_f64(),
        group_leader.0
    );

    let route_ms = time_calls(|n| {
        let (admin, name) = (&admin, topic(n as u32 % args.topics));
        async move { admin.topic_route(&name).await.map(drop).map_err(Into::into) }
    })
    .await?;
    println!(
        "route query: p50 {:.2} ms, p99 {:.2} ms",
        route_ms.0, route_ms.1
    );
    report.insert("route_p50_ms".into(), route_ms.0.into());
    report.insert("route_p99_ms".into(), route_ms.1.into());

    let subscriptions: Vec<pb::SubscriptionData> = (0..args.subscribed.min(args.topics))
        .map(|n| pb::SubscriptionData {
            topic: topic(n),
            expression: "*".into(),
            expression_type: String::new(),
        })
        .collect();
    let heartbeat_ms = time_calls(|_| {
        let mut client = group_leader.1.clone();
        let request = pb::HeartbeatRequest {
            client_id: "rocketraft-scale@heartbeat".into(),
            group: format!("{}Heartbeat", args.prefix),
            subscriptions: subscriptions.clone(),
            client: None,
        };
        async move {
            client
                .heartbeat(request)
                .await
                .map(drop)
                .map_err(Into::into)
        }
    })
    .await?;
    println!(
        "heartbeat with {} subscriptions: p50 {:.2} ms, p99 {:.2} ms",
        subscriptions.len(),
        heartbeat_ms.0,
        heartbeat_ms.1
    );
    report.insert("heartbeat_p50_ms".into(), heartbeat_ms.0.into());
    report.insert("heartbeat_p99_ms".into(), heartbeat_ms.1.into());
    if args.json {
        println!("{}", serde_json::Value::Object(report));
    }
    Ok(())
}

/// Every broker group's leader: its address and a client connected to it.
async fn leaders(
    access: &ClusterAccess,
    admin: &Admin,
) -> anyhow::Result<Vec<(SocketAddr, BrokerClient<Channel>)>> {
    let mut leaders = Vec::new();
    for group in admin.cluster_info().await?.groups {
        let addr: SocketAddr = group
            .leader_addr
            .parse()
            .with_context(|| format!("{} has no leader registered", group.group))?;
        leaders.push((addr, access.connect(addr).await?));
    }
    anyhow::ensure!(!leaders.is_empty(), "no broker group registered");
    Ok(leaders)
}

/// Stores one message in every queue of `topic` in every group, one request per group; returns
/// the first group's leader and the CommitLog offset of a message it stored.
async fn fill_every_queue(
    leaders: &[(SocketAddr, BrokerClient<Channel>)],
    topic: &str,
    queues: u32,
) -> anyhow::Result<((SocketAddr, BrokerClient<Channel>), i64)> {
    let queue_ids: Vec<i32> = (0..queues as i32).collect();
    let mut first = None;
    for (addr, client) in leaders {
        let request = pb::SendRequest {
            topic: topic.to_owned(),
            queue_id: 0,
            messages: queue_ids
                .iter()
                .map(|_| common_pb::Message {
                    body: Bytes::from_static(b"one message a queue"),
                    ..Default::default()
                })
                .collect(),
            queue_ids: queue_ids.clone(),
            ..Default::default()
        };
        let response = client
            .clone()
            .send(request)
            .await
            .with_context(|| format!("send to {topic} at {addr}"))?;
        let offset = response
            .into_inner()
            .results
            .first()
            .map(|result| result.commit_log_offset)
            .context("a send stored nothing")?;
        first.get_or_insert(((*addr, client.clone()), offset));
    }
    first.context("no broker group")
}

/// Waits until `topic` holds a message (a hand-back's copy out of its delay).
async fn wait_for_message(client: &mut BrokerClient<Channel>, topic: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + RETRY_WAIT;
    loop {
        let pulled = client
            .pull(pb::PullRequest {
                group: "rocketraft-scale".into(),
                topic: topic.to_owned(),
                queue_id: 0,
                queue_offset: 0,
                max_messages: 1,
                ..Default::default()
            })
            .await;
        if let Ok(response) = pulled
            && !response.into_inner().messages.is_empty()
        {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{topic} holds no message after {RETRY_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `call` [`TIMED_CALLS`] times one after another; returns its p50 and p99 in ms.
async fn time_calls<F, Fut>(mut call: F) -> anyhow::Result<(f64, f64)>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut latencies = Vec::with_capacity(TIMED_CALLS);
    for n in 0..TIMED_CALLS {
        let started = Instant::now();
        call(n).await?;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
    }
    latencies.sort_by(f64::total_cmp);
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
    Ok((at(0.5), at(0.99)))
}
