//! `MessageStore` tests on real files: append/dispatch, recovery (torn tail, lost or behind
//! ConsumeQueues, lost index), raw CommitLog shipping, truncate and replay.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::*;
use crate::store::commit_log::COMMIT_LOG_DIR;
use crate::store::consume_queue::queue_dir;
use crate::store::index::INDEX_DIR;
use crate::store::properties::{KEYS, UNIQ_KEY};
use crate::store::record::tests::sample;

const SEGMENT: u64 = 4096;
const UNITS: u64 = 8;
const TOPICS: [&str; 2] = ["TopicA", "TopicB"];

fn config(dir: &Path) -> StoreConfig {
    StoreConfig {
        commit_log_segment_bytes: SEGMENT,
        consume_queue_units_per_segment: UNITS,
        ..StoreConfig::new(dir)
    }
}

fn open(dir: &Path) -> (MessageStore, RecoveryReport) {
    MessageStore::open(config(dir)).expect("open store")
}

/// Record `i`: topic `TOPICS[i % 2]`, queue `i % 3`, UNIQ_KEY `U{i}`, KEYS `k{i} shared`.
fn message(i: usize) -> Vec<u8> {
    let mut rec = sample(
        TOPICS[i % 2],
        (i % 3) as i32,
        format!("body {i} {}", "z".repeat(i % 50 + 100)).as_bytes(),
    );
    rec.properties
        .insert(UNIQ_KEY, format!("U{i}"))
        .expect("uniq");
    rec.properties
        .insert(KEYS, format!("k{i} shared"))
        .expect("keys");
    rec.encode().expect("encode")
}

fn append_n(store: &mut MessageStore, range: std::ops::Range<usize>) -> Vec<AppendResult> {
    range
        .map(|i| store.append(&message(i)).expect("append"))
        .collect()
}

/// Every unit of every queue the test messages use.
fn all_units(store: &MessageStore) -> Vec<Vec<CqUnit>> {
    let mut out = Vec::new();
    for topic in TOPICS {
        for queue_id in 0..3 {
            out.push(store.read_consume_queue(topic, queue_id, 0, usize::MAX));
        }
    }
    out
}

fn whole_log(store: &MessageStore) -> Vec<u8> {
    store
        .read_commit_log(store.commit_log_min_offset(), usize::MAX)
        .expect("read log")
}

#[test]
fn store_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<MessageStore>();
}

#[test]
fn append_assigns_offsets_and_dispatches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, report) = open(dir.path());
    assert_eq!(report.commit_log_end, 0);
    let results = append_n(&mut store, 0..40);
    assert!(
        results
            .windows(2)
            .all(|w| w[0].commit_log_offset < w[1].commit_log_offset)
    );
    assert!(
        store.commit_log_max_offset() > SEGMENT as i64,
        "rolled segments"
    );
    // TopicA/0 gets messages 0, 6, 12, ...: message 6 is its second.
    assert_eq!(results[6].queue_offset, 1);
    let unit = store.read_consume_queue("TopicA", 0, 1, 1)[0];
    assert_eq!(unit.commit_log_offset, results[6].commit_log_offset);
    assert_eq!(unit.size, results[6].size);
    assert_eq!(unit.tags_code, tags_code("TagA"));
    let read = store
        .read_message(results[6].commit_log_offset)
        .expect("read");
    assert_eq!(
        (read.queue_offset, read.physical_offset),
        (1, results[6].commit_log_offset)
    );
    assert_eq!(read.store_timestamp_ms, results[6].store_timestamp_ms);
    assert_eq!(store.consume_queue_offsets("TopicA", 0), (0, 7));
    assert_eq!(store.consume_queue_offsets("Nope", 0), (0, 0));
    assert!(store.read_consume_queue("Nope", 0, 0, 10).is_empty());
}

#[test]
fn invalid_records_are_rejected_before_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let mut bad_crc = message(0);
    // The body starts at byte 88 for IPv4 hosts.
    bad_crc[90] ^= 1;
    let mut trailing = message(0);
    trailing.push(0);
    let mut bad_size = message(0);
    let too_long = (bad_size.len() as i32 + 1).to_be_bytes();
    bad_size[..4].copy_from_slice(&too_long);
    for bad in [bad_crc, trailing, bad_size] {
        assert!(matches!(
            store.append(&bad),
            Err(StoreError::Corrupt { .. })
        ));
    }
    assert_eq!(store.commit_log_max_offset(), 0);
}

#[test]
fn torn_tail_is_truncated_and_appends_continue() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let results = append_n(&mut store, 0..10);
    store.flush().expect("flush");
    let end = store.commit_log_max_offset() as u64;
    let units_before = all_units(&store);
    drop(store);

    let segment = dir
        .path()
        .join(COMMIT_LOG_DIR)
        .join(mapped_file::file_name(end - end % SEGMENT));
    let mut file = OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("segment");
    file.seek(SeekFrom::Start(end % SEGMENT)).expect("seek");
    let next = message(10);
    file.write_all(&next[..next.len() / 2])
        .expect("half record");
    file.write_all(b"\xde\xad\xbe\xef").expect("garbage");
    drop(file);

    let (mut store, report) = open(dir.path());
    assert_eq!(report.commit_log_end, end);
    assert_eq!(report.bytes_truncated, (next.len() / 2 + 4) as u64);
    assert_eq!(all_units(&store), units_before);
    for r in &results {
        store
            .read_message(r.commit_log_offset)
            .expect("whole record intact");
    }
    let appended = store.append(&message(10)).expect("append");
    assert_eq!(appended.commit_log_offset as u64, end);
    // Message 10 goes to TopicA/1, which holds only message 4 so far.
    assert_eq!(appended.queue_offset, 1);
}

