//! Wall-clock time as the wire carries it (milliseconds since the Unix epoch).

/// Now, in milliseconds since the Unix epoch; 0 if the clock is before it.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
