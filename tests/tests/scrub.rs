//! The scrubber finds bit rot in a running node's CommitLog and ConsumeQueues and repairs it
//! from the group: real nodes, real files damaged behind their backs, real gRPC between peers.

use std::time::Duration;

use rocketraft_broker::scrub::SCRUB_CHUNK_BYTES;
use rocketraft_broker::store::CqUnit;
use rocketraft_broker::store::index::key_hash;
use rocketraft_proto::broker as pb;
use rocketraft_tests::TestGroup;
use rocketraft_tests::flip_byte;
use rocketraft_tests::init_tracing;
use rocketraft_tests::send_request;
use rocketraft_tests::wait_for;
use tracing::info;

const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
const REPAIR_TIMEOUT: Duration = Duration::from_secs(30);
const SEND_TIMEOUT: Duration = Duration::from_secs(20);
const TOPIC: &str = "ScrubTopic";
const MESSAGES: i64 = 200;
/// Key index entries per file where a test needs full files.
const INDEX_ENTRIES_PER_FILE: u32 = 64;

/// The unit of `TOPIC` queue 0 at `queue_offset` on `node`.
fn unit(group: &TestGroup, node: u64, queue_offset: i64) -> CqUnit {
    group
        .node(node)
        .group()
        .store()
        .read_consume_queue(TOPIC, 0, queue_offset, 1)[0]
}

fn commit_log(group: &TestGroup, node: u64, unit: CqUnit) -> Vec<u8> {
    group
        .node(node)
        .group()
        .store()
        .read_commit_log(unit.commit_log_offset, unit.size as usize)
        .expect("read")
}

async fn wait_for_status(
    group: &TestGroup,
    node: u64,
    what: &str,
    done: impl Fn(&pb::NodeStatusResponse) -> bool,
) -> anyhow::Result<pb::NodeStatusResponse> {
    wait_for(what, REPAIR_TIMEOUT, || async {
        group.status(node).await.ok().filter(|status| done(status))
    })
    .await
}

/// The body of message `i`.
fn body(i: i64) -> Vec<u8> {
    format!("message {i:06} ").repeat(64).into_bytes()
}

/// What a body says it is ("message 000150").
fn label(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(14)]).into_owned()
}

/// Sends `MESSAGES` messages to `TOPIC` queue 0 and waits until every node applied them;
/// returns the CommitLog end.
async fn send_messages(group: &TestGroup, leader: u64) -> anyhow::Result<i64> {
    let client = group.group_client();
    for i in 0..MESSAGES {
        client
            .send(send_request(TOPIC, 0, [body(i)]), SEND_TIMEOUT)
            .await?;
    }
    let end = group.node(leader).group().store().commit_log_max_offset();
    wait_for(
        "every node applied every message",
        REPAIR_TIMEOUT,
        || async {
            (1..=3)
                .all(|id| group.node(id).group().store().commit_log_max_offset() == end)
                .then_some(())
        },
    )
    .await?;
    Ok(end)
}