#[test]
fn consume_queue_rebuilt_when_directory_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    append_n(&mut store, 0..60);
    store.flush().expect("flush");
    let before = all_units(&store);
    drop(store);
    std::fs::remove_dir_all(queue_dir(dir.path(), "TopicB", 2)).expect("rm queue");
    let (store, report) = open(dir.path());
    assert_eq!(all_units(&store), before);
    assert_eq!(report.redispatch_from, 0);
    assert_eq!(report.records_redispatched, 60);
    assert_eq!(report.cq_units_redispatched, before[5].len() as u64);
    assert_eq!(report.index_entries_redispatched, 0);
}

#[test]
fn a_queue_rebuilt_from_older_segments_takes_no_record_from_a_damaged_block_and_the_log_is_cut_there()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let appended = append_n(&mut store, 0..60);
    store.flush().expect("flush");
    let flushed_end = store.commit_log_max_offset();
    drop(store);
    // Message 25 lies in an older segment than the last, which recovery scans and checks
    // block by block; its queue offset rots, which no record check covers.
    let rotted = appended[25].commit_log_offset;
    assert!(rotted + 4096 < flushed_end);
    let block = rotted / 4096 * 4096;
    let first_touching = appended
        .iter()
        .find(|r| r.commit_log_offset + i64::from(r.size) > block)
        .expect("a record in the block");
    let queue_offset_at = 4 + 4 + 4 + 4 + 4; // TOTALSIZE, MAGIC, BODYCRC, QUEUEID, FLAG
    flip_bits(
        &dir.path()
            .join("commitlog")
            .join(mapped_file::file_name(block as u64 / SEGMENT * SEGMENT)),
        (rotted % SEGMENT as i64) as usize + queue_offset_at + 7,
        0x04,
    );
    std::fs::remove_dir_all(queue_dir(dir.path(), "TopicB", 2)).expect("rm queue");

    let (store, report) = open(dir.path());
    assert_eq!(report.redispatch_from, 0);
    assert_eq!(
        store.commit_log_max_offset(),
        first_touching.commit_log_offset,
        "cut at the first record in the damaged block"
    );
    let records_before = appended
        .iter()
        .take_while(|r| r.commit_log_offset < first_touching.commit_log_offset)
        .count();
    assert_eq!(report.records_redispatched, records_before as u64);
}

#[test]
fn consume_queue_rebuilt_when_behind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    append_n(&mut store, 0..60);
    store.flush().expect("flush");
    let before = all_units(&store);
    drop(store);
    // Cut TopicA/1 to 3 units and delete its later files.
    let qdir = queue_dir(dir.path(), "TopicA", 1);
    for (start, path) in mapped_file::list_segments(&qdir).expect("list") {
        if start == 0 {
            let file = OpenOptions::new().write(true).open(&path).expect("open");
            file.set_len(3 * CQ_UNIT_SIZE as u64).expect("truncate");
        } else {
            std::fs::remove_file(path).expect("rm");
        }
    }
    let (store, report) = open(dir.path());
    assert_eq!(all_units(&store), before);
    assert_eq!(report.cq_units_redispatched, before[1].len() as u64 - 3);
}

#[test]
fn consume_queue_hole_not_in_checkpoint_is_found_by_redispatch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    append_n(&mut store, 0..30);
    store.flush().expect("flush");
    // Not flushed into the checkpoint: more records land after it.
    append_n(&mut store, 30..60);
    let before = all_units(&store);
    drop(store);
    std::fs::remove_dir_all(queue_dir(dir.path(), "TopicA", 0)).expect("rm queue");
    let (store, _) = open(dir.path());
    assert_eq!(all_units(&store), before);
}

#[test]
fn query_by_key_and_uniq_key_after_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let results = append_n(&mut store, 0..20);
    store.flush().expect("flush");
    drop(store);
    let (store, _) = open(dir.path());
    let by_uniq = store.query_by_key("U7").expect("query");
    assert_eq!(by_uniq.len(), 1);
    assert_eq!(by_uniq[0].physical_offset(), results[7].commit_log_offset);
    let by_key = store.query_by_key("k13").expect("query");
    assert_eq!(by_key.len(), 1);
    assert_eq!(by_key[0].property(UNIQ_KEY).expect("property"), Some("U13"));
    let shared = store.query_by_key("shared").expect("query");
    assert_eq!(shared.len(), 20);
    assert_eq!(
        shared[0].property(UNIQ_KEY).expect("property"),
        Some("U19"),
        "newest first"
    );
    assert!(store.query_by_key("k1 ").expect("query").is_empty());
    assert!(store.query_by_key("absent").expect("query").is_empty());
}

#[test]
fn index_rebuilt_when_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    append_n(&mut store, 0..20);
    store.flush().expect("flush");
    drop(store);
    std::fs::remove_dir_all(dir.path().join(INDEX_DIR)).expect("rm index");
    let (store, report) = open(dir.path());
    assert_eq!(report.index_entries_redispatched, 20 * 3);
    assert_eq!(report.cq_units_redispatched, 0);
    assert_eq!(store.query_by_key("U3").expect("query").len(), 1);
}

