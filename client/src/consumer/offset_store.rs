//! Consumer progress: the next offset to consume of each assigned queue, kept in memory and
//! persisted every few seconds and whenever a queue is released.
//!
//! Clustering consumers keep offsets on the broker groups (committed through Raft, so a
//! failover neither loses nor rewinds them); broadcasting consumers each keep their own in a
//! local file, written atomically (temp file, fsync, rename). Offsets only move forward
//! while a queue is held.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rocketraft_proto::broker as pb;

use crate::brokers::Brokers;
use crate::consumer::ConsumerError;
use crate::route::MessageQueue;

/// How long one offset call to a group may take, retries included.
const OFFSET_CALL_TIMEOUT: Duration = Duration::from_secs(3);

pub enum OffsetBackend {
    /// On the broker groups, as `consumer_group`'s committed offsets.
    Broker { consumer_group: String },
    /// In a JSON file of this consumer.
    LocalFile { path: PathBuf },
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: i64,
    persisted: bool,
}

pub struct OffsetStore {
    backend: OffsetBackend,
    table: Mutex<HashMap<MessageQueue, Entry>>,
    /// What the local file held at start (broadcasting only).
    stored: HashMap<MessageQueue, i64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredOffset {
    #[serde(flatten)]
    queue: MessageQueue,
    offset: i64,
}

impl OffsetStore {
    pub fn open(backend: OffsetBackend) -> Result<OffsetStore, ConsumerError> {
        let stored = match &backend {
            OffsetBackend::Broker { .. } => HashMap::new(),
            OffsetBackend::LocalFile { path } => read_file(path)?,
        };
        Ok(OffsetStore {
            backend,
            table: Mutex::new(HashMap::new()),
            stored,
        })
    }

    /// The committed offset of `queue`, or `None` if the group never committed one.
    pub async fn read_committed(
        &self,
        brokers: &Brokers,
        queue: &MessageQueue,
    ) -> Result<Option<i64>, ConsumerError> {
        match &self.backend {
            OffsetBackend::LocalFile { .. } => Ok(self.stored.get(queue).copied()),
            OffsetBackend::Broker { consumer_group } => {
                let request = pb::QueryOffsetRequest {
                    group: consumer_group.clone(),
                    topic: queue.topic.clone(),
                    queue_id: queue.queue_id,
                };
                brokers
                    .on_leader(&queue.group, OFFSET_CALL_TIMEOUT, |mut client, _repeat| {
                        let request = request.clone();
                        async move { Ok(client.query_offset(request).await?.into_inner().offset) }
                    })
                    .await
                    .map_err(ConsumerError::from)
            }
        }
    }

    /// Starts tracking `queue` from `offset`. The start is persisted too: a group that
    /// starts from the last offset must not start from a later one after a rebalance.
    pub fn track(&self, queue: &MessageQueue, offset: i64) {
        self.lock().insert(
            queue.clone(),
            Entry {
                offset,
                persisted: false,
            },
        );
    }

    /// Moves `queue`'s offset forward to `offset`; an older offset is ignored.
    pub fn update(&self, queue: &MessageQueue, offset: i64) {
        if let Some(entry) = self.lock().get_mut(queue)
            && offset > entry.offset
        {
            entry.offset = offset;
            entry.persisted = false;
        }
    }

    /// Persists `queue`'s offset (moved to `offset` if that is newer) and stops tracking it.
    pub async fn release(
        &self,
        brokers: &Brokers,
        queue: &MessageQueue,
        offset: i64,
    ) -> Result<(), ConsumerError> {
        self.update(queue, offset);
        let result = self.persist(brokers, Some(queue)).await;
        self.lock().remove(queue);
        result
    }

    /// Stops tracking `queue` without persisting its offset (its lock was lost: another
    /// member's progress may be ahead of it).
    pub fn forget(&self, queue: &MessageQueue) {
        self.lock().remove(queue);
    }

    /// Persists every offset that moved since it was last persisted.
    pub async fn persist_all(&self, brokers: &Brokers) -> Result<(), ConsumerError> {
        self.persist(brokers, None).await
    }

