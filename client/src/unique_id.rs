//! Message unique ids (`UNIQ_KEY`): host, process, a random start nonce and a counter.
//!
//! Two producers in containers that share a host name and a pid still differ in their nonce,
//! which comes from the OS's randomness (std's `RandomState` keys); within one producer the
//! counter never repeats. Ids are 48 upper-case hex characters.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::hash::Hasher;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

#[derive(Debug)]
pub struct UniqueIdGenerator {
    /// Host hash (4 bytes), pid (4 bytes) and a random nonce (8 bytes), as hex.
    prefix: String,
    counter: AtomicU64,
}

impl UniqueIdGenerator {
    pub fn new() -> UniqueIdGenerator {
        let host = host_hash();
        let pid = std::process::id();
        let nonce = random_u64();
        UniqueIdGenerator {
            prefix: format!("{host:08X}{pid:08X}{nonce:016X}"),
            counter: AtomicU64::new(0),
        }
    }

    pub fn next_id(&self) -> String {
        let count = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{}{count:016X}", self.prefix)
    }
}

impl Default for UniqueIdGenerator {
    fn default() -> Self {
        UniqueIdGenerator::new()
    }
}

/// 64 random bits: std seeds each `RandomState` from the OS's randomness.
fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos()),
    );
    hasher.finish()
}

fn host_hash() -> u32 {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    // FNV-1a: stable across runs and Rust versions.
    name.trim().bytes().fold(0x811C_9DC5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_never_repeat_within_or_across_generators_of_one_process() {
        let first = UniqueIdGenerator::new();
        let second = UniqueIdGenerator::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            assert!(seen.insert(first.next_id()));
            assert!(
                seen.insert(second.next_id()),
                "same host and pid, different nonce"
            );
        }
        assert!(seen.iter().all(|id| id.len() == 48));
    }
}