#[test]
fn query_by_key_results_at_max_and_max_plus_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    append_n(&mut store, 0..QUERY_BY_KEY_RESULTS_MAX);
    assert_eq!(
        store.query_by_key("shared").expect("query").len(),
        QUERY_BY_KEY_RESULTS_MAX
    );
    append_n(
        &mut store,
        QUERY_BY_KEY_RESULTS_MAX..QUERY_BY_KEY_RESULTS_MAX + 1,
    );
    let found = store.query_by_key("shared").expect("query");
    assert_eq!(found.len(), QUERY_BY_KEY_RESULTS_MAX);
    let newest = format!("U{QUERY_BY_KEY_RESULTS_MAX}");
    assert_eq!(
        found[0].property(UNIQ_KEY).expect("property"),
        Some(newest.as_str())
    );
}

#[test]
fn a_filtered_query_reads_at_most_its_candidate_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let oldest = |store: &MessageStore| {
        store
            .query_by_key_where("shared", 1, |view| {
                view.property(UNIQ_KEY).ok().flatten() == Some("U0")
            })
            .expect("query")
            .len()
    };
    append_n(&mut store, 0..QUERY_BY_KEY_CANDIDATES_MAX);
    assert_eq!(oldest(&store), 1, "the oldest is the last candidate read");
    append_n(
        &mut store,
        QUERY_BY_KEY_CANDIDATES_MAX..QUERY_BY_KEY_CANDIDATES_MAX + 1,
    );
    assert_eq!(oldest(&store), 0, "one past the budget is not read");
}

#[test]
fn append_raw_commit_log_reproduces_log_and_queues() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let (mut src, _) = open(src_dir.path());
    append_n(&mut src, 0..50);
    let (mut dst, _) = open(dst_dir.path());
    let bytes = src.read_commit_log(0, usize::MAX).expect("read");
    dst.append_raw_commit_log(0, &bytes).expect("install");
    assert_eq!(whole_log(&dst), whole_log(&src));
    assert_eq!(all_units(&dst), all_units(&src));
    assert_eq!(dst.query_by_key("U42").expect("query").len(), 1);
    // Both continue identically.
    let a = src.append(&message(50)).expect("append");
    let b = dst.append(&message(50)).expect("append");
    assert_eq!(a, b);
    assert!(matches!(
        dst.append_raw_commit_log(0, &bytes),
        Err(StoreError::RawAppendOffset { .. })
    ));
    dst.flush().expect("flush");
    drop(dst);
    let (dst, report) = open(dst_dir.path());
    assert_eq!(report.records_redispatched, 0);
    assert_eq!(all_units(&dst), all_units(&src));
}

#[test]
fn truncate_then_reappend_is_byte_identical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let results = append_n(&mut store, 0..40);
    let log_before = whole_log(&store);
    let units_before = all_units(&store);
    store
        .truncate(results[17].commit_log_offset)
        .expect("truncate");
    assert_eq!(store.commit_log_max_offset(), results[17].commit_log_offset);
    assert!(store.query_by_key("U17").expect("query").is_empty());
    assert_eq!(store.query_by_key("U16").expect("query").len(), 1);
    let again = append_n(&mut store, 17..40);
    assert_eq!(again, results[17..].to_vec());
    assert_eq!(whole_log(&store), log_before);
    assert_eq!(all_units(&store), units_before);
    assert!(store.truncate(-1).is_err());
}

#[test]
fn truncate_survives_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let results = append_n(&mut store, 0..30);
    store.flush().expect("flush");
    store
        .truncate(results[10].commit_log_offset)
        .expect("truncate");
    store.flush().expect("flush");
    let units = all_units(&store);
    drop(store);
    let (store, report) = open(dir.path());
    assert_eq!(report.commit_log_end as i64, results[10].commit_log_offset);
    assert_eq!(report.bytes_truncated, 0);
    assert_eq!(all_units(&store), units);
}

#[test]
fn corrupt_checkpoint_redispatches_everything_idempotently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    append_n(&mut store, 0..25);
    store.flush().expect("flush");
    let units = all_units(&store);
    drop(store);
    std::fs::write(dir.path().join(checkpoint::CHECKPOINT_FILE), b"junk").expect("write");
    let (store, report) = open(dir.path());
    assert_eq!(report.checkpoint, CheckpointState::Corrupt);
    assert_eq!(report.records_redispatched, 25);
    assert_eq!(report.cq_units_redispatched, 0);
    assert_eq!(all_units(&store), units);
}

#[test]
fn tags_code_fn_is_used_for_append_and_rebuild() {
    fn deliver_time(view: &RecordView<'_>) -> i64 {
        view.store_timestamp_ms() + 1000
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = StoreConfig {
        tags_code_fn: deliver_time,
        ..config(dir.path())
    };
    let (mut store, _) = MessageStore::open(cfg.clone()).expect("open");
    let r = store.append(&message(0)).expect("append");
    let expected = r.store_timestamp_ms + 1000;
    assert_eq!(
        store.read_consume_queue("TopicA", 0, 0, 1)[0].tags_code,
        expected
    );
    store
        .append_with_tags_code(&message(2), Some(expected))
        .expect("append");
    store.flush().expect("flush");
    drop(store);
    std::fs::remove_dir_all(queue_dir(dir.path(), "TopicA", 0)).expect("rm");
    let (store, _) = MessageStore::open(cfg).expect("reopen");
    let units = store.read_consume_queue("TopicA", 0, 0, 10);
    assert!(units.iter().all(|u| u.tags_code == expected));
    assert_eq!(store.read_consume_queue("TopicA", 2, 0, 10).len(), 1);
}

#[test]
fn search_by_time_finds_the_first_message_stored_at_or_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    // Queue offsets 0..10 stored at 1000, 1010, ..., 1090.
    for i in 0..10 {
        let mut record = sample("TopicT", 0, b"x");
        record.store_timestamp_ms = 1000 + 10 * i;
        store
            .append(&record.encode().expect("encode"))
            .expect("append");
    }
    let search = |ts| {
        store
            .search_offset_by_time("TopicT", 0, ts)
            .expect("search")
    };
    assert_eq!(search(0), 0, "older than all: the first");
    assert_eq!(search(1000), 0);
    assert_eq!(search(1001), 1, "between two: the later one");
    assert_eq!(search(1050), 5);
    assert_eq!(search(1090), 9);
    assert_eq!(search(1091), 10, "newer than all: the max offset");
    assert_eq!(
        store.search_offset_by_time("Nope", 0, 5).expect("search"),
        0
    );
}

