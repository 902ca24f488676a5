//! Message unique ids (`UNIQ_KEY`) in RocketMQ's layout (`MessageClientIDSetter`): 16 bytes
//! as 32 upper-case hex characters.
//!
//! | bytes    | field                                                                 |
//! |----------|-----------------------------------------------------------------------|
//! | `0..4`   | the producer host's IPv4 address (127.0.0.1 if it has no route out)    |
//! | `4..6`   | the low 16 bits of the process id                                      |
//! | `6..10`  | a random nonce per generator (where Java puts its class loader's hash) |
//! | `10..14` | milliseconds since the start of the current month, UTC                 |
//! | `14..16` | a counter                                                              |
//!
//! Invariant: a generator never repeats an id within 2^32 ms (49 days) of running. Bytes
//! `10..16` are one 48-bit value that only grows: each id takes the larger of the previous
//! value + 1 and the current time shifted left by 16 bits, so more than 65,536 ids in one
//! millisecond borrow from the next one, and a clock that steps back changes nothing. Two
//! generators differ in their nonce, even in containers that share an address and a pid.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::hash::Hasher;
use std::net::IpAddr;
use std::net::Ipv4Addr;
use std::net::SocketAddrV4;
use std::net::UdpSocket;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

/// Bytes 10..16 of an id: 32 bits of time and 16 of counter.
const SEQUENCE_MASK: u64 = (1 << 48) - 1;
/// Bytes 10..16 as upper-case hex (written by hand: `format!` cost more than the rest of
/// the id).
const SEQUENCE_HEX_DIGITS: usize = 12;
const HEX_DIGITS: &[u8; 16] = b"0123456789ABCDEF";

#[derive(Debug)]
pub struct UniqueIdGenerator {
    /// Bytes 0..10 as hex: address, pid and nonce.
    prefix: String,
    /// The last value of bytes 10..16 handed out.
    sequence: AtomicU64,
}

impl UniqueIdGenerator {
    /// Ids whose address part is the one this host's traffic to the public internet would
    /// leave from (loopback if it has no such route).
    pub fn new() -> UniqueIdGenerator {
        UniqueIdGenerator::toward(&[])
    }

    /// Ids whose address part is the one this client connects to `servers` from (the first
    /// given as an IPv4 `ip:port`), as RocketMQ's ids name the client's own address: a client
    /// on a host with no default route still names its address on the cluster's network.
    pub fn toward(servers: &[String]) -> UniqueIdGenerator {
        let ip = u32::from(local_ipv4(servers));
        let pid = std::process::id() as u16;
        let nonce = random_u64() as u32;
        UniqueIdGenerator {
            prefix: format!("{ip:08X}{pid:04X}{nonce:08X}"),
            sequence: AtomicU64::new(0),
        }
    }

    pub fn next_id(&self) -> String {
        let now = ms_since_month_start(rocketraft_domain::time::now_ms()) << 16;
        let advance = |last: u64| (last + 1).max(now) & SEQUENCE_MASK;
        let previous = self
            .sequence
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(advance(last))
            })
            .unwrap_or_else(|last| last);
        let sequence = advance(previous);
        let mut id = String::with_capacity(self.prefix.len() + SEQUENCE_HEX_DIGITS);
        id.push_str(&self.prefix);
        id.extend(
            (0..SEQUENCE_HEX_DIGITS)
                .rev()
                .map(|digit| HEX_DIGITS[((sequence >> (4 * digit)) & 0xf) as usize] as char),
        );
        id
    }
}

impl Default for UniqueIdGenerator {
    fn default() -> Self {
        UniqueIdGenerator::new()
    }
}

/// The address this host's traffic to the first of `servers` (IPv4 `ip:port`s; others are
/// skipped) leaves from, else its traffic to a public address, else loopback: a UDP socket
/// "connected" to an address learns it from the routing table without sending anything.
fn local_ipv4(servers: &[String]) -> Ipv4Addr {
    let public = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 9);
    servers
        .iter()
        .filter_map(|server| server.parse::<SocketAddrV4>().ok())
        .chain(std::iter::once(public))
        .find_map(routed_from)
        .unwrap_or(Ipv4Addr::LOCALHOST)
}