    async fn persist(
        &self,
        brokers: &Brokers,
        only: Option<&MessageQueue>,
    ) -> Result<(), ConsumerError> {
        let dirty: Vec<(MessageQueue, i64)> = self
            .lock()
            .iter()
            .filter(|(queue, entry)| !entry.persisted && only.is_none_or(|only| only == *queue))
            .map(|(queue, entry)| (queue.clone(), entry.offset))
            .collect();
        if dirty.is_empty() {
            return Ok(());
        }
        match &self.backend {
            OffsetBackend::Broker { consumer_group } => {
                commit_to_groups(brokers, consumer_group, &dirty).await?;
            }
            OffsetBackend::LocalFile { path } => {
                let mut all: BTreeMap<MessageQueue, i64> = self
                    .stored
                    .iter()
                    .map(|(queue, offset)| (queue.clone(), *offset))
                    .collect();
                all.extend(
                    self.lock()
                        .iter()
                        .map(|(queue, entry)| (queue.clone(), entry.offset)),
                );
                write_file(path, &all)?;
            }
        }
        let mut table = self.lock();
        for (queue, offset) in dirty {
            if let Some(entry) = table.get_mut(&queue)
                && entry.offset == offset
            {
                entry.persisted = true;
            }
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MessageQueue, Entry>> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One `CommitOffsets` per broker group; every group is tried, the first failure reported.
async fn commit_to_groups(
    brokers: &Brokers,
    consumer_group: &str,
    offsets: &[(MessageQueue, i64)],
) -> Result<(), ConsumerError> {
    let mut by_group: BTreeMap<&str, Vec<pb::QueueOffsetEntry>> = BTreeMap::new();
    for (queue, offset) in offsets {
        by_group
            .entry(queue.group.as_str())
            .or_default()
            .push(pb::QueueOffsetEntry {
                topic: queue.topic.clone(),
                queue_id: queue.queue_id,
                offset: *offset,
            });
    }
    let mut first_error = None;
    for (group, entries) in by_group {
        let request = pb::CommitOffsetsRequest {
            group: consumer_group.to_owned(),
            offsets: entries,
        };
        let committed = brokers
            .on_leader(group, OFFSET_CALL_TIMEOUT, |mut client, _repeat| {
                let request = request.clone();
                async move { client.commit_offsets(request).await.map(|_| ()) }
            })
            .await;
        if let Err(error) = committed {
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), |error| Err(error.into()))
}

fn read_file(path: &PathBuf) -> Result<HashMap<MessageQueue, i64>, ConsumerError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(source) => {
            return Err(ConsumerError::OffsetFile {
                path: path.clone(),
                reason: source.to_string(),
            });
        }
    };
    let stored: Vec<StoredOffset> =
        serde_json::from_slice(&bytes).map_err(|error| ConsumerError::OffsetFile {
            path: path.clone(),
            reason: error.to_string(),
        })?;
    Ok(stored
        .into_iter()
        .map(|stored| (stored.queue, stored.offset))
        .collect())
}

fn write_file(path: &PathBuf, offsets: &BTreeMap<MessageQueue, i64>) -> Result<(), ConsumerError> {
    let failed = |error: std::io::Error| ConsumerError::OffsetFile {
        path: path.clone(),
        reason: error.to_string(),
    };
    let stored: Vec<StoredOffset> = offsets
        .iter()
        .map(|(queue, offset)| StoredOffset {
            queue: queue.clone(),
            offset: *offset,
        })
        .collect();
    let json = serde_json::to_vec_pretty(&stored).map_err(|error| ConsumerError::OffsetFile {
        path: path.clone(),
        reason: error.to_string(),
    })?;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir).map_err(failed)?;
    let temp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temp).map_err(failed)?;
    file.write_all(&json).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&temp, path).map_err(failed)?;
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::RouteCache;

    fn queue(queue_id: i32) -> MessageQueue {
        MessageQueue {
            topic: "t".into(),
            group: "g".into(),
            queue_id,
        }
    }

    #[tokio::test]
    async fn local_offsets_survive_a_restart_and_only_move_forward() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("offsets.json");
        let brokers = Brokers::new(
            RouteCache::new(Vec::new(), Duration::ZERO),
            crate::connector::Connector::plain(),
        );
        let backend = || OffsetBackend::LocalFile { path: path.clone() };

        let store = OffsetStore::open(backend()).expect("open");
        assert_eq!(
            store.read_committed(&brokers, &queue(0)).await.ok(),
            Some(None)
        );
        store.track(&queue(0), 0);
        store.track(&queue(1), 0);
        store.update(&queue(0), 7);
        store.update(&queue(0), 5);
        store.update(&queue(1), 3);
        store.persist_all(&brokers).await.expect("persist");
        store
            .release(&brokers, &queue(1), 4)
            .await
            .expect("release");

        let reopened = OffsetStore::open(backend()).expect("reopen");
        assert_eq!(
            reopened.read_committed(&brokers, &queue(0)).await.ok(),
            Some(Some(7))
        );
        assert_eq!(
            reopened.read_committed(&brokers, &queue(1)).await.ok(),
            Some(Some(4))
        );

        std::fs::write(&path, b"{ not json").expect("corrupt");
        assert!(matches!(
            OffsetStore::open(backend()),
            Err(ConsumerError::OffsetFile { .. })
        ));
    }
}
