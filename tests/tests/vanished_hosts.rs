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
use rocketraft_client::message::Message;
use rocketraft_client::producer::Producer;
use rocketraft_client::subscription::Subscription;
use rocketraft_tests::lab_cluster::BROKER_GROUP;
use rocketraft_tests::lab_cluster::CLIENT_HOST;
use rocketraft_tests::lab_cluster::LabCluster;
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
/// How long sends go on after the cut (the follower test) or after they resumed.
const RUN_AFTER: Duration = Duration::from_secs(3);
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
        let records = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let running = cluster.lab.in_host(CLIENT_HOST, {
            let records = records.clone();
            let stop = stop.clone();
            move || async move {
                let producer = Producer::builder(nameservers, "vanish-producer").build()?;
                let mut senders = tokio::task::JoinSet::new();
                for sender in 0..SENDERS {
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
    if skip_unless_available() {
        return Ok(());
    }
    let cluster = Arc::new(LabCluster::start().await?);
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
        // The load goes on for a while after the sends resumed (or failed to).
        tokio::time::sleep(RUN_AFTER).await;
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
        tokio::time::sleep(RUN_AFTER).await;
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
