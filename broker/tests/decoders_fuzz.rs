//! Every decoder of bytes from a disk or a peer, fed damaged and random input: it must return
//! an error or a value, never panic or read out of bounds. The inputs are valid encodings with
//! bits flipped, bytes overwritten, cut short or extended, and plain random bytes, from a seeded
//! generator, so a failure reproduces exactly (the seed and case are in the message).

use std::path::Path;

use bytes::Bytes;
use openraft::EntryPayload;
use rocketraft_broker::durable_file;
use rocketraft_broker::raft::codec;
use rocketraft_broker::raft::log::store::FlushMode;
use rocketraft_broker::raft::log::store::LogStore;
use rocketraft_broker::raft::log::store::LogStoreConfig;
use rocketraft_broker::raft::types::Entry;
use rocketraft_broker::raft::types::LogId;
use rocketraft_broker::state_machine::command::Command;
use rocketraft_broker::store::CommitLog;
use rocketraft_broker::store::MessageRecord;
use rocketraft_broker::store::Properties;
use rocketraft_broker::store::RecordView;
use rocketraft_broker::store::record;
use rocketraft_domain::properties;
use rocketraft_domain::xorshift::Xorshift;

const SEED: u64 = 0x5EED_F022;
const CASES: usize = 20_000;
const FILE_CASES: usize = 300;

/// Seeded mutations: reproducible from the seed.
trait Mutate {
    /// `valid` damaged one way or another, or random bytes.
    fn mutate(&mut self, valid: &[u8]) -> Vec<u8>;
}

impl Mutate for Xorshift {
    fn mutate(&mut self, valid: &[u8]) -> Vec<u8> {
        let mut bytes = valid.to_vec();
        match self.below(6) {
            0 => {
                for _ in 0..1 + self.below(4) {
                    let at = self.below(bytes.len());
                    bytes[at] ^= 1 << self.below(8);
                }
            }
            1 => {
                let at = self.below(bytes.len());
                let len = self.below(bytes.len() - at + 1);
                let noise = self.bytes(len);
                bytes[at..at + len].copy_from_slice(&noise);
            }
            2 => bytes.truncate(self.below(bytes.len())),
            3 => {
                let extra = self.below(64);
                bytes.extend(self.bytes(extra));
            }
            4 => {
                // A length field claiming the maximum or zero.
                let at = self.below(bytes.len().saturating_sub(4));
                let value = if self.below(2) == 0 { u32::MAX } else { 0 };
                bytes[at..at + 4].copy_from_slice(&value.to_be_bytes());
            }
            _ => {
                let len = self.below(2 * valid.len());
                bytes = self.bytes(len);
            }
        }
        bytes
    }
}

fn sample_record() -> MessageRecord {
    let mut props = Properties::new();
    props.insert("TAGS", "TagA").expect("tags");
    props.insert("KEYS", "order-1 user-7").expect("keys");
    props.insert("UNIQ_KEY", "0A0000010000ABCD").expect("uniq");
    MessageRecord {
        queue_id: 3,
        flag: 0,
        queue_offset: 7,
        physical_offset: 4096,
        sys_flag: 0,
        born_timestamp_ms: 1_700_000_000_000,
        born_host: "10.0.0.1:40000".parse().expect("addr"),
        store_timestamp_ms: 1_700_000_000_123,
        store_host: "10.0.0.2:10911".parse().expect("addr"),
        reconsume_times: 1,
        prepared_transaction_offset: 0,
        body: Bytes::from_static(b"a body long enough to be damaged in many places"),
        topic: "TopicTest".into(),
        properties: props,
    }
}

fn sample_entry(index: u64) -> Entry {
    let records = Bytes::from(sample_record().encode().expect("encode"));
    Entry {
        log_id: LogId::new_term_index(2, index),
        payload: EntryPayload::Normal(Command::Append { records }),
    }
}

fn check<T>(case: usize, what: &str, input: &[u8], decode: impl FnOnce(&[u8]) -> T) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decode(input);
    }));
    assert!(
        result.is_ok(),
        "{what} panicked on case {case} of seed {SEED:#x}: {} bytes {:02x?}",
        input.len(),
        &input[..input.len().min(64)]
    );
}