/// The local address traffic to `target` leaves from, if the host has a route to it.
fn routed_from(target: SocketAddrV4) -> Option<Ipv4Addr> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
    socket.connect(target).ok()?;
    match socket.local_addr().ok()?.ip() {
        IpAddr::V4(ip) if !ip.is_unspecified() => Some(ip),
        _ => None,
    }
}

/// Milliseconds between the start of `now_ms`'s month (UTC) and `now_ms`.
fn ms_since_month_start(now_ms: i64) -> u64 {
    const MS_PER_DAY: i64 = 86_400_000;
    let days = now_ms.div_euclid(MS_PER_DAY);
    let day_of_month = civil_day_of_month(days);
    let month_start_ms = (days - (day_of_month - 1)) * MS_PER_DAY;
    (now_ms - month_start_ms).max(0) as u64
}

/// The day of the month (1-based) of `days` since 1970-01-01, in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`).
fn civil_day_of_month(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    day_of_year - (153 * month_index + 2) / 5 + 1
}

/// 64 random bits: std seeds each `RandomState` from the OS's randomness.
fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos()),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_the_address_the_client_reaches_its_servers_from() {
        let toward_loopback = UniqueIdGenerator::toward(&["127.0.0.1:9876".into()]);
        assert!(
            toward_loopback.next_id().starts_with("7F000001"),
            "{}",
            toward_loopback.next_id()
        );
        // A name that is no IPv4 address is skipped, not resolved.
        let skipped = UniqueIdGenerator::toward(&["ns.example:9876".into(), "127.0.0.1:1".into()]);
        assert!(skipped.next_id().starts_with("7F000001"));
    }

    #[test]
    fn ids_never_repeat_within_or_across_generators_of_one_process() {
        let first = UniqueIdGenerator::new();
        let second = UniqueIdGenerator::new();
        let mut seen = std::collections::HashSet::new();
        // More than one millisecond's worth of counter, so the time part must carry.
        for _ in 0..70_000 {
            assert!(seen.insert(first.next_id()));
        }
        for _ in 0..1000 {
            assert!(
                seen.insert(second.next_id()),
                "same address and pid, different nonce"
            );
        }
    }

    #[test]
    fn ids_follow_rocketmqs_layout() {
        let id = UniqueIdGenerator::new().next_id();
        assert_eq!(id.len(), 32);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c))
        );
        let ip = Ipv4Addr::from(u32::from_str_radix(&id[0..8], 16).expect("hex"));
        assert_eq!(ip, local_ipv4(&[]));
        let pid = u16::from_str_radix(&id[8..12], 16).expect("hex");
        assert_eq!(pid, std::process::id() as u16);
        let month_ms = u64::from_str_radix(&id[20..28], 16).expect("hex");
        let now = ms_since_month_start(rocketraft_domain::time::now_ms());
        assert!(
            month_ms <= now && now - month_ms < 60_000,
            "{month_ms} vs {now}"
        );
    }

    #[test]
    fn month_start_is_the_first_of_the_month_utc() {
        // 2026-12-01T00:00:00Z and 2024-02-29T12:00:00.5Z (a leap day).
        assert_eq!(ms_since_month_start(1_796_083_200_000), 0);
        assert_eq!(
            ms_since_month_start(1_709_208_000_500),
            28 * 86_400_000 + 12 * 3_600_000 + 500
        );
    }

    #[test]
    fn a_clock_that_steps_back_does_not_repeat_ids() {
        let generator = UniqueIdGenerator::new();
        generator
            .sequence
            .store(SEQUENCE_MASK - 5, Ordering::Relaxed);
        let ids: std::collections::HashSet<String> = (0..3).map(|_| generator.next_id()).collect();
        assert_eq!(ids.len(), 3);
    }
}
