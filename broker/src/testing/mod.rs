//! Test doubles and helpers the broker's simulations share: [`sim_disk`] (a disk that loses
//! what was not synced when its power is cut, and rots bytes on demand), [`seeds`] (which
//! seeds a simulation runs, chosen one way for all of them) and [`counters`] (what a sweep
//! injected and checked, and the assertion that every class fired).

pub(crate) mod counters;
pub(crate) mod seeds;
pub(crate) mod sim_disk;