fn file_count(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

/// Retention's deletion: detach under the store, delete after.
fn delete_oldest(store: &mut MessageStore, count: usize) -> Deleted {
    let (deleted, detached) = store.detach_oldest_segments(count).expect("detach");
    detached.delete().expect("delete");
    deleted
}

#[test]
fn deleting_the_oldest_segments_moves_every_reader_to_what_is_left_and_survives_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small_index = StoreConfig {
        index_entries_per_file: 16,
        ..config(dir.path())
    };
    let (mut store, _) = MessageStore::open(small_index.clone()).expect("open");
    let appended = append_n(&mut store, 0..150);
    let sealed = store.sealed_commit_log_segments().expect("sealed");
    assert!(sealed.len() >= 6, "{} sealed segments", sealed.len());
    assert_eq!(sealed[0].start, 0);
    assert!(sealed.windows(2).all(|w| w[0].end == w[1].start));
    let queue_files = file_count(&queue_dir(dir.path(), "TopicA", 0));
    let index_files = file_count(&dir.path().join(INDEX_DIR));

    let (deleted, detached) = store.detach_oldest_segments(3).expect("detach");
    // Detached files (segments and their block checksums) stay on disk, out of the store,
    // until deleted.
    let segments_and_sums = |dir: &Path| {
        let count = |dir: PathBuf| mapped_file::list_segments(&dir).expect("list").len();
        let commit_log = dir.join(COMMIT_LOG_DIR);
        (
            count(commit_log.clone()),
            count(commit_log.join(crate::store::cq_sums::SUMS_DIR)),
        )
    };
    assert_eq!(
        segments_and_sums(dir.path()),
        (sealed.len() + 1, sealed.len() + 1)
    );
    detached.delete().expect("delete");
    assert_eq!(
        segments_and_sums(dir.path()),
        (sealed.len() + 1 - 3, sealed.len() + 1 - 3)
    );
    let min = 3 * SEGMENT;
    assert_eq!(deleted.commit_log_min, min);
    assert_eq!(deleted.commit_log_bytes, min);
    let gone: Vec<&AppendResult> = appended
        .iter()
        .filter(|a| (a.commit_log_offset as u64) < min)
        .collect();
    assert_eq!(deleted.cq_units, gone.len() as u64);
    assert!(deleted.index_entries > 0);
    assert_eq!(store.commit_log_min_offset(), min as i64);
    assert!(matches!(
        store.read_message(0),
        Err(StoreError::OffsetOutOfRange { .. })
    ));
    let units_before_restart = all_units(&store);
    for (i, topic) in TOPICS.iter().enumerate() {
        for queue_id in 0..3 {
            let units = &units_before_restart[i * 3 + queue_id as usize];
            assert!(units.iter().all(|u| u.commit_log_offset as u64 >= min));
            let (queue_min, _) = store.consume_queue_offsets(topic, queue_id);
            let first_kept = appended
                .iter()
                .enumerate()
                .find(|(n, a)| {
                    TOPICS[n % 2] == *topic
                        && (n % 3) as i32 == queue_id
                        && a.commit_log_offset as u64 >= min
                })
                .map(|(_, a)| a.queue_offset);
            assert_eq!(Some(queue_min), first_kept, "{topic}/{queue_id}");
        }
    }
    assert!(file_count(&queue_dir(dir.path(), "TopicA", 0)) < queue_files);
    assert!(file_count(&dir.path().join(INDEX_DIR)) < index_files);
    let shared = store.query_by_key("shared").expect("query what is left");
    assert!(!shared.is_empty());
    assert!(
        store
            .query_by_key(&format!("k{}", 0))
            .expect("query a deleted key")
            .is_empty()
    );
    drop(shared);

    // The last segment always stays, so the log keeps its end.
    let end = store.commit_log_max_offset();
    let sealed_left = store.sealed_commit_log_segments().expect("sealed").len();
    delete_oldest(&mut store, usize::MAX);
    assert_eq!(store.commit_log_max_offset(), end);
    assert_eq!(
        store.commit_log_min_offset(),
        min as i64 + sealed_left as i64 * SEGMENT as i64
    );
    let units_kept = all_units(&store);
    store.flush().expect("flush");
    drop(store);

    let (mut store, _) = MessageStore::open(small_index).expect("reopen");
    assert_eq!(store.commit_log_max_offset(), end);
    assert_eq!(all_units(&store), units_kept);
    // Message 150 goes to TopicA, queue 0: the first of `all_units`.
    let next = store.append(&message(150)).expect("append after restart");
    let queue_max = units_kept[0].len();
    let (queue_min, _) = store.consume_queue_offsets(TOPICS[0], 0);
    assert_eq!(next.queue_offset, queue_min + queue_max as i64);
}

