//! Which seeds a seeded simulation runs, one scheme for every simulation: `SIM_SEED=N`
//! replays seed `N` alone, `SIM_SEEDS=N` runs seeds `0..N`, and without either a simulation
//! runs its own default count. A failure names its seed and the command that replays it.

use std::ops::Range;

/// Replays one seed.
pub(crate) const SEED_ENV: &str = "SIM_SEED";
/// Runs this many seeds, from 0.
pub(crate) const SEEDS_ENV: &str = "SIM_SEEDS";

/// The seeds to run: as the environment says, else `0..default_count`.
pub(crate) fn seeds(default_count: u64) -> Range<u64> {
    let env = |name| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    match (env(SEED_ENV), env(SEEDS_ENV)) {
        (Some(seed), _) => seed..seed + 1,
        (None, count) => 0..count.unwrap_or(default_count),
    }
}

/// How to replay `seed` of the simulation whose test names contain `test_filter`.
pub(crate) fn replay(seed: u64, test_filter: &str) -> String {
    format!("replay: {SEED_ENV}={seed} cargo test -p rocketraft-broker {test_filter}")
}
