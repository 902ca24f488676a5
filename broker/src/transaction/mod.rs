//! Transactional messages (RocketMQ's two-phase send): a producer sends a half message
//! (`TRAN_MSG=true`, its producer group in `PGROUP`), runs its local transaction, then ends
//! the transaction with `EndTransaction`: commit makes the message visible in its topic,
//! rollback drops it. A transaction left unresolved is checked back with a producer of the
//! group.
//!
//! - [`half`]: how a half message is parked in `RMQ_SYS_TRANS_HALF_TOPIC` (invisible), how
//!   it is restored on commit, and the op records of `RMQ_SYS_TRANS_OP_HALF_TOPIC` that
//!   say how a transaction ended (one per transaction, keyed by the half message's id).
//! - [`checks`]: the leader's producers watching for check-backs, per producer group.
//! - The check-back scan runs in the leader's schedule service
//!   ([`crate::schedule::service`]): half queues are delay queues whose entries are due a
//!   timeout after they were stored.
//!
//! Everything a transaction changes goes through Raft: the half message, its end (the
//! restored message and the op record in one `EndTransaction` entry, applied only if no op
//! record of the transaction exists yet, so it ends once), and each check-back (a copy of the
//! half message with one more check, or, after the last, a `discard` op, with the scan's
//! progress, compare and set). After a failover the new leader neither loses a committed
//! message nor delivers a rolled-back one.

pub mod checks;
pub mod half;

use std::time::Duration;

/// How long after a half message is stored its transaction is first checked back
/// (RocketMQ's `transactionTimeOut`).
pub const TRANSACTION_TIMEOUT_DEFAULT: Duration = Duration::from_secs(6);
/// How long after each check-back the next comes (RocketMQ's `transactionCheckInterval`).
pub const TRANSACTION_CHECK_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// Check-backs before an unresolved transaction is discarded (RocketMQ's
/// `transactionCheckMax`).
pub const TRANSACTION_CHECK_MAX_DEFAULT: u32 = 15;

/// The longest `transaction_timeout_ms` or `transaction_check_interval_ms`.
pub const TRANSACTION_WAIT_MAX: Duration = Duration::from_secs(24 * 3600);
/// The most check-backs a broker may be configured to make.
pub const TRANSACTION_CHECK_MAX_LIMIT: u32 = 1000;

/// When the leader checks unresolved transactions back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckSettings {
    pub timeout: Duration,
    pub interval: Duration,
    pub max_checks: u32,
}

impl Default for CheckSettings {
    fn default() -> Self {
        CheckSettings {
            timeout: TRANSACTION_TIMEOUT_DEFAULT,
            interval: TRANSACTION_CHECK_INTERVAL_DEFAULT,
            max_checks: TRANSACTION_CHECK_MAX_DEFAULT,
        }
    }
}