#[test]
fn a_crash_between_retention_and_the_next_checkpoint_rebuilds_no_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small_index = StoreConfig {
        index_entries_per_file: 16,
        ..config(dir.path())
    };
    let (mut store, _) = MessageStore::open(small_index.clone()).expect("open");
    append_n(&mut store, 0..150);
    store.flush().expect("checkpoint");
    let deleted = delete_oldest(&mut store, 3);
    assert!(deleted.index_entries > 0);
    let end = store.commit_log_max_offset() as u64;
    // Crash: the checkpoint still counts the deleted index files' entries.
    drop(store);

    let (store, report) = MessageStore::open(small_index).expect("reopen");
    assert!(
        report.redispatch_from >= deleted.commit_log_min && report.redispatch_from < end,
        "from the newest entry's record, not the CommitLog start: {report:?}"
    );
    assert!(
        report.index_entries_redispatched == 0,
        "every entry was still there: {report:?}"
    );
    assert_eq!(store.query_by_key("k149").expect("query").len(), 1);
    assert!(
        store
            .query_by_key("k0")
            .expect("query a deleted key")
            .is_empty()
    );
}

#[test]
fn an_index_that_lost_its_end_gets_it_back_from_its_newest_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    append_n(&mut store, 0..40);
    store.flush().expect("checkpoint");
    drop(store);
    // The newest index file's header counts 5 entries fewer than were flushed, as if its last
    // flush had not reached the disk: those entries are not trusted at the next open.
    let newest = std::fs::read_dir(dir.path().join(INDEX_DIR))
        .expect("index dir")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.is_file())
        .max()
        .expect("an index file");
    let mut header = [0u8; 16];
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&newest)
        .expect("open index file");
    use std::os::unix::fs::FileExt;
    file.read_exact_at(&mut header, 0).expect("header");
    let count = u32::from_be_bytes(header[12..16].try_into().expect("4 bytes"));
    file.write_all_at(&(count - 5).to_be_bytes(), 12)
        .expect("rewrite the count");
    drop(file);

    let (store, report) = open(dir.path());
    // With them goes the rest of their partial block: its checksum covers all of it.
    let partial = u64::from(count - 5) % crate::store::cq_sums::CQ_BLOCK_UNITS;
    assert_eq!(report.index_entries_redispatched, 5 + partial, "{report:?}");
    assert!(report.redispatch_from > 0, "not a full rebuild: {report:?}");
    for i in 0..40 {
        assert_eq!(
            store.query_by_key(&format!("k{i}")).expect("query").len(),
            1,
            "k{i}"
        );
    }
}

#[test]
fn a_retry_is_recognised_within_one_segment_of_the_end_and_not_beyond() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let first = store.append(&message(0)).expect("append");
    let found = store.find_unique(TOPICS[0], "U0", 0).expect("find");
    assert_eq!(
        found.map(|s| s.commit_log_offset),
        Some(first.commit_log_offset)
    );
    let mut i = 1;
    while store.dedup_window_start() <= first.commit_log_offset as u64 {
        assert!(
            store
                .find_unique(TOPICS[0], "U0", 0)
                .expect("find")
                .is_some()
        );
        store.append(&message(i)).expect("append");
        i += 1;
    }
    assert_eq!(store.find_unique(TOPICS[0], "U0", 0).expect("find"), None);
    assert!(i > 10, "a segment holds many records");
}

#[test]
fn a_store_behind_a_source_whose_retention_deleted_its_end_restarts_where_the_source_starts() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let (mut src, _) = open(src_dir.path());
    let (mut dst, _) = open(dst_dir.path());
    append_n(&mut src, 0..20);
    let early = src.read_commit_log(0, usize::MAX).expect("read");
    dst.append_raw_commit_log(0, &early)
        .expect("install the early part");
    append_n(&mut src, 20..150);
    let deleted = delete_oldest(&mut src, 4);
    let restart = deleted.commit_log_min as i64;
    assert!(restart > dst.commit_log_max_offset());

    // Only a segment boundary past the end is a place to restart.
    for refused in [dst.commit_log_max_offset(), restart + 1] {
        assert!(matches!(
            dst.restart_at(refused),
            Err(StoreError::RawAppendOffset { .. })
        ));
    }
    dst.restart_at(restart).expect("restart");
    let bytes = src.read_commit_log(restart, usize::MAX).expect("read");
    dst.append_raw_commit_log(restart, &bytes).expect("install");
    assert_eq!(dst.commit_log_min_offset(), restart);
    assert_eq!(all_units(&dst), all_units(&src));
    for (i, topic) in TOPICS.iter().enumerate() {
        for queue_id in 0..3 {
            assert_eq!(
                dst.consume_queue_offsets(topic, queue_id),
                src.consume_queue_offsets(topic, queue_id),
                "{i}: {topic}/{queue_id}"
            );
        }
    }
    let a = src.append(&message(150)).expect("append");
    let b = dst.append(&message(150)).expect("append");
    assert_eq!(a, b);
    dst.flush().expect("flush");
    drop(dst);
    let (dst, _) = open(dst_dir.path());
    assert_eq!(all_units(&dst), all_units(&src));
    assert_eq!(dst.commit_log_min_offset(), restart);
}

