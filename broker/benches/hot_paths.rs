//! Per-function benchmarks of the broker's hot paths, so a regression shows where it is:
//! the CommitLog record codec, the Raft entry codec, ConsumeQueue lookups and the apply path
//! (a batch of records into the store). Shaped like W1: 1 KiB bodies with a `UNIQ_KEY`,
//! 64 records per batch (a group-committed entry under load).
//!
//!     cargo bench -p rocketraft-broker --bench hot_paths
//!
//! End-to-end throughput is `rocketraft-bench` and `bench/run-baselines.sh`.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use criterion::Criterion;
use criterion::Throughput;
use criterion::criterion_group;
use criterion::criterion_main;
use openraft::EntryPayload;
use rocketraft_broker::raft::codec;
use rocketraft_broker::raft::types::Entry;
use rocketraft_broker::raft::types::LogId;
use rocketraft_broker::state_machine::command::Command;
use rocketraft_broker::store::MessageStore;
use rocketraft_broker::store::StoreConfig;
use rocketraft_broker::store::properties::Properties;
use rocketraft_broker::store::properties::UNIQ_KEY;
use rocketraft_broker::store::record::MessageRecord;
use rocketraft_broker::store::record::RecordView;

const TOPIC: &str = "W1";
const BODY_BYTES: usize = 1024;
const BATCH: usize = 64;
/// The apply benchmark cuts its store back to empty past this many CommitLog bytes, so a
/// long run does not fill the disk.
const APPLY_STORE_BYTES_MAX: i64 = 256 * 1024 * 1024;

fn message(i: usize) -> MessageRecord {
    let host: SocketAddr = "127.0.0.1:10911".parse().expect("address");
    let mut properties = Properties::new();
    properties
        .insert(UNIQ_KEY, format!("7F00000100002A9F00000000{i:08X}"))
        .expect("property");
    MessageRecord {
        queue_id: (i % 8) as i32,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: 1_700_000_000_000,
        born_host: host,
        store_timestamp_ms: 1_700_000_000_001,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: Bytes::from(vec![b'x'; BODY_BYTES]),
        topic: TOPIC.into(),
        properties,
    }
}

fn batch(from: usize) -> Vec<u8> {
    let mut records = Vec::new();
    for i in from..from + BATCH {
        message(i).encode_into(&mut records).expect("encode");
    }
    records
}

/// Splits concatenated records.
fn records(mut bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = RecordView::parse(bytes).expect("record").total_size();
        out.push(&bytes[..len]);
        bytes = &bytes[len..];
    }
    out
}

fn record_codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("record");
    group.throughput(Throughput::Elements(1));
    let record = message(1);
    let mut out = Vec::with_capacity(2 * BODY_BYTES);
    group.bench_function("encode_1k", |b| {
        b.iter(|| {
            out.clear();
            black_box(&record).encode_into(&mut out).expect("encode");
        })
    });
    let encoded = record.encode().expect("encode");
    group.bench_function("parse_1k", |b| {
        b.iter(|| {
            RecordView::parse(black_box(&encoded))
                .expect("parse")
                .total_size()
        })
    });
    group.finish();
}

fn raft_entry_codec(c: &mut Criterion) {
    let mut group = c.benchmark_group("raft_entry");
    group.throughput(Throughput::Elements(BATCH as u64));
    let entry = Entry {
        log_id: LogId::new_term_index(3, 1000),
        payload: EntryPayload::Normal(Command::Append {
            records: Bytes::from(batch(0)),
        }),
    };
    group.bench_function("encode_64x1k", |b| {
        b.iter(|| codec::encode("entry", black_box(&entry)).expect("encode"))
    });
    let encoded = Bytes::from(codec::encode("entry", &entry).expect("encode"));
    group.bench_function("decode_shared_64x1k", |b| {
        b.iter(|| codec::decode_shared::<Entry>("entry", black_box(&encoded)).expect("decode"))
    });
    group.finish();
}

fn store_in(dir: &std::path::Path) -> MessageStore {
    MessageStore::open(StoreConfig::new(dir))
        .expect("open store")
        .0
}

fn consume_queue_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = store_in(dir.path());
    for from in (0..100_000).step_by(BATCH) {
        let bytes = batch(from);
        store
            .append_batch(|appends| {
                for record in records(&bytes) {
                    appends.append(record)?;
                }
                Ok::<_, rocketraft_broker::store::StoreError>(())
            })
            .expect("append");
    }
    let (_, max) = store.consume_queue_offsets(TOPIC, 0);
    let mut group = c.benchmark_group("consume_queue");
    group.throughput(Throughput::Elements(32));
    let mut at = 0;
    group.bench_function("units_32", |b| {
        b.iter(|| {
            at = (at + 32) % (max - 32);
            store.consume_queue_units(TOPIC, 0, at).take(32).count()
        })
    });
    group.finish();
}

fn apply(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = store_in(dir.path());
    let bytes = batch(0);
    let records = records(&bytes);
    let mut group = c.benchmark_group("apply");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("append_batch_64x1k", |b| {
        b.iter_custom(|iterations| {
            let mut took = Duration::ZERO;
            for _ in 0..iterations {
                if store.commit_log_max_offset() > APPLY_STORE_BYTES_MAX {
                    store.truncate(0).expect("cut back");
                }
                let started = Instant::now();
                store
                    .append_batch(|appends| {
                        for record in &records {
                            appends.append(record)?;
                        }
                        Ok::<_, rocketraft_broker::store::StoreError>(())
                    })
                    .expect("append");
                took += started.elapsed();
            }
            took
        })
    });
    group.finish();
}

criterion_group!(
    hot_paths,
    record_codec,
    raft_entry_codec,
    consume_queue_lookup,
    apply
);
criterion_main!(hot_paths);