#[test]
fn records_and_properties_never_panic_on_damaged_bytes() {
    let mut rng = Xorshift::new(SEED);
    let record = sample_record().encode().expect("encode");
    let props = sample_record().properties.encode();
    for case in 0..CASES {
        let damaged = rng.mutate(&record);
        check(case, "record::decode", &damaged, |b| {
            record::decode(b).is_ok()
        });
        check(case, "RecordView::parse", &damaged, |b| {
            RecordView::parse(b).map(|view| view.total_size()).is_ok()
        });
        check(case, "RecordView::property", &damaged, |b| {
            RecordView::parse(b).is_ok_and(|view| view.property("TAGS").is_ok())
        });
        let damaged = rng.mutate(&props);
        check(case, "Properties::decode", &damaged, |b| {
            Properties::decode(b).is_ok()
        });
        check(case, "properties::validate", &damaged, |b| {
            properties::validate(b, "DELAY").is_ok()
        });
        check(case, "properties::pairs", &damaged, |b| {
            properties::pairs(b).count()
        });
    }
}

#[test]
fn raft_entries_and_durable_files_never_panic_on_damaged_bytes() {
    let mut rng = Xorshift::new(SEED ^ 1);
    let entry = codec::encode("entry", &sample_entry(9)).expect("encode");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("state");
    durable_file::write_atomic(&path, b"some durable state").expect("write");
    let framed = std::fs::read(&path).expect("read");
    for case in 0..CASES {
        let damaged = rng.mutate(&entry);
        check(case, "raft entry decode", &damaged, |b| {
            codec::decode::<Entry>("entry", b).is_ok()
        });
        let damaged = rng.mutate(&framed);
        std::fs::write(&path, &damaged).expect("write");
        check(case, "durable_file::read", &damaged, |_| {
            durable_file::read(&path).is_ok()
        });
    }
}

/// Writes `bytes` to `relative` under `root`, creating its directories.
fn with_file(root: &Path, relative: &str, bytes: &[u8]) {
    let path = root.join(relative);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn raft_log_and_commit_log_recovery_never_panic_on_damaged_files() {
    let mut rng = Xorshift::new(SEED ^ 2);
    let log_segment = {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut store = LogStore::open(LogStoreConfig {
            disk: rocketraft_broker::disk::OsDisk::shared(),
            dir: dir.path().to_path_buf(),
            segment_size_bytes: 1 << 20,
            flush: FlushMode::Sync,
            purged_if_mark_damaged: None,
        })
        .expect("open");
        futures::executor::block_on(append_entries(&mut store, (1..=6).map(sample_entry)));
        drop(store);
        std::fs::read(dir.path().join("segments").join(format!("{:020}.log", 1))).expect("read")
    };
    let segment_bytes = 64 * 1024;
    let mut commit_log = Vec::new();
    for offset in 0..6 {
        let mut record = sample_record();
        record.queue_offset = offset;
        record.physical_offset = commit_log.len() as i64;
        commit_log.extend(record.encode().expect("encode"));
    }
    commit_log.resize(segment_bytes, 0);
    for case in 0..FILE_CASES {
        let dir = tempfile::tempdir().expect("tempdir");
        let damaged = rng.mutate(&log_segment);
        with_file(dir.path(), &format!("segments/{:020}.log", 1), &damaged);
        check(case, "raft log recovery", &damaged, |_| {
            LogStore::open(LogStoreConfig {
                disk: rocketraft_broker::disk::OsDisk::shared(),
                dir: dir.path().to_path_buf(),
                segment_size_bytes: 1 << 20,
                flush: FlushMode::Sync,
                purged_if_mark_damaged: None,
            })
            .is_ok()
        });

        let dir = tempfile::tempdir().expect("tempdir");
        let mut damaged = rng.mutate(&commit_log);
        damaged.resize(segment_bytes, 0);
        with_file(dir.path(), &format!("commitlog/{:020}", 0), &damaged);
        check(case, "commit log recovery", &damaged, |_| {
            CommitLog::open(dir.path(), segment_bytes as u64, 0).is_ok()
        });
    }
}

async fn append_entries(store: &mut LogStore, entries: impl IntoIterator<Item = Entry>) {
    use openraft::storage::IOFlushed;
    use openraft::storage::RaftLogStorage;
    use openraft::type_config::TypeConfigExt;
    let (tx, rx) = rocketraft_broker::raft::types::TypeConfig::oneshot();
    store
        .append(
            entries.into_iter().collect::<Vec<_>>(),
            IOFlushed::signal(tx),
        )
        .await
        .expect("append");
    rx.await.expect("callback").expect("flushed");
}
