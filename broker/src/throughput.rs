//! A node's throughput over the last quarter hour: the messages it stored (sends it led) and
//! served (pulls), counted as they go and sampled every [`SAMPLE_PERIOD`] into a ring of
//! [`SAMPLES_KEPT`], in memory only. It is what RocketMQ's runtime info calls `putTps` and
//! `getTransferedTps`, over 10 s, 1 min and 10 min.
//!
//! Invariant: a rate is the difference of two samples over the time between them, so it is
//! exact for the messages counted whatever the sampling jitter; a window longer than the
//! history is reported over the history there is (0 before the second sample).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the totals are sampled.
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(10);
/// Samples kept: a quarter hour, and the sample it starts from.
pub const SAMPLES_KEPT: usize = 91;
/// The windows rates are reported over, as RocketMQ reports them.
pub const RATE_WINDOWS: [Duration; 3] = [
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(600),
];

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    stored: u64,
    served: u64,
}

/// Messages per second over each of [`RATE_WINDOWS`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub stored_per_s: [f64; 3],
    pub served_per_s: [f64; 3],
}

#[derive(Debug, Default)]
pub struct Throughput {
    stored: AtomicU64,
    served: AtomicU64,
    samples: Mutex<VecDeque<Sample>>,
}

impl Throughput {
    /// `messages` were stored by a send this node led.
    pub fn stored(&self, messages: usize) {
        self.stored.fetch_add(messages as u64, Ordering::Relaxed);
    }

    /// `messages` were served by a pull.
    pub fn served(&self, messages: usize) {
        self.served.fetch_add(messages as u64, Ordering::Relaxed);
    }

    /// Messages stored and served since the node started.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.stored.load(Ordering::Relaxed),
            self.served.load(Ordering::Relaxed),
        )
    }

    /// Takes a sample of the totals at `now`, dropping the oldest past [`SAMPLES_KEPT`].
    pub fn sample(&self, now: Instant) {
        let (stored, served) = self.totals();
        let mut samples = self.lock();
        if samples.len() == SAMPLES_KEPT {
            samples.pop_front();
        }
        samples.push_back(Sample {
            at: now,
            stored,
            served,
        });
    }

    /// The rates over each of [`RATE_WINDOWS`] ending at the latest sample.
    pub fn rates(&self) -> Rates {
        let samples = self.lock();
        let mut rates = Rates::default();
        let Some(latest) = samples.back() else {
            return rates;
        };
        for (index, window) in RATE_WINDOWS.into_iter().enumerate() {
            // The newest sample at least `window` before the latest, or else the oldest.
            let since = samples
                .iter()
                .rev()
                .find(|sample| latest.at.duration_since(sample.at) >= window)
                .or(samples.front())
                .copied()
                .unwrap_or(*latest);
            let seconds = latest.at.duration_since(since.at).as_secs_f64();
            if seconds > 0.0 {
                rates.stored_per_s[index] = (latest.stored - since.stored) as f64 / seconds;
                rates.served_per_s[index] = (latest.served - since.served) as f64 / seconds;
            }
        }
        rates
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Sample>> {
        self.samples
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Samples `throughput` every [`SAMPLE_PERIOD`] until `shutdown`.
pub async fn run_sampling(throughput: std::sync::Arc<Throughput>, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(SAMPLE_PERIOD);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            tick = ticks.tick() => throughput.sample(tick),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_over_each_window_or_the_history_there_is() {
        let throughput = Throughput::default();
        let start = Instant::now();
        assert_eq!(throughput.rates(), Rates::default(), "no sample yet");
        throughput.sample(start);
        assert_eq!(throughput.rates(), Rates::default(), "one sample: no rate");
        // 100 stored and 50 served in every 10 s, for 2 minutes.
        for step in 1..=12 {
            throughput.stored(100);
            throughput.served(50);
            throughput.sample(start + SAMPLE_PERIOD * step);
        }
        let rates = throughput.rates();
        assert_eq!(rates.stored_per_s, [10.0, 10.0, 10.0], "600 s: over 120 s");
        assert_eq!(rates.served_per_s, [5.0, 5.0, 5.0]);
        // A burst in the last 10 s shows in the short window first.
        throughput.stored(1000);
        throughput.sample(start + SAMPLE_PERIOD * 13);
        let rates = throughput.rates();
        assert_eq!(rates.stored_per_s[0], 100.0);
        assert_eq!(rates.stored_per_s[1], (5.0 * 100.0 + 1000.0) / 60.0);
        assert_eq!(throughput.totals(), (2200, 600));
    }

    #[test]
    fn the_ring_keeps_a_quarter_hour() {
        let throughput = Throughput::default();
        let start = Instant::now();
        for step in 0..(SAMPLES_KEPT as u32 + 30) {
            throughput.stored(10);
            throughput.sample(start + SAMPLE_PERIOD * step);
        }
        assert_eq!(throughput.lock().len(), SAMPLES_KEPT);
        assert_eq!(throughput.rates().stored_per_s, [1.0, 1.0, 1.0]);
    }
}
