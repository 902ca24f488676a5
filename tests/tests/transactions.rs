//! Transactional messages against a real cluster (a nameserver and two 3-node broker groups
//! on loopback) whose nodes read a manual clock: commit, rollback, check-back to commit or rollback, a producer that crashes
//! between the half message and the end, a transaction nobody resolves, and a delayed
//! transactional message, all across the kill of a group's leader. Committed messages are
//! stored once; rolled-back and discarded ones are never seen. A producer answers at most
//! `CHECKS_ANSWERING_MAX` check-backs at once.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rocketraft_broker::transaction::half::HALF_QUEUE_CHECKED;
use rocketraft_client::admin::Admin;
use rocketraft_client::message::Message;
use rocketraft_client::message::MessageExt;
use rocketraft_client::producer::Producer;
use rocketraft_client::transaction::CHECKS_ANSWERING_MAX;
use rocketraft_client::transaction::LocalTransactionState;
use rocketraft_client::transaction::TransactionEnd;
use rocketraft_domain::clock::ManualClock;
use rocketraft_domain::limits::END_TRANSACTIONS_MAX;
use rocketraft_domain::names::TRANSACTION_HALF_TOPIC;
use rocketraft_proto::broker as pb;
use rocketraft_proto::common::ResponseCode;
use rocketraft_tests::Extras;
use rocketraft_tests::advance_until;
use rocketraft_tests::cluster::GROUPS;
use rocketraft_tests::cluster::TestCluster;
use rocketraft_tests::deliveries::Deliveries;
use rocketraft_tests::init_tracing;
use rocketraft_tests::wait_for;
use tracing::info;

const TIMEOUT: Duration = Duration::from_secs(60);
const TOPIC: &str = "Payments";
const PRODUCER_GROUP: &str = "payment-service";
/// The test cluster checks a transaction back 1 s after its half message and every second
/// after, 5 times (`tests/src/lib.rs`); then it is discarded. The test moves the clock by
/// this much at a time.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A cluster whose nodes read `clock`.
async fn start_cluster(seed: u64, clock: &ManualClock) -> anyhow::Result<TestCluster> {
    let extras = Extras::on_clock(clock);
    TestCluster::start_with_extras(seed, |_| {}, extras).await
}

/// The copies of half messages in `cluster`'s half queues that check-backs left: one per
/// check-back offered.
async fn half_copies(cluster: &TestCluster) -> anyhow::Result<usize> {
    let mut copies = 0;
    for group in GROUPS {
        copies += cluster
            .queue(group, TRANSACTION_HALF_TOPIC, HALF_QUEUE_CHECKED)
            .await?
            .len();
    }
    Ok(copies)
}

/// What the local transaction (and, asked later, the checker) says for a body's prefix.
fn verdict(body: &str) -> (LocalTransactionState, LocalTransactionState) {
    use LocalTransactionState::*;
    match body.split(':').next().unwrap_or_default() {
        "commit" => (Commit, Commit),
        "rollback" => (Rollback, Rollback),
        "check-commit" => (Unknown, Commit),
        "check-rollback" => (Unknown, Rollback),
        _ => (Unknown, Unknown),
    }
}

