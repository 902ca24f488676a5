//! Delayed delivery: [`delayed`] parks and restores messages of a delay level; [`timer`]
//! parks timer messages in the timer wheel; [`service`] is the leader-only
//! ScheduleMessageService that delivers both when due; [`pending`] finds the oldest entry it
//! still owes, which retention keeps; [`delay_levels`]: the configured delays.

pub mod delay_levels;
pub mod delayed;
pub mod pending;
pub mod service;
pub mod timer;