#[test]
fn a_store_restarted_past_its_end_gives_a_queue_without_shipped_records_its_source_end() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let (mut src, _) = open(src_dir.path());
    let (mut dst, _) = open(dst_dir.path());
    let lonely = |i: usize| {
        sample("Lonely", 0, format!("lonely {i}").as_bytes())
            .encode()
            .expect("encode")
    };
    for i in 0..3 {
        src.append(&lonely(i)).expect("append");
    }
    append_n(&mut src, 0..150);
    let deleted = delete_oldest(&mut src, 4);
    let restart = deleted.commit_log_min as i64;
    assert_eq!(src.consume_queue_offsets("Lonely", 0), (3, 3));

    dst.restart_at(restart).expect("restart");
    let bytes = src.read_commit_log(restart, usize::MAX).expect("read");
    dst.append_raw_commit_log(restart, &bytes).expect("install");
    dst.restore_queue_tails(&src.queue_tails())
        .expect("restore the tails");
    assert_eq!(dst.consume_queue_offsets("Lonely", 0), (3, 3));
    assert_eq!(all_units(&dst), all_units(&src));

    let a = src.append(&lonely(3)).expect("append");
    let b = dst.append(&lonely(3)).expect("append");
    assert_eq!(a, b);
    assert_eq!(b.queue_offset, 3);
    dst.flush().expect("flush");
    drop(dst);
    let (dst, _) = open(dst_dir.path());
    assert_eq!(dst.consume_queue_offsets("Lonely", 0), (3, 4));
    assert_eq!(
        dst.read_consume_queue("Lonely", 0, 3, 1),
        src.read_consume_queue("Lonely", 0, 3, 1)
    );

    // A queue that ends elsewhere than the tail says is not moved: the replicas diverged.
    let mut dst = dst;
    let mut behind = src.queue_tails();
    behind.retain(|tail| tail.topic == "Lonely");
    behind[0].queue_offset = 2;
    assert!(matches!(
        dst.restore_queue_tails(&behind),
        Err(StoreError::QueueEndMismatch {
            local: 4,
            source_end: 3,
            ..
        })
    ));
    assert_eq!(dst.consume_queue_offsets("Lonely", 0), (3, 4));
}

#[test]
fn shipped_bytes_cut_anywhere_install_record_by_record() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let (mut src, _) = open(src_dir.path());
    let (mut dst, _) = open(dst_dir.path());
    append_n(&mut src, 0..60);
    let bytes = src.read_commit_log(0, usize::MAX).expect("read");
    let (mut offset, mut pending) = (0i64, Vec::new());
    for piece in bytes.chunks(777) {
        pending.extend_from_slice(piece);
        let whole = dst.whole_raw_len(offset, &pending).expect("layout");
        assert!(whole <= pending.len());
        dst.append_raw_commit_log(offset, &pending[..whole])
            .expect("whole records install");
        pending.drain(..whole);
        offset += whole as i64;
    }
    assert!(pending.is_empty());
    assert_eq!(whole_log(&dst), whole_log(&src));
    assert_eq!(all_units(&dst), all_units(&src));
    // A cut record is refused whole, not written in part.
    let end = dst.commit_log_max_offset();
    let next = src.append(&message(60)).expect("append");
    let record = src
        .read_commit_log(next.commit_log_offset, usize::MAX)
        .expect("read");
    assert_eq!(
        dst.whole_raw_len(end, &record[..record.len() - 1])
            .expect("cut"),
        0
    );
    assert!(
        dst.append_raw_commit_log(end, &record[..record.len() - 1])
            .is_err()
    );
    assert_eq!(dst.commit_log_max_offset(), end);
}

#[test]
fn a_batch_with_more_index_keys_than_wait_at_once_indexes_every_one() {
    use crate::store::dispatch::PENDING_INDEX_KEYS_MAX;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    // Three keys per record (U, k, shared): the batch's keys pass the pending bound, so part
    // of them are added mid-batch and the rest at its end.
    let records = PENDING_INDEX_KEYS_MAX / 3 + 50;
    store
        .append_batch(|batch| (0..records).try_for_each(|i| batch.append(&message(i)).map(drop)))
        .expect("batch");
    assert_eq!(store.dispatcher.index().len(), records * 3);
    store.flush().expect("flush");
    drop(store);
    let (store, _) = open(dir.path());
    for i in [0, PENDING_INDEX_KEYS_MAX / 3, records - 1] {
        assert_eq!(
            store.query_by_key(&format!("U{i}")).expect("query").len(),
            1,
            "U{i}"
        );
        assert_eq!(
            store.query_by_key(&format!("k{i}")).expect("query").len(),
            1,
            "k{i}"
        );
    }
}

/// Stores messages 0..30, flushes and closes the store; returns every unit it held.
fn stored_and_closed(dir: &Path) -> Vec<Vec<CqUnit>> {
    let (mut store, _) = open(dir);
    append_n(&mut store, 0..30);
    store.flush().expect("flush");
    all_units(&store)
}

/// Flips the bits `mask` of byte `at` of the file at `path`, in place (a store that has the
/// file mapped sees it at once, as it would rot in its page cache).
pub(crate) fn flip_bits(path: &Path, at: usize, mask: u8) {
    use std::os::unix::fs::FileExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at as u64).expect("read");
    byte[0] ^= mask;
    file.write_all_at(&byte, at as u64).expect("write");
}

