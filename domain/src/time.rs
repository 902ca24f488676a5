//! Wall-clock time as the wire and the stored records carry it: milliseconds since the Unix
//! epoch.

/// Now, in milliseconds since the Unix epoch; 0 if the clock is before it.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}
