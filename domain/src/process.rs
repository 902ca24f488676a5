//! Figures about the running process that nodes report (`NodeStatus`) and tools measure
//! themselves by, so both sides count CPU the same way.

use std::time::Duration;

/// CPU time (user + system, all threads) this process has used since it started; zero if
/// the kernel does not say.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given; a zeroed rusage is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a rusage is the documented use.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let micros = |time: libc::timeval| {
        Duration::from_secs(time.tv_sec.max(0) as u64)
            + Duration::from_micros(time.tv_usec.max(0) as u64)
    };
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let before = cpu_time();
        let mut x = 0u64;
        let spin_until = std::time::Instant::now() + Duration::from_millis(30);
        while std::time::Instant::now() < spin_until {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        assert!(
            cpu_time() > before,
            "30 ms of spinning must show as CPU time"
        );
    }
}