fn body_of(message: &MessageExt) -> String {
    String::from_utf8_lossy(&message.body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_transactions_each_should_end_once_as_decided_across_a_leader_kill_and_a_producer_crash()
-> anyhow::Result<()> {
    init_tracing();
    let clock = ManualClock::starting_now();
    let mut cluster = start_cluster(0x7A_0001, &clock).await?;
    cluster.create_topic(TOPIC, 2).await?;
    cluster.wait_for_route(TOPIC).await?;
    let deliveries = Deliveries::default();
    let consumer = deliveries
        .start_reader(cluster.nameservers(), "payment-readers", TOPIC)
        .await?;

    info!("--- a producer without a checker sends transactions, then crashes");
    let crashing = Producer::builder(cluster.nameservers(), PRODUCER_GROUP).build()?;
    let mut ends = BTreeMap::new();
    for kind in [
        "commit",
        "rollback",
        "check-commit",
        "check-rollback",
        "unresolved",
    ] {
        for i in 0..4 {
            let body = format!("{kind}:{i}");
            let (local, _) = verdict(&body);
            let result = crashing
                .send_in_transaction(
                    Message::new(TOPIC, body.clone()),
                    |_sent| async move { local },
                )
                .await?;
            ends.insert(body, (result.end, result.send));
        }
    }
    for (body, (end, _)) in &ends {
        let expected = match verdict(body).0 {
            LocalTransactionState::Commit => Some(TransactionEnd::Committed),
            LocalTransactionState::Rollback => Some(TransactionEnd::RolledBack),
            LocalTransactionState::Unknown => None,
        };
        assert_eq!(*end, expected, "{body}");
    }
    info!("--- a transaction ends once, and only its own producer group ends it");
    let (_, committed_send) = &ends["commit:0"];
    let owner = cluster.group(&committed_send.group);
    let mut client = owner.client(owner.wait_for_leader(TIMEOUT).await?).await?;
    let end = |producer_group: &str, outcome: pb::TransactionOutcome| pb::EndTransactionRequest {
        producer_group: producer_group.into(),
        msg_id: committed_send.msg_id.clone(),
        commit_log_offset: committed_send.commit_log_offset,
        outcome: outcome as i32,
        from_check: false,
    };
    let late = client
        .end_transaction(end(PRODUCER_GROUP, pb::TransactionOutcome::Rollback))
        .await?
        .into_inner();
    assert!(!late.applied, "a rollback after the commit changes nothing");
    assert_eq!(late.outcome, pb::TransactionOutcome::Commit as i32);
    let stranger = client
        .end_transaction(end("another-group", pb::TransactionOutcome::Rollback))
        .await
        .expect_err("another producer group's end");
    assert!(stranger.message().contains("no half message"), "{stranger}");
    let no_group = Message::new(TOPIC, "half").with_property("TRAN_MSG", "true");
    let refused = crashing
        .send(no_group)
        .await
        .expect_err("a half message without PGROUP");
    assert!(refused.to_string().contains("PGROUP"), "{refused}");

    info!("--- a delayed transactional message: its delay counts from the commit");
    let delayed = crashing
        .send_in_transaction(
            Message::new(TOPIC, "delayed:0").with_delay(Duration::from_secs(2)),
            |_sent| async {
                clock.advance(Duration::from_millis(1_500));
                LocalTransactionState::Commit
            },
        )
        .await?;
    assert_eq!(delayed.end, Some(TransactionEnd::Committed));
    let committed_at = clock.now_ms();
    drop(crashing);

    info!("--- broker-a's leader is killed with transactions unresolved");
    let group = cluster.group_mut("broker-a");
    let leader = group.wait_for_leader(TIMEOUT).await?;
    group.stop(leader).await;
    group.wait_for_leader(TIMEOUT).await?;

    info!("--- a restarted producer of the group answers the check-backs");
    let restarted = Producer::builder(cluster.nameservers(), PRODUCER_GROUP)
        .topics([TOPIC])
        .transaction_checker(|message: MessageExt| async move { verdict(&body_of(&message)).1 })
        .build()?;

    let committed: BTreeSet<String> = ends
        .keys()
        .filter(|body| body.starts_with("commit") || body.starts_with("check-commit"))
        .cloned()
        .chain(["delayed:0".to_owned()])
        .collect();
    // Every transaction ends: by its producer, by a check-back, or discarded after the last;
    // the committed ones are consumed. Then nothing else can show up.
    let transactions = ends.len() + 1;
    advance_until(
        "every transaction ended and every committed one consumed",
        &clock,
        CHECK_INTERVAL,
        TIMEOUT,
        || async {
            let seen: BTreeSet<String> = deliveries
                .all()
                .iter()
                .map(|delivery| body_of(&delivery.message))
                .collect();
            let ended = cluster.transactions_ended().await.ok()?;
            (ended == transactions && committed.is_subset(&seen)).then_some(())
        },
    )
    .await?;
    let seen: BTreeSet<String> = deliveries
        .all()
        .iter()
        .map(|delivery| body_of(&delivery.message))
        .collect();
    assert_eq!(seen, committed, "only committed transactions are visible");
    assert_eq!(committed.len(), 9);

    let mut stored = 0;
    for group in ["broker-a", "broker-b"] {
        for queue_id in 0..2 {
            stored += cluster.queue(group, TOPIC, queue_id).await?.len();
        }
    }
    assert_eq!(
        stored,
        committed.len(),
        "each committed message stored once"
    );

    let delayed_message = deliveries
        .all()
        .into_iter()
        .find(|delivery| body_of(&delivery.message) == "delayed:0")
        .map(|delivery| delivery.message)
        .ok_or_else(|| anyhow::anyhow!("the delayed message"))?;
    let waited = delayed_message.store_timestamp_ms - committed_at;
    assert!(
        waited >= 2_000,
        "a delayed transactional message waits its 2 s after the commit: {waited} ms"
    );

    drop(restarted);
    consumer.shutdown().await;
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_more_check_backs_than_a_producer_answers_at_once_it_should_hold_the_rest_back()
-> anyhow::Result<()> {
    const UNRESOLVED: usize = CHECKS_ANSWERING_MAX + 8;
    init_tracing();
    let clock = ManualClock::starting_now();
    let cluster = start_cluster(0x7A_0002, &clock).await?;
    cluster.create_topic(TOPIC, 1).await?;
    cluster.wait_for_route(TOPIC).await?;
    let sender = Producer::builder(cluster.nameservers(), PRODUCER_GROUP).build()?;
    for i in 0..UNRESOLVED {
        let body = format!("unresolved:{i}");
        let sent = sender
            .send_in_transaction(Message::new(TOPIC, body), |_sent| async {
                LocalTransactionState::Unknown
            })
            .await?;
        assert_eq!(sent.end, None);
    }

    info!("--- a checker that blocks until released");
    let answering = Arc::new(AtomicUsize::new(0));
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let (release, released) = tokio::sync::watch::channel(false);
    let checker = {
        let (answering, most_at_once) = (answering.clone(), most_at_once.clone());
        move |_message: MessageExt| {
            let (answering, most_at_once) = (answering.clone(), most_at_once.clone());
            let mut released = released.clone();
            async move {
                let now = answering.fetch_add(1, Ordering::SeqCst) + 1;
                most_at_once.fetch_max(now, Ordering::SeqCst);
                let _ = released.wait_for(|released| *released).await;
                answering.fetch_sub(1, Ordering::SeqCst);
                LocalTransactionState::Commit
            }
        }
    };
    let checking = Producer::builder(cluster.nameservers(), PRODUCER_GROUP)
        .topics([TOPIC])
        .transaction_checker(checker)
        .build()?;
    advance_until(
        "the checker saturated",
        &clock,
        CHECK_INTERVAL,
        TIMEOUT,
        || async { (answering.load(Ordering::SeqCst) == CHECKS_ANSWERING_MAX).then_some(()) },
    )
    .await?;
    info!("--- another check round offers the held-back transactions again");
    let offered = half_copies(&cluster).await?;
    clock.advance(CHECK_INTERVAL);
    wait_for("the next check round", TIMEOUT, || async {
        (half_copies(&cluster).await.ok()? > offered).then_some(())
    })
    .await?;
    assert_eq!(most_at_once.load(Ordering::SeqCst), CHECKS_ANSWERING_MAX);

    info!("--- released, every transaction commits, each once");
    release.send_replace(true);
    wait_for("every transaction committed", TIMEOUT, || async {
        let mut stored = 0;
        for group in ["broker-a", "broker-b"] {
            stored += cluster.queue(group, TOPIC, 0).await.ok()?.len();
        }
        (stored == UNRESOLVED).then_some(())
    })
    .await?;
    assert_eq!(most_at_once.load(Ordering::SeqCst), CHECKS_ANSWERING_MAX);
    drop((sender, checking));
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_ends_in_one_request_each_should_end_or_be_refused_on_its_own() -> anyhow::Result<()>
{
    init_tracing();
    let cluster = TestCluster::start(0x7A_0003).await?;
    cluster.create_topic(TOPIC, 1).await?;
    cluster.wait_for_route(TOPIC).await?;
    let producer = Producer::builder(cluster.nameservers(), PRODUCER_GROUP).build()?;
    let half = producer
        .send_in_transaction(Message::new(TOPIC, "batched"), |_| async {
            LocalTransactionState::Unknown
        })
        .await?
        .send;
    let group_name = half.group.clone();
    let group = cluster.group(&group_name);
    let mut client = group.client(group.wait_for_leader(TIMEOUT).await?).await?;
    let end = |half: &rocketraft_client::producer::SendResult, outcome: pb::TransactionOutcome| {
        pb::EndTransactionRequest {
            producer_group: PRODUCER_GROUP.into(),
            msg_id: half.msg_id.clone(),
            commit_log_offset: half.commit_log_offset,
            outcome: outcome as i32,
            from_check: false,
        }
    };
    let commit = pb::TransactionOutcome::Commit;
    let mut ends = vec![end(&half, commit)];
    let mut bogus = end(&half, commit);
    bogus.commit_log_offset += 1;
    ends.push(bogus);
    ends.push(end(&half, pb::TransactionOutcome::Rollback));
    let results = client
        .end_transactions(pb::EndTransactionsRequest { ends })
        .await?
        .into_inner()
        .results;
    let codes: Vec<i32> = results.iter().map(|result| result.code).collect();
    assert_eq!(
        codes,
        [ResponseCode::Ok, ResponseCode::BadRequest, ResponseCode::Ok].map(|code| code as i32)
    );
    assert!(
        results[1].error.contains("no half message"),
        "{:?}",
        results[1]
    );
    let ended: Vec<(i32, bool)> = results
        .iter()
        .filter_map(|result| result.ended.as_ref())
        .map(|ended| (ended.outcome, ended.applied))
        .collect();
    assert_eq!(
        ended,
        [(commit as i32, true), (commit as i32, false)],
        "the second end of one transaction in the same request finds it committed"
    );
    assert_eq!(cluster.queue(&group_name, TOPIC, 0).await?.len(), 1);

    info!("--- END_TRANSACTIONS_MAX ends are taken, one more is refused");
    let at_max = vec![end(&half, commit); END_TRANSACTIONS_MAX];
    let taken = client
        .end_transactions(pb::EndTransactionsRequest { ends: at_max })
        .await?
        .into_inner();
    assert_eq!(taken.results.len(), END_TRANSACTIONS_MAX);
    assert!(
        taken
            .results
            .iter()
            .all(|result| result.ended.as_ref().is_some_and(|ended| !ended.applied))
    );
    for count in [0, END_TRANSACTIONS_MAX + 1] {
        let refused = client
            .end_transactions(pb::EndTransactionsRequest {
                ends: vec![end(&half, commit); count],
            })
            .await
            .expect_err("a request outside the limits");
        assert_eq!(
            rocketraft_proto::response_code(&refused),
            Some(ResponseCode::BadRequest),
            "{count} ends: {refused}"
        );
        assert!(refused.message().contains("1 to 1024 ends"), "{refused}");
    }
    cluster.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_timer_accepted_by_one_leader_a_leader_with_a_lower_maximum_should_still_commit_it()
-> anyhow::Result<()> {
    const STRICT_NODE: u64 = 1;
    const STRICT_MAX_MS: u64 = 3_600_000;
    init_tracing();
    let cluster = TestCluster::start_with(0x7A_0004, |config| {
        if config.node_id == STRICT_NODE {
            config.timer_max_delay_ms = STRICT_MAX_MS;
        }
    })
    .await?;
    cluster.create_topic(TOPIC, 1).await?;
    cluster.wait_for_route(TOPIC).await?;
    let admin = Admin::new(cluster.nameservers());
    for name in GROUPS {
        let group = cluster.group(name);
        if group.wait_for_leader(TIMEOUT).await? == STRICT_NODE {
            admin.transfer_leader(name, STRICT_NODE + 1).await?;
        }
    }
    let producer = Producer::builder(cluster.nameservers(), PRODUCER_GROUP).build()?;
    let two_hours = Duration::from_millis(2 * STRICT_MAX_MS);
    let half = producer
        .send_in_transaction(
            Message::new(TOPIC, "later").with_delay(two_hours),
            |_| async { LocalTransactionState::Unknown },
        )
        .await?
        .send;

    info!("--- the strict node leads when the transaction commits");
    admin.transfer_leader(&half.group, STRICT_NODE).await?;
    let group = cluster.group(&half.group);
    let mut client = group.client(STRICT_NODE).await?;
    let ended = client
        .end_transaction(pb::EndTransactionRequest {
            producer_group: PRODUCER_GROUP.into(),
            msg_id: half.msg_id.clone(),
            commit_log_offset: half.commit_log_offset,
            outcome: pb::TransactionOutcome::Commit as i32,
            from_check: false,
        })
        .await?
        .into_inner();
    assert_eq!(
        (ended.outcome, ended.applied),
        (pb::TransactionOutcome::Commit as i32, true),
        "a commit is not refused for a timer its half message was accepted with"
    );
    cluster.shutdown().await;
    Ok(())
}
