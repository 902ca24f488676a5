//! The state one broker node holds for its group: the message store and the metadata tables.
//!
//! Written only by the Raft state machine (applying committed commands, or installing a
//! snapshot); read by the broker API. Locks are `std::sync` and never held across `.await`.

use std::sync::RwLock;
use std::sync::RwLockReadGuard;
use std::sync::RwLockWriteGuard;

use tokio::sync::watch;

use crate::metadata::Metadata;
use crate::store::MessageStore;

pub struct GroupState {
    store: RwLock<MessageStore>,
    metadata: RwLock<Metadata>,
    /// Bumped whenever the topic table changes, so the leader re-registers its routes.
    topics_version: watch::Sender<u64>,
    /// Bumped whenever messages are applied, so held pulls look again.
    messages_version: watch::Sender<u64>,
}

impl GroupState {
    pub fn new(store: MessageStore, metadata: Metadata) -> GroupState {
        GroupState {
            store: RwLock::new(store),
            metadata: RwLock::new(metadata),
            topics_version: watch::Sender::new(0),
            messages_version: watch::Sender::new(0),
        }
    }

    /// Read access to the store. A poisoned lock means a writer panicked mid-apply: the node
    /// cannot trust its state, so it stops rather than serve it.
    pub fn store(&self) -> RwLockReadGuard<'_, MessageStore> {
        self.store
            .read()
            .unwrap_or_else(|_| panic!("message store lock poisoned"))
    }

    pub fn store_mut(&self) -> RwLockWriteGuard<'_, MessageStore> {
        self.store
            .write()
            .unwrap_or_else(|_| panic!("message store lock poisoned"))
    }

    pub fn metadata(&self) -> RwLockReadGuard<'_, Metadata> {
        self.metadata
            .read()
            .unwrap_or_else(|_| panic!("metadata lock poisoned"))
    }

    pub fn metadata_mut(&self) -> RwLockWriteGuard<'_, Metadata> {
        self.metadata
            .write()
            .unwrap_or_else(|_| panic!("metadata lock poisoned"))
    }

    /// Tells watchers the topic table changed.
    pub fn topics_changed(&self) {
        self.topics_version.send_modify(|version| *version += 1);
    }

    pub fn watch_topics(&self) -> watch::Receiver<u64> {
        self.topics_version.subscribe()
    }

    /// Tells held pulls that messages were applied.
    pub fn messages_arrived(&self) {
        self.messages_version.send_modify(|version| *version += 1);
    }

    pub fn watch_messages(&self) -> watch::Receiver<u64> {
        self.messages_version.subscribe()
    }
}