#[test]
fn a_flipped_tags_code_is_found_at_open_served_from_its_record_and_resealed_by_a_repair() {
    use crate::scrub::suspects::SuspectUnit;
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = stored_and_closed(dir.path());
    // TopicA queue 0 holds messages 0, 6, 12, ...: rot in the tags code of its unit 1 (message
    // 6), which a tag filter would skip the message by; the unit still looks valid.
    let file = queue_dir(dir.path(), "TopicA", 0).join(mapped_file::file_name(0));
    flip_bits(&file, CQ_UNIT_SIZE + 19, 0x01);

    let (mut store, report) = open(dir.path());
    assert_eq!(
        (report.cq_blocks_damaged, report.cq_blocks_resealed),
        (1, 0)
    );
    let suspect = SuspectUnit {
        topic: "TopicA".into(),
        queue_id: 0,
        queue_offset: 1,
    };
    assert_eq!(store.suspects().take(), Some(suspect));
    assert_eq!(
        all_units(&store),
        expected,
        "units of a damaged block are checked: the tags code comes from the record"
    );
    let queue = |store: &MessageStore| {
        store
            .dispatcher
            .queue("TopicA", 0)
            .expect("queue")
            .damaged_blocks()
    };
    assert_eq!(queue(&store), vec![0]);
    store
        .repair_unit("TopicA", 0, 1, expected[0][1])
        .expect("repair");
    assert!(queue(&store).is_empty(), "the repair resealed the block");
    store.flush().expect("flush");
    drop(store);

    let (store, report) = open(dir.path());
    assert_eq!(
        (report.cq_blocks_damaged, report.cq_blocks_resealed),
        (0, 0)
    );
    assert_eq!(all_units(&store), expected);
}

#[test]
fn a_checksum_that_disagrees_with_intact_units_is_resealed_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let expected = stored_and_closed(dir.path());
    // As a crash can leave it: the checksum reached the disk, the unit it covers did not
    // (here the other way round, which open cannot tell apart: the units decide).
    let sums = queue_dir(dir.path(), "TopicB", 1)
        .join(crate::store::cq_sums::SUMS_DIR)
        .join(mapped_file::file_name(0));
    flip_bits(&sums, 5, 0x80);

    let (store, report) = open(dir.path());
    assert_eq!(
        (report.cq_blocks_damaged, report.cq_blocks_resealed),
        (0, 1)
    );
    assert_eq!(store.suspects().take(), None);
    assert_eq!(all_units(&store), expected);
}

#[test]
fn a_damaged_index_entry_has_the_index_rebuilt_from_the_commit_log_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    stored_and_closed(dir.path());
    // Entry 7's CommitLog offset (low byte): the lookups of its key would miss the record, and
    // apply's retry detection with them.
    let file = dir.path().join(INDEX_DIR).join(mapped_file::file_name(0));
    let header = std::fs::read(&file).expect("read");
    let slots = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    flip_bits(&file, 16 + slots * 4 + 7 * 20 + 15, 0x04);

    let (store, report) = open(dir.path());
    assert_eq!(report.redispatch_from, 0, "a full rebuild: {report:?}");
    assert!(report.index_entries_redispatched >= 60, "{report:?}");
    for i in 0..30 {
        let found = store.query_by_key(&format!("k{i}")).expect("query");
        assert_eq!(found.len(), 1, "k{i}");
        assert_eq!(
            found[0].property(KEYS).expect("keys"),
            Some(format!("k{i} shared").as_str())
        );
    }
}

/// Byte `byte` of entry `entry` of index file `sequence` of the store in `dir` (the file's
/// slot count is in its header).
pub(crate) fn index_entry_byte(
    dir: &Path,
    sequence: u64,
    entry: usize,
    byte: usize,
) -> (PathBuf, usize) {
    let file = dir.join(INDEX_DIR).join(mapped_file::file_name(sequence));
    let header = std::fs::read(&file).expect("read");
    let slots = u32::from_be_bytes(header[4..8].try_into().expect("4 bytes")) as usize;
    (file, 16 + slots * 4 + entry * 20 + byte)
}

/// A store of messages 0..30 whose key index files hold 16 entries: three keys a message
/// (U{i}, k{i}, shared), 90 entries in files 0..=5.
fn thirty_in_small_index_files(dir: &Path) -> MessageStore {
    let (mut store, _) = MessageStore::open(StoreConfig {
        index_entries_per_file: 16,
        ..config(dir)
    })
    .expect("open");
    append_n(&mut store, 0..30);
    store
}

