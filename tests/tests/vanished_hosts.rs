//! Hosts that vanish from the network (issue 43): the cluster of `deploy/` on a lab of network
//! namespaces (`rocketraft_tests::netns`), one host's link cut while a client on another host
//! works. A cut is a blackhole: nothing answers, no RST, so every call to the host waits for
//! a timeout, unlike a killed process.
//!
//! The tests print what each fault cost (`... after X ms`); they assert only that nothing
//! failed and generous bounds that catch a hang. Timing targets are for benchmarks.
//!
//! They need root (CI runs them, `RR_NETNS_TESTS=required`); elsewhere they print why they
//! were skipped and pass. They run the workspace's `broker` and `nameserver` binaries: with
//! `cargo test -p rocketraft-tests`, build them first (`cargo build --bins`).

use std::collections::BTreeSet;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use rocketraft_client::admin::Admin;
use rocketraft_client::admin::ConsumeFrom;
use rocketraft_client::admin::ConsumeRequest;
use rocketraft_client::consumer::ConsumeOrderlyResult;
use rocketraft_client::consumer::ConsumeResult;
use rocketraft_client::consumer::PushConsumer;
use rocketraft_client::consumer::PushConsumerBuilder;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::producer::Producer;
use rocketraft_client::route::MessageQueue;
use rocketraft_client::subscription::Subscription;
use rocketraft_tests::deliveries::Deliveries;
use rocketraft_tests::lab_cluster::BROKER_GROUP;
use rocketraft_tests::lab_cluster::CLIENT_HOST;
use rocketraft_tests::lab_cluster::LabCluster;
use rocketraft_tests::lab_cluster::LabOptions;
use rocketraft_tests::lab_cluster::SERVER_HOSTS;
use rocketraft_tests::netns::Lab;
use rocketraft_tests::netns::skip_unless_available;
use rocketraft_tests::wait_for;

const TOPIC: &str = "Vanish";
const QUEUES: u32 = 4;
/// Sends the running producer keeps in flight.
const SENDERS: usize = 4;
/// Sends acknowledged before the cut: the producer is well under way.
const WARMUP_ACKS: usize = 100;
const WARMUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Sends acknowledged after the cut (the follower test) or after they resumed, before the
/// load stops: the window the results are read from.
const ACKS_AFTER: usize = 200;
/// Bound on a send across a cut or a first call after one: only a hang fails it.
const SEND_BOUND: Duration = Duration::from_secs(10);
/// Bound on a fresh client's first calls with a dead first nameserver.
const FRESH_CLIENT_BOUND: Duration = Duration::from_secs(5);
/// How long reading the topic back may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(60);
/// The lab's own test: a port on its hosts, and how long a connection may take to open.
const PROBE_PORT: u16 = 7000;
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// One send of the running producer.
#[derive(Debug, Clone)]
struct SendRecord {
    started: Instant,
    ended: Instant,
    /// The message id, or the error.
    result: Result<String, String>,
}

impl SendRecord {
    fn took(&self) -> Duration {
        self.ended - self.started
    }
}

/// A producer on the client host sending to [`TOPIC`] from [`SENDERS`] tasks in a loop until
/// stopped, recording every send.
struct SendLoop {
    records: Arc<Mutex<Vec<SendRecord>>>,
    stop: Arc<AtomicBool>,
    running: std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
}

impl SendLoop {
    fn start(cluster: &LabCluster, nameservers: Vec<String>) -> SendLoop {
        SendLoop::start_with(cluster, nameservers, SENDERS, None)
    }

    /// One sender that starts a send every `every` (later while a send takes longer).
    fn paced(cluster: &LabCluster, nameservers: Vec<String>, every: Duration) -> SendLoop {
        SendLoop::start_with(cluster, nameservers, 1, Some(every))
    }

    fn start_with(
        cluster: &LabCluster,
        nameservers: Vec<String>,
        sender_count: usize,
        pace: Option<Duration>,
    ) -> SendLoop {
        let records = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let running = cluster.lab.in_host(CLIENT_HOST, {
            let records = records.clone();
            let stop = stop.clone();
            move || async move {
                let producer = Producer::builder(nameservers, "vanish-producer").build()?;
                let mut senders = tokio::task::JoinSet::new();
                for sender in 0..sender_count {
                    let (producer, records, stop) =
                        (producer.clone(), records.clone(), stop.clone());
                    senders.spawn(async move {
                        let mut sent = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            let body = format!("sender {sender} message {sent}");
                            let started = Instant::now();
                            let result = producer.send(Message::new(TOPIC, body)).await;
                            let record = SendRecord {
                                started,
                                ended: Instant::now(),
                                result: result
                                    .map(|sent| sent.msg_id)
                                    .map_err(|error| error.to_string()),
                            };
                            lock(&records).push(record);
                            sent += 1;
                            if let Some(pace) = pace {
                                tokio::time::sleep_until((started + pace).into()).await;
                            }
                        }
                    });
                }
                while let Some(joined) = senders.join_next().await {
                    joined.context("a sender task")?;
                }
                anyhow::Ok(())
            }
        });
        SendLoop {
            records,
            stop,
            running: Box::pin(async move { running.await? }),
        }
    }

    fn acked(&self) -> usize {
        lock(&self.records)
            .iter()
            .filter(|record| record.result.is_ok())
            .count()
    }

    /// Waits until [`ACKS_AFTER`] more sends than now are acknowledged.
    async fn wait_for_more_acks(&self) -> anyhow::Result<()> {
        self.wait_for_acks(self.acked() + ACKS_AFTER).await
    }

    async fn wait_for_acks(&self, count: usize) -> anyhow::Result<()> {
        wait_for("sends to be acknowledged", WARMUP_TIMEOUT, || async {
            (self.acked() >= count).then_some(())
        })
        .await
    }

    /// The first send started after `at` that succeeded.
    fn first_success_after(&self, at: Instant) -> Option<SendRecord> {
        lock(&self.records)
            .iter()
            .filter(|record| record.started >= at && record.result.is_ok())
            .min_by_key(|record| record.ended)
            .cloned()
    }

    /// Stops the senders (each finishes its send under way); returns every record.
    async fn stop(mut self) -> anyhow::Result<Vec<SendRecord>> {
        self.stop.store(true, Ordering::Relaxed);
        (&mut self.running).await?;
        let records = lock(&self.records).clone();
        Ok(records)
    }
}