/// The ConsumeQueue file of `TOPIC` queue 0 on `node`.
fn consume_queue_file(group: &TestGroup, node: u64) -> std::path::PathBuf {
    group
        .data_dir(node)
        .join("store")
        .join("consumequeue")
        .join(TOPIC)
        .join("0")
        .join(format!("{:020}", 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_bit_rot_in_a_running_group_the_scrubber_should_repair_it_from_peers()
-> anyhow::Result<()> {
    init_tracing();
    let (group, leader) = start_with_fast_pass(0x5EED_5C2B).await?;
    let follower = group.a_follower(leader);
    let other = (1..=3)
        .find(|id| *id != leader && *id != follower)
        .expect("3 nodes");
    let end = send_messages(&group, leader).await?;
    let commit_log_file = |node: u64| commit_log_file(&group, node);

    info!(follower, "--- a flipped bit in a record body of a follower");
    let body_rot = unit(&group, leader, 50);
    let intact = commit_log(&group, leader, body_rot);
    let rot_at = body_rot.commit_log_offset + 400;
    flip_byte(&commit_log_file(follower), rot_at as u64, 0x08)?;
    mended(&group, follower, body_rot, rot_at, &intact).await?;

    info!(leader, "--- a record's magic code damaged on the leader");
    let header_rot = unit(&group, leader, 120);
    let intact = commit_log(&group, leader, header_rot);
    let rot_at = header_rot.commit_log_offset + 5;
    flip_byte(&commit_log_file(leader), rot_at as u64, 0xff)?;
    mended(&group, leader, header_rot, rot_at, &intact).await?;

    info!(
        other,
        "--- a ConsumeQueue unit's size damaged on the other follower"
    );
    let intact_unit = unit(&group, leader, 150);
    flip_byte(&consume_queue_file(&group, other), 150 * 20 + 11, 0x01)?;
    let status = wait_for_status(&group, other, "the unit rewritten", |status| {
        status.scrub_units_repaired >= 1
    })
    .await?;
    assert_eq!(unit(&group, other, 150), intact_unit);
    assert_eq!(status.scrub_records_repaired, 0, "its CommitLog was intact");

    for node in 1..=3 {
        let status = group.status(node).await?;
        assert_eq!(status.scrub_unrepaired, 0, "node {node}: {status:?}");
        assert!(status.scrub_passes >= 1 && status.scrub_bytes_checked >= end as u64);
    }
    group.shutdown().await;
    Ok(())
}

/// Waits until `node`'s copy of `unit`'s record, damaged at CommitLog offset `rot_at`, is
/// `intact` again, mended from a peer: by the record's checks or by the block checksum,
/// whichever reaches it first (a pass walks a chunk's records, then checks its blocks, and
/// the damage may come in between). The finding names the record or the block.
async fn mended(
    group: &TestGroup,
    node: u64,
    unit: CqUnit,
    rot_at: i64,
    intact: &[u8],
) -> anyhow::Result<()> {
    let status = wait_for_status(group, node, "the record mended", |status| {
        status.scrub_records_repaired + status.scrub_blocks_repaired >= 1
    })
    .await?;
    wait_for("the record's bytes intact", REPAIR_TIMEOUT, || async {
        (commit_log(group, node, unit) == intact).then_some(())
    })
    .await?;
    let (record, block) = (unit.commit_log_offset, rot_at / 4096 * 4096);
    let finding = &status.scrub_last_finding;
    assert!(
        finding.contains(&format!("offset {record}"))
            || finding.contains(&format!("offset {block}")),
        "{finding:?}"
    );
    Ok(())
}

/// The first CommitLog segment of `node`.
fn commit_log_file(group: &TestGroup, node: u64) -> std::path::PathBuf {
    group
        .data_dir(node)
        .join("store")
        .join("commitlog")
        .join(format!("{:020}", 0))
}

/// The block checksums of the first CommitLog segment of `node`.
fn commit_log_sums_file(group: &TestGroup, node: u64) -> std::path::PathBuf {
    group
        .data_dir(node)
        .join("store")
        .join("commitlog")
        .join("sums")
        .join(format!("{:020}", 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_rot_that_no_record_check_sees_the_scrubber_should_find_it_by_its_block_checksum_and_mend_it_from_a_peer()
-> anyhow::Result<()> {
    init_tracing();
    let (group, leader) = start_with_fast_pass(0x5EED_B10C).await?;
    let follower = group.a_follower(leader);
    let end = send_messages(&group, leader).await?;
    let whole_log = |node: u64| {
        group
            .node(node)
            .group()
            .store()
            .read_commit_log(0, end as usize)
            .expect("read")
    };

    info!(
        follower,
        "--- a flipped bit in a record's born timestamp: no body CRC, layout or unit check covers it"
    );
    let rot = unit(&group, leader, 80);
    let intact = commit_log(&group, leader, rot);
    flip_byte(
        &commit_log_file(&group, follower),
        rot.commit_log_offset as u64 + 47,
        0x01,
    )?;
    let status = wait_for_status(&group, follower, "the block mended", |status| {
        status.scrub_blocks_repaired >= 1
    })
    .await?;
    assert_eq!(commit_log(&group, follower, rot), intact);
    assert_eq!(status.scrub_records_repaired, 0, "no record check saw it");
    assert!(
        status.scrub_last_finding.contains("checksum"),
        "{:?}",
        status.scrub_last_finding
    );

    info!(
        follower,
        "--- rot in a block checksum: the bytes equal the peers', the checksum is taken anew"
    );
    let block = unit(&group, leader, 150).commit_log_offset as u64 / 4096;
    flip_byte(&commit_log_sums_file(&group, follower), block * 8 + 6, 0x10)?;
    wait_for_status(&group, follower, "the checksum taken anew", |status| {
        status.scrub_blocks_repaired >= 2
    })
    .await?;
    assert_eq!(whole_log(follower), whole_log(leader));
    for node in 1..=3 {
        let status = group.status(node).await?;
        assert_eq!(status.scrub_unrepaired, 0, "node {node}: {status:?}");
    }
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_rot_in_a_block_that_a_scrub_chunk_boundary_cuts_the_pass_should_still_find_and_mend_it()
-> anyhow::Result<()> {
    init_tracing();
    let (group, leader) = start_with_fast_pass(0x5EED_B10E).await?;
    let follower = group.a_follower(leader);
    let client = group.group_client();
    // More than one chunk of the pass (a chunk ends at the last whole record in it).
    let messages = (SCRUB_CHUNK_BYTES / 1000) as i64 + 100;
    for i in 0..messages {
        client
            .send(send_request(TOPIC, 0, [body(i)]), SEND_TIMEOUT)
            .await?;
    }
    let units =
        group
            .node(leader)
            .group()
            .store()
            .read_consume_queue(TOPIC, 0, 0, messages as usize);
    let chunk_end = units
        .iter()
        .map(|unit| unit.commit_log_offset + i64::from(unit.size))
        .take_while(|end| *end <= SCRUB_CHUNK_BYTES as i64)
        .last()
        .expect("records in the first chunk");
    let in_block = chunk_end % 4096;
    assert!(
        in_block != 0 && in_block + 48 <= 4096,
        "the chunk's end cuts a block, before the next record's born timestamp ends"
    );
    wait_for(
        "the follower applied every message",
        REPAIR_TIMEOUT,
        || async {
            let store = group.node(follower).group().store();
            (store.commit_log_max_offset() >= units.last()?.commit_log_offset).then_some(())
        },
    )
    .await?;

    info!(
        follower,
        chunk_end, "--- the born timestamp of the record that starts the second chunk rots"
    );
    let rot = units
        .iter()
        .find(|unit| unit.commit_log_offset == chunk_end)
        .copied()
        .expect("a record at the chunk's end");
    let intact = commit_log(&group, leader, rot);
    flip_byte(
        &commit_log_file(&group, follower),
        rot.commit_log_offset as u64 + 47,
        0x01,
    )?;
    wait_for_status(&group, follower, "the block mended", |status| {
        status.scrub_blocks_repaired >= 1
    })
    .await?;
    assert_eq!(commit_log(&group, follower, rot), intact);
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_block_rotted_differently_on_every_node_the_scrubbers_should_say_no_copy_mends_it_and_no_pull_serve_it()
-> anyhow::Result<()> {
    init_tracing();
    // The paced pass is as good as asleep, so no node checks the block (and mends it from a
    // peer not yet rotted) before every copy has rotted; the pulls below report it.
    let (group, leader) = start_with_pass_asleep(0x5EED_B10D).await?;
    send_messages(&group, leader).await?;
    group.wait_all_applied(leader, LEADER_TIMEOUT).await?;

    info!("--- message 80's born timestamp rots on every node, each in another bit");
    let rot = unit(&group, leader, 80);
    for (node, mask) in (1..=3).zip([0x01, 0x02, 0x04]) {
        flip_byte(
            &commit_log_file(&group, node),
            rot.commit_log_offset as u64 + 47,
            mask,
        )?;
    }
    for node in 1..=3 {
        let error = pull(&group, node, 80, 1)
            .await
            .expect_err("a message in a damaged block is not served");
        assert!(
            error.message().contains("checksum"),
            "node {node}: {error:?}"
        );
    }
    for node in 1..=3 {
        // The last finding is read with the count: a later check of the same block (the
        // pull's report and the scrubber's own) may replace it for a moment.
        let status = wait_for_status(
            &group,
            node,
            "the damage reported unrepaired, no peer having a copy",
            |status| {
                status.scrub_unrepaired >= 1
                    && status
                        .scrub_last_finding
                        .contains("no peer had a copy it covers")
            },
        )
        .await?;
        assert_eq!(status.scrub_blocks_repaired, 0, "node {node}");
    }

    info!("--- a pull of message 80 is refused, never served with the rotted header");
    let error = pull(&group, leader, 80, 1)
        .await
        .expect_err("a message in a damaged block is not served");
    assert!(error.message().contains("checksum"), "{error:?}");
    group.shutdown().await;
    Ok(())
}

/// A group whose scrubber passes over the whole CommitLog every few tens of milliseconds,
/// and its leader.
async fn start_with_fast_pass(seed: u64) -> anyhow::Result<(TestGroup, u64)> {
    let group = TestGroup::start(3, seed, |config| {
        config.scrub_bytes_per_sec = 64 * 1024 * 1024;
        config.scrub_pass_interval_ms = 50;
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    Ok((group, leader))
}

/// A group whose paced scrub pass is as good as asleep (only what reads report is checked),
/// and its leader.
async fn start_with_pass_asleep(seed: u64) -> anyhow::Result<(TestGroup, u64)> {
    let group = TestGroup::start(3, seed, |config| {
        config.scrub_bytes_per_sec = 1;
        config.scrub_pass_interval_ms = 3_600_000;
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    Ok((group, leader))
}

/// The message at `queue_offset` of `TOPIC` queue 0, once a pull on `node` gets it (a read
/// refuses it until it is repaired).
async fn pulled_once_repaired(
    group: &TestGroup,
    node: u64,
    queue_offset: i64,
) -> anyhow::Result<pb::PulledMessage> {
    wait_for("the message pulled", REPAIR_TIMEOUT, || async {
        let pulled = pull(group, node, queue_offset, 1).await.ok()?;
        pulled.messages.into_iter().next()
    })
    .await
}

/// Pulls up to `max` messages of `TOPIC` queue 0 from `queue_offset` on `node`.
async fn pull(
    group: &TestGroup,
    node: u64,
    queue_offset: i64,
    max: u32,
) -> Result<pb::PullResponse, tonic::Status> {
    let request = pb::PullRequest {
        group: "scrub-reader".into(),
        topic: TOPIC.into(),
        queue_id: 0,
        queue_offset,
        max_messages: max,
        ..pb::PullRequest::default()
    };
    let mut client = group.client(node).await.expect("a client");
    Ok(client.pull(request).await?.into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_unit_pointing_at_another_message_a_pull_should_stop_before_it_and_have_it_repaired_at_once()
-> anyhow::Result<()> {
    init_tracing();
    // The paced pass is as good as asleep: only the pull's report can repair the unit.
    let (group, leader) = start_with_pass_asleep(0x5EED_5C2C).await?;
    send_messages(&group, leader).await?;

    info!(
        leader,
        "--- unit 150 of the leader made to point at message 151"
    );
    let (damaged, next) = (unit(&group, leader, 150), unit(&group, leader, 151));
    let (from, to) = (
        damaged.commit_log_offset.to_be_bytes(),
        next.commit_log_offset.to_be_bytes(),
    );
    for (at, (old, new)) in from.iter().zip(to).enumerate() {
        if *old != new {
            flip_byte(
                &consume_queue_file(&group, leader),
                150 * 20 + at as u64,
                old ^ new,
            )?;
        }
    }
    // Read from the file: a read through the store would already find it (its block's
    // checksum no longer matches) and have it repaired before the pull below.
    let on_disk = std::fs::read(consume_queue_file(&group, leader))?;
    assert_eq!(
        on_disk[150 * 20..150 * 20 + 8],
        next.commit_log_offset.to_be_bytes()
    );

    info!("--- a pull delivers the messages before it and stops there");
    let pulled = pull(&group, leader, 140, 32).await?;
    let labels: Vec<String> = pulled.messages.iter().map(|m| label(&m.body)).collect();
    assert_eq!(
        labels,
        (140..150).map(|i| label(&body(i))).collect::<Vec<_>>()
    );
    assert_eq!(pulled.next_offset, 150);

    info!("--- the scrubber checks the CommitLog around it at once and rewrites it");
    let repaired = pulled_once_repaired(&group, leader, 150).await?;
    assert_eq!(label(&repaired.body), label(&body(150)));
    assert_eq!(repaired.queue_offset, 150);
    assert_eq!(unit(&group, leader, 150), damaged);
    let status = group.status(leader).await?;
    assert_eq!(
        (status.scrub_units_repaired, status.scrub_records_repaired),
        (1, 0)
    );
    assert_eq!(status.scrub_unrepaired, 0);
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_rot_in_a_record_header_on_the_leader_a_pull_should_stop_before_its_block_and_have_it_mended_at_once()
-> anyhow::Result<()> {
    init_tracing();
    // The paced pass is as good as asleep: only the pull's report can mend the block.
    let (group, leader) = start_with_pass_asleep(0x5EED_5C2E).await?;
    send_messages(&group, leader).await?;

    info!(
        leader,
        "--- a flipped bit in message 150's born timestamp on the leader: its body CRC, layout \
         and unit all still check out"
    );
    let rot = unit(&group, leader, 150);
    let intact = commit_log(&group, leader, rot);
    let rot_at = rot.commit_log_offset + 47;
    flip_byte(&commit_log_file(&group, leader), rot_at as u64, 0x01)?;
    assert_ne!(commit_log(&group, leader, rot), intact);

    info!("--- a pull delivers the messages before the damaged block and stops there");
    let block = rot_at / 4096 * 4096;
    let first_in_block = (140..=150)
        .find(|&i| {
            let unit = unit(&group, leader, i);
            unit.commit_log_offset + i64::from(unit.size) > block
        })
        .expect("message 150 is in the block");
    let pulled = pull(&group, leader, 140, 32).await?;
    let labels: Vec<String> = pulled.messages.iter().map(|m| label(&m.body)).collect();
    assert_eq!(
        labels,
        (140..first_in_block)
            .map(|i| label(&body(i)))
            .collect::<Vec<_>>()
    );
    assert_eq!(pulled.next_offset, first_in_block);

    info!("--- the scrubber checks the block at once and mends it from a peer");
    let repaired = pulled_once_repaired(&group, leader, 150).await?;
    assert_eq!(label(&repaired.body), label(&body(150)));
    assert_eq!(commit_log(&group, leader, rot), intact);
    let status = group.status(leader).await?;
    assert_eq!(
        (status.scrub_blocks_repaired, status.scrub_records_repaired),
        (1, 0)
    );
    assert_eq!(status.scrub_unrepaired, 0);
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_a_flipped_tags_code_a_tag_filtered_pull_should_still_deliver_its_message_and_the_unit_be_rewritten()
-> anyhow::Result<()> {
    init_tracing();
    // The paced pass is as good as asleep: only the block checksum finds the damage.
    let (group, leader) = start_with_pass_asleep(0x5EED_5C2D).await?;
    let client = group.group_client();
    for i in 0..MESSAGES {
        let mut request = send_request(TOPIC, 0, [body(i)]);
        let mut properties = Vec::new();
        rocketraft_domain::properties::put_pair(&mut properties, "TAGS", "keep");
        request.messages[0].properties = properties.into();
        client.send(request, SEND_TIMEOUT).await?;
    }

    info!(leader, "--- rot in the tags code of the leader's unit 150");
    let intact = unit(&group, leader, 150);
    flip_byte(&consume_queue_file(&group, leader), 150 * 20 + 19, 0x01)?;

    info!("--- a pull filtered by the tag still gets message 150");
    let request = pb::PullRequest {
        group: "scrub-reader".into(),
        topic: TOPIC.into(),
        queue_id: 0,
        queue_offset: 148,
        max_messages: 4,
        tags: vec!["keep".into()],
        ..pb::PullRequest::default()
    };
    let pulled = group
        .client(leader)
        .await?
        .pull(request)
        .await?
        .into_inner();
    let labels: Vec<String> = pulled.messages.iter().map(|m| label(&m.body)).collect();
    assert_eq!(
        labels,
        (148..152).map(|i| label(&body(i))).collect::<Vec<_>>(),
        "a damaged tags code must not hide its message from a filter"
    );

    info!("--- the scrubber rewrites the unit and reseals its block");
    wait_for_status(&group, leader, "the unit rewritten", |status| {
        status.scrub_units_repaired >= 1
    })
    .await?;
    let on_disk = std::fs::read(consume_queue_file(&group, leader))?;
    assert_eq!(on_disk[150 * 20 + 19], intact.tags_code.to_be_bytes()[7]);
    let status = group.status(leader).await?;
    assert_eq!(status.scrub_unrepaired, 0, "{status:?}");
    group.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_rot_in_a_running_nodes_key_index_the_scrubber_should_rebuild_the_block_from_its_commit_log()
-> anyhow::Result<()> {
    init_tracing();
    let group = TestGroup::start(3, 0x5EED_5C2E, |config| {
        config.scrub_bytes_per_sec = 64 * 1024 * 1024;
        config.scrub_pass_interval_ms = 50;
        // Files of 64 entries: file 0 is full, its slot table on disk.
        config.store.index_entries_per_file = INDEX_ENTRIES_PER_FILE;
    })
    .await?;
    let leader = group.wait_for_leader(LEADER_TIMEOUT).await?;
    let follower = group.a_follower(leader);
    let client = group.group_client();
    for i in 0..MESSAGES {
        let mut request = send_request(TOPIC, 0, [body(i)]);
        let mut properties = Vec::new();
        rocketraft_domain::properties::put_pair(&mut properties, "UNIQ_KEY", &format!("U{i}"));
        request.messages[0].properties = properties.into();
        client.send(request, SEND_TIMEOUT).await?;
    }
    let end = group.node(leader).group().store().commit_log_max_offset();
    wait_for(
        "the follower applied every message",
        REPAIR_TIMEOUT,
        || async {
            (group.node(follower).group().store().commit_log_max_offset() == end).then_some(())
        },
    )
    .await?;

    info!(
        follower,
        "--- rot in the CommitLog offset of the follower's index entry 10"
    );
    let index_file = |node: u64| {
        group
            .data_dir(node)
            .join("store")
            .join("index")
            .join(format!("{:020}", 0))
    };
    let header = std::fs::read(index_file(follower))?;
    let slots = u32::from_be_bytes(header[4..8].try_into()?) as u64;
    let entry_10 = 16 + slots * 4 + 10 * 20;
    let entry = |node: u64| -> anyhow::Result<Vec<u8>> {
        let bytes = std::fs::read(index_file(node))?;
        Ok(bytes[entry_10 as usize..][..20].to_vec())
    };
    let intact = entry(leader)?;
    flip_byte(&index_file(follower), entry_10 + 15, 0x10)?;

    let status = wait_for_status(&group, follower, "the index block rebuilt", |status| {
        status.scrub_index_repairs >= 1
    })
    .await?;
    assert_eq!(entry(follower)?, intact, "rebuilt as it was");
    assert_eq!(status.scrub_unrepaired, 0, "{status:?}");

    info!(
        follower,
        "--- rot in the follower's file 0 slot of U5: it names no entry now"
    );
    let slot_count = u64::from(INDEX_ENTRIES_PER_FILE / 4);
    assert_eq!(slots, slot_count);
    let slot = 16 + (key_hash("U5") % slot_count) * 4;
    let slot_bytes = |node: u64| -> anyhow::Result<Vec<u8>> {
        Ok(std::fs::read(index_file(node))?[slot as usize..][..4].to_vec())
    };
    let intact = slot_bytes(leader)?;
    assert_ne!(intact, [0; 4]);
    for (i, byte) in intact.iter().enumerate() {
        flip_byte(&index_file(follower), slot + i as u64, *byte)?;
    }
    assert_eq!(slot_bytes(follower)?, [0; 4]);
    let status = wait_for_status(&group, follower, "the slot rewritten", |status| {
        status.scrub_index_repairs >= 2
    })
    .await?;
    assert_eq!(slot_bytes(follower)?, intact);
    assert_eq!(status.scrub_unrepaired, 0, "{status:?}");
    {
        let store = group.node(follower).group().store();
        for i in 0..MESSAGES {
            let found = store.query_by_key(&format!("U{i}"))?;
            assert_eq!(found.len(), 1, "U{i}");
            assert_eq!(label(found[0].body()), label(&body(i)));
        }
    }
    group.shutdown().await;
    Ok(())
}