#[test]
fn index_damage_in_a_running_store_fails_lookups_until_its_block_is_rebuilt_from_the_commit_log() {
    use crate::store::index::BlockRepair;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = thirty_in_small_index_files(dir.path());
    let shared = |store: &MessageStore| store.query_by_key("shared").map(|found| found.len());
    let expected = shared(&store).expect("an intact index");

    // Rot in the CommitLog offsets of entry 7 of files 2 and 3: "shared" chains through both.
    for sequence in [2, 3] {
        let (file, at) = index_entry_byte(dir.path(), sequence, 7, 15);
        flip_bits(&file, at, 0x04);
    }
    assert!(
        matches!(
            shared(&store),
            Err(StoreError::IndexDamaged {
                sequence: 3,
                block: 0
            })
        ),
        "a lookup stops at the damage instead of answering without it"
    );
    assert_eq!(store.index().damaged_blocks(2, 0..1), [0]);
    assert_eq!(store.index().damaged_blocks(3, 0..u64::MAX), [0]);
    assert_eq!(
        store.repair_index_block(3, 0).expect("repair"),
        BlockRepair::Rewritten,
        "file 2's damaged block, which anchors file 3's, is rebuilt first"
    );
    assert!(store.index().damaged_blocks(2, 0..1).is_empty());
    assert_eq!(
        store.repair_index_block(2, 0).expect("repair"),
        BlockRepair::Intact
    );
    assert_eq!(shared(&store).expect("repaired"), expected);
    for i in 0..30 {
        let found = store.query_by_key(&format!("U{i}")).expect("query");
        assert_eq!(found.len(), 1, "U{i}");
    }

    // Rot in a checksum over intact entries: they are right, the checksum is taken again.
    let sums = dir
        .path()
        .join(INDEX_DIR)
        .join(crate::store::cq_sums::SUMS_DIR)
        .join(mapped_file::file_name(4));
    flip_bits(&sums, 6, 0x10);
    assert_eq!(store.index().damaged_blocks(4, 0..1), [0]);
    assert_eq!(
        store.repair_index_block(4, 0).expect("repair"),
        BlockRepair::Resealed
    );
    assert_eq!(
        store.repair_index_block(4, 0).expect("repair"),
        BlockRepair::Intact
    );
    store.flush().expect("flush");
    drop(store);
    let (store, report) = open(dir.path());
    assert_ne!(report.redispatch_from, 0, "no rebuild at open: {report:?}");
    assert_eq!(shared(&store).expect("intact after reopen"), expected);
}

#[test]
fn rot_in_the_newest_index_entry_is_mended_before_the_next_append_reads_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // File 5 holds the last 10 entries; the newest is its entry 9.
    let mut store = thirty_in_small_index_files(dir.path());
    // The high byte of its CommitLog offset: unchecked, the next add would find the new
    // record older than the newest entry and refuse it.
    let (file, at) = index_entry_byte(dir.path(), 5, 9, 8);
    flip_bits(&file, at, 0x40);
    assert_eq!(store.index().damaged_blocks(5, 0..1), [0]);

    append_n(&mut store, 30..31);

    assert!(store.index().damaged_blocks(5, 0..1).is_empty());
    for i in 0..31 {
        assert_eq!(
            store.query_by_key(&format!("U{i}")).expect("query").len(),
            1,
            "U{i}"
        );
    }
}

#[test]
fn an_add_that_reads_a_damaged_older_block_mends_it_before_it_decides() {
    use crate::store::index::key_hash;
    let dir = tempfile::tempdir().expect("tempdir");
    // One index file of 256 entries in 64 slots: messages 0..30 fill blocks 0 (entries 0..64)
    // and 1 (64..90, the newest, which an append checks before it adds).
    let (mut store, _) = MessageStore::open(StoreConfig {
        index_entries_per_file: 256,
        ..config(dir.path())
    })
    .expect("open");
    append_n(&mut store, 0..30);
    let slot = |key: &str| key_hash(key) % 64;
    let in_block_1: Vec<u64> = (21..30)
        .flat_map(|i| [format!("U{i}"), format!("k{i}"), "shared".to_owned()])
        .skip(1)
        .map(|key| slot(&key))
        .collect();
    // A key of block 0 whose slot has no entry in block 1: adding it at a new offset reads
    // its slot's chain in block 0 to see whether the pair is stored.
    let i = (0..21)
        .find(|i| !in_block_1.contains(&slot(&format!("k{i}"))))
        .expect("a key whose slot block 1 does not use");
    let (file, at) = index_entry_byte(dir.path(), 0, 3 * i + 1, 8);
    flip_bits(&file, at, 0x40);
    assert_eq!(store.index().damaged_blocks(0, 0..2), [0]);

    let mut record = sample(TOPICS[0], 0, b"again");
    record.properties.insert(UNIQ_KEY, "U-new").expect("uniq");
    record
        .properties
        .insert(KEYS, format!("k{i}"))
        .expect("keys");
    store
        .append(&record.encode().expect("encode"))
        .expect("an append that meets damage mends it");

    assert!(store.index().damaged_blocks(0, 0..2).is_empty(), "mended");
    let found = store
        .query_by_key(&format!("k{i}"))
        .expect("an intact index");
    assert_eq!(found.len(), 2, "the old pair and the new one");
    assert_eq!(store.query_by_key("U-new").expect("query").len(), 1);
}

#[test]
fn a_cut_below_the_flushed_offset_first_lowers_the_checkpoint_to_the_cut() {
    use crate::store::checkpoint::Checkpoint;
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut store, _) = open(dir.path());
    let appended = append_n(&mut store, 0..20);
    store.flush().expect("flush");
    let flushed = Checkpoint::load(dir.path()).expect("load").0;
    assert_eq!(
        flushed.commit_log_flushed_offset,
        store.commit_log_max_offset() as u64
    );

    let cut = appended[12].commit_log_offset;
    store.truncate(cut).expect("cut");
    let lowered = Checkpoint::load(dir.path()).expect("load").0;
    assert_eq!(lowered.commit_log_flushed_offset, cut as u64);
    assert_eq!(lowered.dispatched_offset, cut as u64);
    assert_eq!(
        lowered.index_entry_count, flushed.index_entry_count,
        "counts stay: an index found behind them is rebuilt"
    );

    // A cut past the flushed offset leaves the checkpoint alone.
    let later = append_n(&mut store, 20..25);
    store.truncate(later[2].commit_log_offset).expect("cut");
    assert_eq!(Checkpoint::load(dir.path()).expect("load").0, lowered);
}