/// A test that fails before it stops the senders stops them here.
impl Drop for SendLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn ms(duration: Duration) -> u128 {
    duration.as_millis()
}

/// The time as the servers' logs give it, to find a cut in them.
fn utc_now() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// `at` as `cut+12 ms` or `cut-3 ms`.
fn relative(at: Instant, cut: Instant) -> String {
    match at.checked_duration_since(cut) {
        Some(after) => format!("cut+{} ms", ms(after)),
        None => format!("cut-{} ms", ms(cut - at)),
    }
}

/// Fails, listing them, if any send failed.
fn assert_no_failed_send(records: &[SendRecord], cut_at: Instant) {
    let failed: Vec<String> = records
        .iter()
        .filter_map(|record| {
            let error = record.result.as_ref().err()?;
            Some(format!(
                "started at {}, ended at {}: {error}",
                relative(record.started, cut_at),
                relative(record.ended, cut_at),
            ))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} sends failed:\n{}",
        failed.len(),
        records.len(),
        failed.join("\n")
    );
}

/// The longest send that ended after `at`.
fn worst_after(records: &[SendRecord], at: Instant) -> Duration {
    records
        .iter()
        .filter(|record| record.ended > at)
        .map(SendRecord::took)
        .max()
        .unwrap_or_default()
}

/// A server host other than `leader` (node `n` runs on host `n`), not host 1 if it can be:
/// host 1's nameserver is first in the clients' list.
fn a_follower(leader: u64) -> usize {
    let followers = || {
        SERVER_HOSTS
            .into_iter()
            .filter(|host| *host as u64 != leader)
    };
    followers()
        .find(|host| *host != 1)
        .or_else(|| followers().next())
        .expect("a group of three has followers")
}

/// Runs `test` on a fresh cluster; prints the server logs' tails if it fails.
async fn with_cluster<F>(test: impl FnOnce(Arc<LabCluster>) -> F) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<()>>,
{
    with_cluster_options(LabOptions::default(), test).await
}

/// [`with_cluster`] on a cluster started with `options`.
async fn with_cluster_options<F>(
    options: LabOptions,
    test: impl FnOnce(Arc<LabCluster>) -> F,
) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<()>>,
{
    if skip_unless_available() {
        return Ok(());
    }
    let cluster = Arc::new(LabCluster::start_with(options).await?);
    let outcome = test(cluster.clone()).await;
    if outcome.is_err() {
        eprintln!("{}", cluster.log_tails());
    }
    outcome
}

