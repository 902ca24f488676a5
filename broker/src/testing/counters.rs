//! `Counters`: what a simulation sweep injected and checked, by class. Each simulation
//! declares its classes; a sweep of at least its default seed count asserts that every one
//! fired, since a fault class that never fired was not tested, however green the run.
//!
//! Invariant: only a declared class is counted (an undeclared one panics at once, so a
//! renamed class cannot silently stop being checked).

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

/// Counts by class, for one seed or a whole sweep.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    counts: BTreeMap<&'static str, u64>,
}

impl Counters {
    /// Zero of each of `classes`.
    pub(crate) fn of(classes: &[&'static str]) -> Counters {
        Counters {
            counts: classes.iter().map(|class| (*class, 0)).collect(),
        }
    }

    /// Counts `count` more of `class`.
    pub(crate) fn add(&mut self, class: &'static str, count: u64) {
        *self
            .counts
            .get_mut(class)
            .unwrap_or_else(|| panic!("{class:?} is not a declared class")) += count;
    }

    /// Counts one more of `class`.
    pub(crate) fn bump(&mut self, class: &'static str) {
        self.add(class, 1);
    }

    /// How many of `class` were counted.
    pub(crate) fn get(&self, class: &'static str) -> u64 {
        self.counts.get(class).copied().unwrap_or(0)
    }

    /// Adds every count of `other`.
    pub(crate) fn merge(&mut self, other: &Counters) {
        for (class, count) in &other.counts {
            self.add(class, *count);
        }
    }

    /// Checks a sweep over `seeds`: once it ran at least `full_sweep` seeds, every class must
    /// have fired. A shorter run (a replay of one seed) checks nothing here.
    pub(crate) fn assert_every_class_fired(&self, seeds: &Range<u64>, full_sweep: u64) {
        if seeds.end.saturating_sub(seeds.start) < full_sweep {
            return;
        }
        let silent: Vec<&str> = self
            .counts
            .iter()
            .filter(|(_, count)| **count == 0)
            .map(|(class, _)| *class)
            .collect();
        assert!(
            silent.is_empty(),
            "seeds {seeds:?} never fired {silent:?}, so never tested them ({self})"
        );
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (class, count) in &self.counts {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{class} {count}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLASSES: &[&str] = &["crashes", "flips"];

    #[test]
    fn a_full_sweep_that_never_fired_a_class_fails_and_names_it() {
        let mut sweep = Counters::of(CLASSES);
        let mut seed = Counters::of(CLASSES);
        seed.bump("crashes");
        sweep.merge(&seed);
        sweep.merge(&seed);
        assert_eq!(sweep.get("crashes"), 2);
        assert_eq!(sweep.to_string(), "crashes 2, flips 0");
        sweep.assert_every_class_fired(&(0..1), 10);
        let failed = std::panic::catch_unwind(|| sweep.assert_every_class_fired(&(0..10), 10))
            .expect_err("flips never fired");
        let message = failed.downcast_ref::<String>().expect("a message");
        assert!(message.contains("never fired [\"flips\"]"), "{message}");
        sweep.add("flips", 3);
        sweep.assert_every_class_fired(&(0..10), 10);
    }

    #[test]
    #[should_panic(expected = "not a declared class")]
    fn an_undeclared_class_is_refused() {
        Counters::of(CLASSES).bump("typo");
    }
}
