//! openraft's storage conformance suite against the real on-disk Raft log and state machine
//! (fresh temp dir per case, sync flush).

use std::time::Duration;

use openraft::StorageError;
use openraft::testing::log::StoreBuilder;
use openraft::testing::log::Suite;
use openraft::type_config::TypeConfigExt;
use rocketraft_broker::raft::log::store::FlushMode;
use rocketraft_broker::raft::log::store::LogStore;
use rocketraft_broker::raft::log::store::LogStoreConfig;
use rocketraft_broker::raft::types::TypeConfig;
use rocketraft_broker::state_machine::StateMachine;
use rocketraft_broker::store::MessageStore;
use rocketraft_broker::store::StoreConfig;
use tempfile::TempDir;

struct DiskStoreBuilder;

fn io_error(error: impl std::error::Error + Send + Sync + 'static) -> StorageError<TypeConfig> {
    StorageError::read(TypeConfig::err_from_error(&error))
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for DiskStoreBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().map_err(io_error)?;
        let mut store_config = StoreConfig::new(dir.path().join("store"));
        store_config.commit_log_segment_bytes = 64 * 1024;
        let (store, _) = MessageStore::open(store_config).map_err(io_error)?;
        let (state_machine, _group) =
            StateMachine::open(&dir.path().join("state"), store, Duration::from_millis(10))
                .map_err(io_error)?;
        let log_store = LogStore::open(LogStoreConfig {
            disk: rocketraft_broker::disk::OsDisk::shared(),
            dir: dir.path().join("log"),
            segment_size_bytes: 4096,
            flush: FlushMode::Sync,
            purged_if_mark_damaged: None,
        })
        .map_err(io_error)?;
        Ok((dir, log_store, state_machine))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_storage_passes_openraft_suite() -> Result<(), StorageError<TypeConfig>> {
    Suite::test_all(DiskStoreBuilder).await?;
    Ok(())
}