/// Whether a connection from the current host to `addr` opens within [`PROBE_WAIT`]:
/// `Some(true)` if it does, `Some(false)` if it is refused, `None` if nothing answers.
async fn connects(addr: SocketAddr) -> Option<bool> {
    match tokio::time::timeout(PROBE_WAIT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Some(true),
        Ok(Err(_)) => Some(false),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_cut_link_a_hosts_packets_should_vanish_until_healed() -> anyhow::Result<()> {
    if skip_unless_available() {
        return Ok(());
    }
    let lab = Lab::new(3)?;
    let namespaces = lab.name().to_owned();
    let listening = SocketAddr::from((lab.addr(2), PROBE_PORT));
    let closed = SocketAddr::from((lab.addr(3), PROBE_PORT));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, listens) = tokio::sync::oneshot::channel();
    let server = lab.in_host(2, move || async move {
        let listener = tokio::net::TcpListener::bind(listening).await?;
        let _ = ready.send(());
        let accept = async {
            loop {
                let _ = listener.accept().await;
            }
        };
        tokio::select! {
            _ = stopped => {}
            () = accept => {}
        }
        anyhow::Ok(())
    });
    listens.await.context("host 2 listens")?;
    let probe = || {
        lab.in_host(1, move || async move {
            (connects(listening).await, connects(closed).await)
        })
    };

    assert_eq!(
        probe().await?,
        (Some(true), Some(false)),
        "linked: host 2 accepts, host 3 refuses"
    );
    lab.cut(2)?;
    assert_eq!(
        probe().await?.0,
        None,
        "cut: nothing answers for host 2, not even a refusal"
    );
    lab.heal(2)?;
    assert_eq!(probe().await?.0, Some(true), "healed: host 2 accepts again");
    match lab.set_delay(2, 1) {
        Ok(()) => lab.set_delay(2, 0)?,
        Err(error) => println!("netem: {error:#}"),
    }

    let _ = stop.send(());
    server.await??;
    drop(lab);
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()?;
    let left = String::from_utf8_lossy(&list.stdout).into_owned();
    assert!(
        !left.lines().any(|line| line.starts_with(&namespaces)),
        "the lab's namespaces outlive it:\n{left}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_leaders_host_vanishes_a_running_producer_should_lose_no_send()
-> anyhow::Result<()> {
    with_cluster(|cluster| async move {
        cluster.create_topic(TOPIC, QUEUES).await?;
        let leader = cluster.wait_for_leader(&SERVER_HOSTS).await? as usize;
        let sending = SendLoop::start(&cluster, cluster.nameservers(1));
        sending.wait_for_acks(WARMUP_ACKS).await?;

        let cut_at = Instant::now();
        cluster.lab.cut(leader)?;
        println!("cut host {leader}, the leader's, at {}", utc_now());
        let resumed = wait_for("a send after the cut to succeed", SEND_BOUND, || async {
            sending.first_success_after(cut_at)
        })
        .await;
        // The load goes on for a while after the sends resumed.
        if resumed.is_ok() {
            sending.wait_for_more_acks().await?;
        }
        let records = sending.stop().await?;

        let stall = worst_after(&records, cut_at);
        let in_flight = records
            .iter()
            .filter(|r| r.started < cut_at && r.ended > cut_at)
            .count();
        println!(
            "leader host cut: sends resumed after {} ms (the longest send across the cut; \
             {in_flight} in flight at the cut; the first send started after the cut was \
             acknowledged {:?} ms after it; {} sends in all)",
            ms(stall),
            resumed.as_ref().ok().map(|r| ms(r.ended - cut_at)),
            records.len()
        );
        assert_no_failed_send(&records, cut_at);
        resumed?;
        assert!(stall < SEND_BOUND, "a send took {stall:?} across the cut");

        let acked: HashSet<String> = records
            .iter()
            .filter_map(|record| record.result.clone().ok())
            .collect();
        let survivor = a_follower(leader as u64);
        let stored = read_back(&cluster, cluster.nameservers(survivor)).await?;
        let lost: Vec<&String> = acked.iter().filter(|id| !stored.contains(*id)).collect();
        println!(
            "{} sends acknowledged, {} messages stored, {} acknowledged ones missing",
            acked.len(),
            stored.len(),
            lost.len()
        );
        assert!(
            lost.is_empty(),
            "{} acknowledged messages are not stored, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
        Ok(())
    })
    .await
}

/// The message ids stored in [`TOPIC`], read from the group's leader on the client host
/// (the group's current leader, found through `nameservers`).
async fn read_back(
    cluster: &LabCluster,
    nameservers: Vec<String>,
) -> anyhow::Result<HashSet<String>> {
    cluster
        .lab
        .in_host(CLIENT_HOST, move || async move {
            let admin = Admin::new(nameservers);
            let stored: i64 = admin
                .topic_status(TOPIC)
                .await?
                .iter()
                .map(|queue| queue.max_offset - queue.min_offset)
                .sum();
            let request = ConsumeRequest {
                topic: TOPIC.into(),
                consumer_group: "vanish-check".into(),
                subscription: Subscription::parse("*").map_err(anyhow::Error::msg)?,
                from: ConsumeFrom::First,
                count: usize::try_from(stored)?,
                timeout: READ_BACK_TIMEOUT,
                reconsume_later: 0,
            };
            let messages = admin.consume(&request).await?;
            anyhow::ensure!(
                messages.len() as i64 == stored,
                "read {} of the {stored} messages stored",
                messages.len()
            );
            Ok(messages.into_iter().map(|m| m.msg_id).collect())
        })
        .await?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_first_nameservers_host_vanishes_clients_should_keep_working()
-> anyhow::Result<()> {
    with_cluster(|cluster| async move {
        cluster.create_topic(TOPIC, QUEUES).await?;
        // Host 1, first in every list (the clients' and the brokers'), but not the leader's:
        // this test is about a nameserver, not a failover.
        let victim: usize = 1;
        let leader = cluster.wait_for_leader(&SERVER_HOSTS).await?;
        if leader == victim as u64 {
            let to = a_follower(leader) as u64;
            cluster.transfer_leader(to).await?;
            println!("moved {BROKER_GROUP}'s leadership from node {leader} to node {to}");
        }
        let nameservers = cluster.nameservers(victim);
        cluster.lab.cut(victim)?;
        println!(
            "cut host {victim}, whose nameserver is first in the list {nameservers:?}, at {}",
            utc_now()
        );

        let (route, send) = cluster
            .lab
            .in_host(CLIENT_HOST, move || async move {
                let started = Instant::now();
                let route = Admin::new(nameservers.clone())
                    .topic_route(TOPIC)
                    .await
                    .map(|route| route.groups.len());
                let route = (started.elapsed(), route);
                let started = Instant::now();
                let send = match Producer::builder(nameservers, "vanish-fresh").build() {
                    Ok(producer) => producer
                        .send(Message::new(TOPIC, "first"))
                        .await
                        .map(|sent| sent.msg_id)
                        .map_err(|error| error.to_string()),
                    Err(error) => Err(error.to_string()),
                };
                (route, (started.elapsed(), send))
            })
            .await?;
        println!(
            "first nameserver's host cut: a fresh admin's topic route took {} ms, \
             a fresh producer's first send {} ms",
            ms(route.0),
            ms(send.0)
        );
        let groups = route
            .1
            .context("topic route with the first nameserver cut")?;
        assert_eq!(groups, 1, "the route names {BROKER_GROUP}");
        send.1
            .map_err(anyhow::Error::msg)
            .context("a fresh producer's first send with the first nameserver cut")?;
        for (what, took) in [("topic route", route.0), ("first send", send.0)] {
            assert!(
                took < FRESH_CLIENT_BOUND,
                "{what} took {took:?} with the first nameserver cut"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_followers_host_vanishes_sends_should_continue() -> anyhow::Result<()> {
    with_cluster(|cluster| async move {
        cluster.create_topic(TOPIC, QUEUES).await?;
        let leader = cluster.wait_for_leader(&SERVER_HOSTS).await?;
        let follower = a_follower(leader);
        let sending = SendLoop::start(&cluster, cluster.nameservers(1));
        sending.wait_for_acks(WARMUP_ACKS).await?;

        let cut_at = Instant::now();
        cluster.lab.cut(follower)?;
        println!(
            "cut host {follower}, a follower's (node {leader} leads), at {}",
            utc_now()
        );
        // The load window after the cut.
        sending.wait_for_more_acks().await?;
        let records = sending.stop().await?;

        let before: Vec<Duration> = records
            .iter()
            .filter(|r| r.ended <= cut_at)
            .map(SendRecord::took)
            .collect();
        let worst_before = before.iter().max().copied().unwrap_or_default();
        let after = records.iter().filter(|r| r.ended > cut_at).count();
        let worst = worst_after(&records, cut_at);
        println!(
            "follower host cut: worst send after the cut {} ms ({after} sends), \
             worst before it {} ms ({} sends)",
            ms(worst),
            ms(worst_before),
            before.len()
        );
        assert_no_failed_send(&records, cut_at);
        assert!(after > 0, "no send ended after the cut");
        assert!(worst < SEND_BOUND, "a send took {worst:?} after the cut");
        Ok(())
    })
    .await
}

/// How often the registration watch asks each node and nameserver, and a consumer's queues
/// are looked at.
const POLL_EVERY: Duration = Duration::from_millis(10);
/// How long one poll may wait for its answer.
const POLL_TIMEOUT: Duration = Duration::from_millis(500);
/// How long the registration watch goes on once every surviving nameserver named the new
/// leader: the window in which a mixed term would show.
const WATCH_AFTER: Duration = Duration::from_secs(1);
/// How long the registration watch waits for a new leader named everywhere.
const FAILOVER_BOUND: Duration = Duration::from_secs(30);
/// Bound on a new leader's registration reaching a nameserver after its election, as seen.
const REGISTRATION_BOUND: Duration = Duration::from_secs(2);
/// The paced producer starts a send this often.
const SEND_EVERY: Duration = Duration::from_millis(10);
/// Messages consumed before the cut: consumption is flowing.
const WARMUP_CONSUMED: usize = 50;
/// Bound on a consumer's recovery from a cut leader's host: only a hang fails it.
const CONSUME_BOUND: Duration = Duration::from_secs(10);
/// How long a consumer's graceful shutdown may take.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(20);
/// The client-host test's broker settings: members and orderly locks expire after 3 s.
const CLIENT_EXPIRY_MS: u64 = 3_000;
const QUEUE_LOCK_EXPIRY_MS: u64 = 3_000;
/// The orderly consumer group of the client-host test.
const ORDERLY_GROUP: &str = "vanish-orderly";
/// How long the queues may take to be split between the two members, and their first
/// offsets to be committed.
const SPLIT_TIMEOUT: Duration = Duration::from_secs(30);

/// What one poll of the registration watch saw.
#[derive(Debug, Clone)]
enum Seen {
    /// A node's own status.
    Node {
        host: usize,
        role: String,
        term: u64,
    },
    /// A nameserver's route of the group: the leader it names and the group's term there.
    Nameserver {
        host: usize,
        leader_id: Option<u64>,
        term: u64,
    },
}

#[derive(Debug, Clone)]
struct Observation {
    at: Instant,
    seen: Seen,
}

/// `at - from` in ms, negative if `at` came first.
fn signed_ms(at: Instant, from: Instant) -> i128 {
    match at.checked_duration_since(from) {
        Some(after) => after.as_millis() as i128,
        None => -((from - at).as_millis() as i128),
    }
}

/// The leader (node, term) with the highest term any node reported for itself above
/// `old_term`, and when it was first seen leading.
fn newest_leader(observations: &[Observation], old_term: u64) -> Option<(u64, u64, Instant)> {
    observations
        .iter()
        .filter_map(|observation| match &observation.seen {
            Seen::Node { host, role, term } if role == "leader" && *term > old_term => {
                Some((*host as u64, *term, observation.at))
            }
            _ => None,
        })
        .max_by_key(|(_, term, at)| (*term, std::cmp::Reverse(*at)))
}

/// When nameserver `host` first named node `leader` with `term`.
fn first_named(
    observations: &[Observation],
    host: usize,
    leader: u64,
    term: u64,
) -> Option<Instant> {
    observations
        .iter()
        .filter(|observation| {
            matches!(
                observation.seen,
                Seen::Nameserver { host: seen, leader_id: Some(id), term: t }
                    if seen == host && id == leader && t == term
            )
        })
        .map(|observation| observation.at)
        .min()
}

/// Polls `nodes`' status and `nameservers`' routes of the group every [`POLL_EVERY`], each
/// on its own, until every nameserver named the newest leader with its term, and
/// [`WATCH_AFTER`] more (or [`FAILOVER_BOUND`] passed). Before polling, sends `ready` the
/// term in which every nameserver names `old_leader`. Runs on the client host.
async fn watch_leadership(
    nodes: Vec<(usize, SocketAddr)>,
    nameservers: Vec<(usize, String)>,
    old_leader: u64,
    ready: tokio::sync::oneshot::Sender<u64>,
) -> anyhow::Result<Vec<Observation>> {
    use rocketraft_proto::nameserver::GetClusterInfoRequest;
    use rocketraft_proto::nameserver::name_server_client::NameServerClient;

    let mut channels = Vec::new();
    for (host, addr) in &nameservers {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(POLL_TIMEOUT)
            .connect_lazy();
        channels.push((*host, NameServerClient::new(channel)));
    }
    let old_term = wait_for(
        "the nameservers to agree on the old leader's term",
        WARMUP_TIMEOUT,
        || {
            let channels = channels.clone();
            async move {
                let mut terms = Vec::new();
                for (_, mut client) in channels {
                    let info = tokio::time::timeout(
                        POLL_TIMEOUT,
                        client.get_cluster_info(GetClusterInfoRequest {}),
                    )
                    .await
                    .ok()?
                    .ok()?
                    .into_inner();
                    let group = info.groups.into_iter().find(|g| g.group == BROKER_GROUP)?;
                    (group.leader_id == Some(old_leader)).then_some(())?;
                    terms.push(group.term);
                }
                let first = *terms.first()?;
                terms.iter().all(|term| *term == first).then_some(first)
            }
        },
    )
    .await?;

    let observations = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut pollers = tokio::task::JoinSet::new();
    for (host, addr) in nodes {
        let (observations, stop) = (observations.clone(), stop.clone());
        pollers.spawn(async move {
            let mut client = None;
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                if client.is_none() {
                    client =
                        tokio::time::timeout(POLL_TIMEOUT, rocketraft_client::group::connect(addr))
                            .await
                            .ok()
                            .and_then(Result::ok);
                }
                if let Some(connected) = &mut client {
                    let request = rocketraft_proto::broker::NodeStatusRequest {};
                    match tokio::time::timeout(POLL_TIMEOUT, connected.node_status(request)).await {
                        Ok(Ok(status)) => {
                            let status = status.into_inner();
                            lock(&observations).push(Observation {
                                at: Instant::now(),
                                seen: Seen::Node {
                                    host,
                                    role: status.role,
                                    term: status.term,
                                },
                            });
                        }
                        _ => client = None,
                    }
                }
                tokio::time::sleep_until((asked + POLL_EVERY).into()).await;
            }
        });
    }
    for (host, mut client) in channels {
        let (observations, stop) = (observations.clone(), stop.clone());
        pollers.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let request = client.get_cluster_info(GetClusterInfoRequest {});
                if let Ok(Ok(info)) = tokio::time::timeout(POLL_TIMEOUT, request).await {
                    let group = info
                        .into_inner()
                        .groups
                        .into_iter()
                        .find(|g| g.group == BROKER_GROUP);
                    let seen = match group {
                        Some(group) => Seen::Nameserver {
                            host,
                            leader_id: group.leader_id,
                            term: group.term,
                        },
                        // A group the nameserver dropped names no leader.
                        None => Seen::Nameserver {
                            host,
                            leader_id: None,
                            term: 0,
                        },
                    };
                    lock(&observations).push(Observation {
                        at: Instant::now(),
                        seen,
                    });
                }
                tokio::time::sleep_until((asked + POLL_EVERY).into()).await;
            }
        });
    }
    // The window opens before the cut: every target answered once.
    let targets = pollers.len();
    wait_for(
        "every node and nameserver to answer a poll",
        WARMUP_TIMEOUT,
        || async {
            let seen = lock(&observations).clone();
            let answered: HashSet<(bool, usize)> = seen
                .iter()
                .map(|observation| match observation.seen {
                    Seen::Node { host, .. } => (true, host),
                    Seen::Nameserver { host, .. } => (false, host),
                })
                .collect();
            (answered.len() == targets).then_some(())
        },
    )
    .await?;
    let _ = ready.send(old_term);

    let started = Instant::now();
    let mut named_everywhere: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if named_everywhere.is_some_and(|at| now >= at + WATCH_AFTER)
            || now >= started + FAILOVER_BOUND
        {
            break;
        }
        if named_everywhere.is_none() {
            let seen = lock(&observations).clone();
            if let Some((leader, term, _)) = newest_leader(&seen, old_term)
                && nameservers
                    .iter()
                    .all(|(host, _)| first_named(&seen, *host, leader, term).is_some())
            {
                named_everywhere = Some(now);
            }
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    stop.store(true, Ordering::Relaxed);
    while let Some(joined) = pollers.join_next().await {
        joined.context("a poller")?;
    }
    let mut observations = lock(&observations).clone();
    observations.sort_by_key(|observation| observation.at);
    Ok(observations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_new_leader_it_should_reach_every_reachable_nameserver_at_once()
-> anyhow::Result<()> {
    with_cluster(|cluster| async move {
        // Node 1 leads, and its host runs the first nameserver: the cut takes both.
        let victim: usize = 1;
        let leader = cluster.wait_for_leader(&SERVER_HOSTS).await?;
        if leader != victim as u64 {
            cluster.transfer_leader(victim as u64).await?;
            println!("moved {BROKER_GROUP}'s leadership from node {leader} to node {victim}");
        }
        let survivors: Vec<usize> = SERVER_HOSTS
            .into_iter()
            .filter(|host| *host != victim)
            .collect();
        let nodes = survivors
            .iter()
            .map(|host| Ok((*host, cluster.broker(*host).parse()?)))
            .collect::<anyhow::Result<Vec<(usize, SocketAddr)>>>()?;
        let nameservers: Vec<(usize, String)> = survivors
            .iter()
            .map(|host| (*host, cluster.nameserver(*host)))
            .collect();
        let (ready, old_term) = tokio::sync::oneshot::channel();
        let watching = cluster.lab.in_host(CLIENT_HOST, {
            let nameservers = nameservers.clone();
            move || watch_leadership(nodes, nameservers, victim as u64, ready)
        });
        let old_term = old_term
            .await
            .context("the watch ended before it started polling")?;

        let cut_at = Instant::now();
        cluster.lab.cut(victim)?;
        println!(
            "cut host {victim}, node {victim}'s (leader in term {old_term}) and the first \
             nameserver's, at {}",
            utc_now()
        );
        let observations = watching.await??;

        let (new_leader, new_term, elected_at) = newest_leader(&observations, old_term)
            .with_context(|| {
                format!("no node of {survivors:?} reported leading within {FAILOVER_BOUND:?}")
            })?;
        println!(
            "node {new_leader} leads in term {new_term}, seen {} ms after the cut",
            ms(elected_at - cut_at)
        );
        let mut late = Vec::new();
        for (host, _) in &nameservers {
            let Some(named_at) = first_named(&observations, *host, new_leader, new_term) else {
                late.push(format!("nameserver {host} never named node {new_leader}"));
                continue;
            };
            let after = signed_ms(named_at, elected_at);
            println!(
                "registration reached nameserver {host} {after} ms after the election \
                 (election {} ms after the cut)",
                ms(elected_at - cut_at)
            );
            if after >= REGISTRATION_BOUND.as_millis() as i128 {
                late.push(format!(
                    "nameserver {host} named it {after} ms after the election"
                ));
            }
        }

        // Every (leader, term) pair a node reported for itself, and the old one.
        let mut own_terms: HashSet<(u64, u64)> = observations
            .iter()
            .filter_map(|observation| match &observation.seen {
                Seen::Node { host, role, term } if role == "leader" => Some((*host as u64, *term)),
                _ => None,
            })
            .collect();
        own_terms.insert((victim as u64, old_term));
        let mut polls = 0;
        let mut mixed = Vec::new();
        for observation in &observations {
            if let Seen::Nameserver {
                host,
                leader_id,
                term,
            } = observation.seen
            {
                polls += 1;
                if let Some(leader) = leader_id
                    && !own_terms.contains(&(leader, term))
                {
                    mixed.push(format!(
                        "at {}: nameserver {host} named node {leader} in term {term}",
                        relative(observation.at, cut_at)
                    ));
                }
            }
        }
        println!(
            "{polls} nameserver routes seen from {} to {}; leaders in their own terms: \
             {own_terms:?}",
            observations
                .first()
                .map(|o| relative(o.at, cut_at))
                .unwrap_or_default(),
            observations
                .last()
                .map(|o| relative(o.at, cut_at))
                .unwrap_or_default(),
        );
        assert!(
            mixed.is_empty(),
            "a nameserver named a leader with a term not its own ({} times):\n{}",
            mixed.len(),
            mixed[..mixed.len().min(20)].join("\n")
        );
        assert!(late.is_empty(), "{}", late.join("\n"));
        Ok(())
    })
    .await
}

/// How a [`HostConsumer`] ends.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Gracefully: it commits, unlocks and leaves its group.
    Shutdown,
    /// As a vanished host's client: dropped, saying nothing to anyone.
    Vanish,
}

/// The queues a consumer held from the moment they were seen.
type Assignment = (Instant, Vec<MessageQueue>);

/// A push consumer running on a host of the lab, recording what it consumes (as `name`,
/// in shared [`Deliveries`]) and each change of the queues it holds.
struct HostConsumer {
    /// Each change of its assigned queues, and when it was seen.
    assignments: Arc<Mutex<Vec<Assignment>>>,
    stop: Option<tokio::sync::oneshot::Sender<Stop>>,
    running: std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
}

impl HostConsumer {
    /// Starts `builder`'s consumer on `host`: orderly or concurrent, succeeding every batch.
    fn start(
        cluster: &LabCluster,
        host: usize,
        name: &str,
        builder: PushConsumerBuilder,
        orderly: bool,
        deliveries: &Deliveries,
    ) -> HostConsumer {
        let assignments = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let running = cluster.lab.in_host(host, {
            let (name, deliveries, assignments) =
                (name.to_owned(), deliveries.clone(), assignments.clone());
            move || async move {
                let consumer = if orderly {
                    builder
                        .start_orderly(move |messages: Vec<MessageExt>, _context| {
                            deliveries.record(&name, &messages);
                            async { ConsumeOrderlyResult::Success }
                        })
                        .await?
                } else {
                    builder
                        .start(move |messages: Vec<MessageExt>, _context| {
                            deliveries.record(&name, &messages);
                            async { ConsumeResult::Success }
                        })
                        .await?
                };
                let mut stopped = stopped;
                let how = loop {
                    let queues = consumer.assigned_queues();
                    {
                        let mut seen = lock(&assignments);
                        if seen.last().map(|(_, last)| last) != Some(&queues) {
                            seen.push((Instant::now(), queues));
                        }
                    }
                    tokio::select! {
                        how = &mut stopped => break how.unwrap_or(Stop::Vanish),
                        () = tokio::time::sleep(POLL_EVERY) => {}
                    }
                };
                match how {
                    Stop::Vanish => drop(consumer),
                    Stop::Shutdown => tokio::time::timeout(SHUTDOWN_BOUND, consumer.shutdown())
                        .await
                        .map_err(|_| {
                            anyhow::anyhow!("the consumer's shutdown took over {SHUTDOWN_BOUND:?}")
                        })?,
                }
                anyhow::Ok(())
            }
        });
        HostConsumer {
            assignments,
            stop: Some(stop),
            running: Box::pin(async move { running.await? }),
        }
    }

    /// The queues of [`TOPIC`] it holds now.
    fn topic_queues(&self) -> BTreeSet<MessageQueue> {
        lock(&self.assignments)
            .last()
            .map(|(_, queues)| {
                queues
                    .iter()
                    .filter(|q| q.topic == TOPIC)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// When it first held every queue of [`TOPIC`] (`QUEUES` of them) after `at`.
    fn held_all_after(&self, at: Instant) -> Option<Instant> {
        lock(&self.assignments)
            .iter()
            .filter(|(seen, queues)| {
                *seen > at && queues.iter().filter(|q| q.topic == TOPIC).count() == QUEUES as usize
            })
            .map(|(seen, _)| *seen)
            .next()
    }

    async fn stop(mut self, how: Stop) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(how);
        }
        (&mut self.running).await
    }
}

/// A test that fails before it stops a consumer lets it vanish here.
impl Drop for HostConsumer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(Stop::Vanish);
        }
    }
}

/// The ids of the messages acknowledged in `records`.
fn acked_ids(records: &[SendRecord]) -> BTreeSet<String> {
    records
        .iter()
        .filter_map(|record| record.result.clone().ok())
        .collect()
}

/// Waits until every id in `acked` was consumed at least once; fails naming the missing.
async fn wait_all_consumed(
    what: &str,
    deliveries: &Deliveries,
    acked: &BTreeSet<String>,
) -> anyhow::Result<()> {
    let waited = deliveries.wait_for_all(acked, READ_BACK_TIMEOUT).await;
    let consumed = deliveries.by_message();
    let missing: Vec<&String> = acked
        .iter()
        .filter(|id| !consumed.contains_key(*id))
        .collect();
    let twice = consumed.values().filter(|got| got.len() > 1).count();
    println!(
        "{what}: {} sends acknowledged, {} distinct messages consumed ({twice} more than once), \
         {} acknowledged ones not consumed",
        acked.len(),
        consumed.len(),
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "{} acknowledged messages were never consumed, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    waited
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_host_a_push_consumer_pulls_from_vanishes_consumption_should_resume()
-> anyhow::Result<()> {
    with_cluster(|cluster| async move {
        cluster.create_topic(TOPIC, QUEUES).await?;
        let leader = cluster.wait_for_leader(&SERVER_HOSTS).await? as usize;
        let deliveries = Deliveries::default();
        // The SDK's defaults but for the start: what an application gets.
        let builder = PushConsumer::builder(cluster.nameservers(1), "vanish-consumers")
            .subscribe(TOPIC, "*")
            .consume_from(ConsumeFrom::First);
        let consumer = HostConsumer::start(
            &cluster,
            CLIENT_HOST,
            "consumer",
            builder,
            false,
            &deliveries,
        );
        let sending = SendLoop::paced(&cluster, cluster.nameservers(1), SEND_EVERY);
        wait_for("consumption to flow", WARMUP_TIMEOUT, || async {
            (deliveries.all().len() >= WARMUP_CONSUMED).then_some(())
        })
        .await?;

        let cut_at = Instant::now();
        cluster.lab.cut(leader)?;
        println!("cut host {leader}, the leader's, at {}", utc_now());
        // The first message consumed whose send started after the cut.
        let first_after = || {
            let sent_after: HashSet<String> = lock(&sending.records)
                .iter()
                .filter(|record| record.started >= cut_at)
                .filter_map(|record| record.result.clone().ok())
                .collect();
            deliveries
                .all()
                .into_iter()
                .filter(|delivery| sent_after.contains(&delivery.message.msg_id))
                .min_by_key(|delivery| delivery.at)
        };
        let resumed = wait_for(
            "a message sent after the cut to be consumed",
            CONSUME_BOUND,
            || async { first_after() },
        )
        .await;
        // The load goes on for a while after consumption resumed.
        if resumed.is_ok() {
            sending.wait_for_more_acks().await?;
        }
        let records = sending.stop().await?;

        let mut times: Vec<Instant> = deliveries.all().iter().map(|d| d.at).collect();
        times.sort();
        let longest_gap = times
            .windows(2)
            .filter(|pair| pair[1] > cut_at)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or_default();
        let failed = records.iter().filter(|r| r.result.is_err()).count();
        match &resumed {
            Ok(delivery) => {
                let acked_at = records
                    .iter()
                    .find(|r| r.result.as_deref() == Ok(delivery.message.msg_id.as_str()))
                    .map(|r| r.ended);
                println!(
                    "consumer host cut: consumption resumed after {} ms (the first message \
                     sent after the cut was acknowledged at {} and consumed at {}; the longest \
                     gap between consumed messages after the cut {} ms; {failed} of {} sends \
                     failed)",
                    ms(delivery.at - cut_at),
                    acked_at.map(|at| relative(at, cut_at)).unwrap_or_default(),
                    relative(delivery.at, cut_at),
                    ms(longest_gap),
                    records.len()
                );
            }
            Err(error) => println!(
                "consumer host cut: consumption did not resume: {error:#} (the longest gap \
                 between consumed messages after the cut {} ms; {failed} of {} sends failed; \
                 the first send started after the cut acknowledged at {:?})",
                ms(longest_gap),
                records.len(),
                records
                    .iter()
                    .filter(|r| r.started >= cut_at && r.result.is_ok())
                    .map(|r| relative(r.ended, cut_at))
                    .next()
            ),
        }
        let resumed = resumed?;
        assert!(
            resumed.at - cut_at < CONSUME_BOUND,
            "consumption resumed {:?} after the cut",
            resumed.at - cut_at
        );

        wait_all_consumed("consumer host cut", &deliveries, &acked_ids(&records)).await?;
        consumer.stop(Stop::Shutdown).await?;
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_clients_host_vanishes_its_queues_should_pass_to_the_other_members()
-> anyhow::Result<()> {
    let options = LabOptions {
        client_hosts: 2,
        broker_settings: vec![
            format!("client_expiry_ms = {CLIENT_EXPIRY_MS}"),
            format!("queue_lock_expiry_ms = {QUEUE_LOCK_EXPIRY_MS}"),
        ],
    };
    with_cluster_options(options, |cluster| async move {
        cluster.create_topic(TOPIC, QUEUES).await?;
        // B shares its host with the producer; A's host is cut.
        let [host_b, host_a] = cluster.client_hosts()[..] else {
            anyhow::bail!("two client hosts expected: {:?}", cluster.client_hosts());
        };
        let deliveries = Deliveries::default();
        let member = |name: &str| {
            PushConsumer::builder(cluster.nameservers(1), ORDERLY_GROUP)
                .subscribe(TOPIC, "*")
                .consume_from(ConsumeFrom::First)
                .instance_name(name)
                .heartbeat_interval(Duration::from_millis(300))
                .rebalance_interval(Duration::from_secs(1))
                .lock_renew_interval(Duration::from_millis(500))
                .persist_interval(Duration::from_millis(200))
        };
        let a = HostConsumer::start(&cluster, host_a, "A", member("A"), true, &deliveries);
        let b = HostConsumer::start(&cluster, host_b, "B", member("B"), true, &deliveries);
        let sending = SendLoop::paced(&cluster, cluster.nameservers(1), SEND_EVERY);
        let consumed_by = |name: &str, queue: &MessageQueue, after: Instant| {
            deliveries
                .all()
                .into_iter()
                .filter(|d| {
                    d.consumer == name
                        && d.at > after
                        && d.message.group == queue.group
                        && d.message.queue_id == queue.queue_id
                })
                .map(|d| d.at)
                .min()
        };
        let split_at = Instant::now();
        let a_queues = wait_for(
            "the queues split between A and B, each consuming its own",
            SPLIT_TIMEOUT,
            || async {
                let (mine_a, mine_b) = (a.topic_queues(), b.topic_queues());
                let split = mine_a.len() + mine_b.len() == QUEUES as usize
                    && mine_a.is_disjoint(&mine_b)
                    && !mine_a.is_empty()
                    && !mine_b.is_empty();
                let consuming = mine_a
                    .iter()
                    .all(|q| consumed_by("A", q, split_at).is_some())
                    && mine_b
                        .iter()
                        .all(|q| consumed_by("B", q, split_at).is_some());
                (split && consuming).then_some(mine_a)
            },
        )
        .await?;
        // Both commit: what A consumes again after the cut is only what it consumed since
        // its last commit.
        let nameservers = cluster.nameservers(1);
        cluster
            .lab
            .in_host(host_b, move || async move {
                wait_for("every queue's offset committed", SPLIT_TIMEOUT, || async {
                    let progress = Admin::new(nameservers.clone())
                        .consumer_progress(ORDERLY_GROUP, Some(TOPIC))
                        .await
                        .ok()?;
                    (progress.len() == QUEUES as usize
                        && progress
                            .iter()
                            .all(|queue| queue.committed_offset.is_some_and(|c| c > 0)))
                    .then_some(())
                })
                .await
            })
            .await??;

        let cut_at = Instant::now();
        cluster.lab.cut(host_a)?;
        println!(
            "cut host {host_a}, consumer A's (it held {}), at {}",
            a_queues
                .iter()
                .map(|q| q.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            utc_now()
        );
        let bound = Duration::from_millis(CLIENT_EXPIRY_MS.max(QUEUE_LOCK_EXPIRY_MS) * 3)
            + Duration::from_secs(10);
        let taken_over = wait_for("B to hold every queue and consume A's", bound, || async {
            let held_all = b.held_all_after(cut_at)?;
            let mut consumed = Vec::new();
            for queue in &a_queues {
                consumed.push(consumed_by("B", queue, cut_at)?);
            }
            Some((held_all, consumed))
        })
        .await;
        let (held_all, consumed) = match taken_over {
            Ok(taken_over) => taken_over,
            Err(error) => {
                println!(
                    "client host cut: B's queues since the cut: {:?}",
                    lock(&b.assignments)
                        .iter()
                        .filter(|(at, _)| *at > cut_at)
                        .map(|(at, queues)| (relative(*at, cut_at), queues.len()))
                        .collect::<Vec<_>>()
                );
                return Err(error);
            }
        };
        let consumed_all = consumed.iter().max().copied().unwrap_or(held_all);
        println!(
            "client host cut: B held every queue after {} ms and consumed from each of A's \
             after {} ms (first from each: {:?} ms; client_expiry_ms = {CLIENT_EXPIRY_MS}, \
             queue_lock_expiry_ms = {QUEUE_LOCK_EXPIRY_MS})",
            ms(held_all - cut_at),
            ms(consumed_all - cut_at),
            consumed
                .iter()
                .map(|at| ms(*at - cut_at))
                .collect::<Vec<_>>()
        );
        let took = held_all.max(consumed_all) - cut_at;
        assert!(took < bound, "the take-over took {took:?}");

        let records = sending.stop().await?;
        wait_all_consumed("client host cut", &deliveries, &acked_ids(&records)).await?;
        b.stop(Stop::Shutdown).await?;
        a.stop(Stop::Vanish).await?;
        Ok(())
    })
    .await
}
