//! Test doubles and helpers the broker's simulations share: [`sim_disk`] (a disk that loses
//! what was not synced when its power is cut, and rots bytes on demand), [`durable_images`]
//! (what a power loss leaves of the store's real files), [`seeds`] (which
//! seeds a simulation runs, chosen one way for all of them), [`counters`] (what a sweep
//! injected and checked, and the assertion that every class fired) and [`sim_network`] (the
//! group simulation's in-process network, faulted as its seed says), and [`sim_dir`] (where a
//! simulation's real files live: in memory when the machine allows).

pub(crate) mod counters;
pub(crate) mod durable_images;
pub(crate) mod seeds;
pub(crate) mod sim_dir;
pub(crate) mod sim_disk;
pub(crate) mod sim_network;
