//! Delay levels: level `L` (1-based) delays a message by the `L`-th duration of
//! the configured list. A level above the last is clamped to the last; level 0 means no delay.

use std::time::Duration;

/// RocketMQ's default levels.
pub const DELAY_LEVELS_DEFAULT: &str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";
/// Levels a broker may define at most.
pub const DELAY_LEVEL_COUNT_MAX: usize = 64;
/// The longest delay one level may have.
pub const DELAY_MAX: Duration = Duration::from_secs(30 * 24 * 3600);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayLevels {
    delays: Vec<Duration>,
}

impl DelayLevels {
    /// Parses space-separated durations with units `s`, `m`, `h` or `d` (`"1s 5s 2m"`).
    pub fn parse(text: &str) -> Result<DelayLevels, String> {
        let delays = text
            .split_whitespace()
            .map(parse_duration)
            .collect::<Result<Vec<Duration>, String>>()?;
        if delays.is_empty() {
            return Err("at least one level is needed".into());
        }
        if delays.len() > DELAY_LEVEL_COUNT_MAX {
            return Err(format!(
                "at most {DELAY_LEVEL_COUNT_MAX} levels, got {}",
                delays.len()
            ));
        }
        Ok(DelayLevels { delays })
    }

    /// The highest level.
    pub fn max_level(&self) -> u32 {
        self.delays.len() as u32
    }

    /// `level` clamped to `1..=max_level`; `None` for level 0 (no delay).
    pub fn clamp(&self, level: u32) -> Option<u32> {
        (level > 0).then(|| level.min(self.max_level()))
    }

    /// Every level's delay, lowest level first.
    pub fn delays(&self) -> &[Duration] {
        &self.delays
    }

    /// The delay of `level` (clamped); zero for level 0.
    pub fn delay(&self, level: u32) -> Duration {
        self.clamp(level)
            .map_or(Duration::ZERO, |level| self.delays[level as usize - 1])
    }
}

impl Default for DelayLevels {
    fn default() -> Self {
        DelayLevels::parse(DELAY_LEVELS_DEFAULT).unwrap_or_else(|_| DelayLevels {
            delays: vec![Duration::from_secs(1)],
        })
    }
}

fn parse_duration(word: &str) -> Result<Duration, String> {
    let Some((split, _)) = word.char_indices().last() else {
        return Err("an empty delay".into());
    };
    let (number, unit) = word.split_at(split);
    let seconds_per_unit = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{word:?}: the unit must be s, m, h or d")),
    };
    let count: u64 = number
        .parse()
        .map_err(|_| format!("{word:?}: expected a whole number before the unit"))?;
    let delay = Duration::from_secs(count.saturating_mul(seconds_per_unit));
    if delay.is_zero() || delay > DELAY_MAX {
        return Err(format!("{word:?}: a delay is more than 0 and at most 30d"));
    }
    Ok(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_levels_are_rocketmqs() {
        let levels = DelayLevels::default();
        assert_eq!(levels.max_level(), 18);
        assert_eq!(levels.delay(1), Duration::from_secs(1));
        assert_eq!(levels.delay(5), Duration::from_secs(60));
        assert_eq!(levels.delay(18), Duration::from_secs(7200));
        assert_eq!(levels.delay(99), Duration::from_secs(7200), "clamped");
        assert_eq!(levels.delay(0), Duration::ZERO);
        assert_eq!(levels.clamp(0), None);
        assert_eq!(levels.clamp(19), Some(18));
    }

    #[test]
    fn bad_level_strings_say_why() {
        for bad in ["", "1", "1x", "s", "-1s", "0s", "1.5s", "31d", "5é"] {
            assert!(DelayLevels::parse(bad).is_err(), "{bad:?}");
        }
        let too_many = vec!["1s"; DELAY_LEVEL_COUNT_MAX + 1].join(" ");
        assert!(DelayLevels::parse(&too_many).is_err());
        let most = vec!["1s"; DELAY_LEVEL_COUNT_MAX].join(" ");
        assert!(DelayLevels::parse(&most).is_ok());
        assert_eq!(
            DelayLevels::parse("2s 1m 1h 1d").expect("valid").delay(4),
            Duration::from_secs(86_400)
        );
    }
}
