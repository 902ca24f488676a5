//! Metrics of the running process, shared by the `broker` and `nameserver` binaries: CPU
//! seconds (user + system) and resident memory, read at each scrape.

use std::sync::Mutex;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The process's CPU time and resident set, registered in a registry.
pub struct ProcessMetrics {
    cpu_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    /// CPU seconds already counted, so each refresh adds what the process used since.
    counted_cpu_seconds: Mutex<f64>,
    resident_bytes: Gauge,
}

impl ProcessMetrics {
    /// Registers `process_cpu_seconds_total` and `process_resident_memory_bytes` (the names
    /// Prometheus's own clients use) in `registry`.
    pub fn register(registry: &mut Registry) -> ProcessMetrics {
        let metrics = ProcessMetrics {
            cpu_seconds: Counter::default(),
            counted_cpu_seconds: Mutex::new(0.0),
            resident_bytes: Gauge::default(),
        };
        registry.register(
            "process_cpu_seconds",
            "User and system CPU time the process used",
            metrics.cpu_seconds.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory of the process",
            metrics.resident_bytes.clone(),
        );
        metrics
    }

    /// Reads the process's CPU time and resident set now.
    pub fn refresh(&self) {
        let cpu = rocketraft_domain::process::cpu_time().as_secs_f64();
        let mut counted = self
            .counted_cpu_seconds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if cpu > *counted {
            self.cpu_seconds.inc_by(cpu - *counted);
            *counted = cpu;
        }
        if let Some(bytes) = resident_bytes() {
            self.resident_bytes.set(bytes);
        }
    }
}

/// Resident set size from `/proc/self/statm` (pages), in bytes; `None` where it cannot be
/// read.
fn resident_bytes() -> Option<i64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: i64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions; it reads a constant of the system.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * page_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let mut registry = Registry::default();
        let metrics = ProcessMetrics::register(&mut registry);
        metrics.refresh();
        assert!(
            metrics.resident_bytes.get() > 1024 * 1024,
            "a process holds a MiB"
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("process_cpu_seconds_total "), "{text}");
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
    }
}
