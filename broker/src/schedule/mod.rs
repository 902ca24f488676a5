//! Delayed delivery: [`delayed`] parks and restores delayed messages;
//! [`service`] is the leader-only ScheduleMessageService that delivers them when due.

pub mod delayed;
pub mod service;
