//! Every node of a broker group must lay its CommitLog out alike. A record never straddles two
//! segments (the rest of a segment becomes a blank filler), so where a record lands depends
//! on `store.commit_log_segment_bytes`: nodes set differently would give the same record
//! different offsets and diverge without a word.
//!
//! Every Raft request carries its sender's segment size in a header ([`Stamped`]); a node
//! whose own differs refuses it ([`check`]) with FAILED_PRECONDITION naming both, so the
//! misconfigured node gets no entries and no votes, and both logs say why. A request without
//! the header (from a build before this check) is served.

use std::sync::Mutex;
use std::task::Context;
use std::task::Poll;
use std::time::Duration;
use std::time::Instant;

use tonic::Status;
use tonic::codegen::Service;
use tonic::codegen::http;
use tonic::transport::Channel;

/// The header that carries the sender's CommitLog segment size, in bytes.
pub const SEGMENT_BYTES_HEADER: &str = "rr-commit-log-segment-bytes";
/// How often a node logs that it refuses a peer's requests (they come every heartbeat).
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A channel to a peer that stamps this node's segment size on every request.
#[derive(Clone)]
pub struct Stamped {
    channel: Channel,
    segment_bytes: http::HeaderValue,
}

impl Stamped {
    pub fn new(channel: Channel, segment_bytes: u64) -> Stamped {
        Stamped {
            channel,
            segment_bytes: http::HeaderValue::from(segment_bytes),
        }
    }
}

impl Service<http::Request<tonic::body::Body>> for Stamped {
    type Response = <Channel as Service<http::Request<tonic::body::Body>>>::Response;
    type Error = <Channel as Service<http::Request<tonic::body::Body>>>::Error;
    type Future = <Channel as Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        request
            .headers_mut()
            .insert(SEGMENT_BYTES_HEADER, self.segment_bytes.clone());
        self.channel.call(request)
    }
}

/// Refuses requests from peers whose CommitLog segment size differs from this node's.
#[derive(Debug)]
pub struct LayoutCheck {
    segment_bytes: u64,
    /// `segment_bytes` as a peer laid out alike writes it: most requests match it byte for
    /// byte and need no parsing.
    same: http::HeaderValue,
    last_logged: Mutex<Option<Instant>>,
}

impl LayoutCheck {
    pub fn new(segment_bytes: u64) -> LayoutCheck {
        LayoutCheck {
            segment_bytes,
            same: http::HeaderValue::from(segment_bytes),
            last_logged: Mutex::new(None),
        }
    }

    /// Whether a request with `headers` may be served here.
    pub fn check(&self, headers: &http::HeaderMap) -> Result<(), Status> {
        let Some(value) = headers.get(SEGMENT_BYTES_HEADER) else {
            return Ok(());
        };
        if *value == self.same {
            return Ok(());
        }
        let theirs = value
            .to_str()
            .ok()
            .and_then(|text| text.parse::<u64>().ok());
        let refusal = match theirs {
            Some(theirs) if theirs == self.segment_bytes => return Ok(()),
            Some(theirs) => Status::failed_precondition(format!(
                "CommitLog layouts differ: this node's store.commit_log_segment_bytes is {}, the \
                 sender's {theirs}; every node of a broker group must set the same (where each \
                 record lands, and so every offset, depends on it)",
                self.segment_bytes
            )),
            None => Status::invalid_argument(format!("malformed {SEGMENT_BYTES_HEADER} header")),
        };
        self.log(&refusal);
        Err(refusal)
    }

    fn log(&self, refusal: &Status) {
        let now = Instant::now();
        let mut last = self
            .last_logged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|at| now.duration_since(at) < REFUSAL_LOG_INTERVAL) {
            return;
        }
        *last = Some(now);
        tracing::error!(
            reason = refusal.message(),
            "refusing a peer's Raft requests (logged once every {REFUSAL_LOG_INTERVAL:?})"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            SEGMENT_BYTES_HEADER,
            http::HeaderValue::from_str(value).expect("header"),
        );
        headers
    }

    #[test]
    fn only_a_different_segment_size_is_refused() {
        let check = LayoutCheck::new(1 << 30);
        assert!(check.check(&headers("1073741824")).is_ok());
        assert!(
            check.check(&http::HeaderMap::new()).is_ok(),
            "an older peer"
        );
        let refused = check.check(&headers("536870912")).expect_err("differs");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
        assert!(
            refused.message().contains("1073741824") && refused.message().contains("536870912"),
            "{}",
            refused.message()
        );
        let malformed = check.check(&headers("1 GiB")).expect_err("malformed");
        assert_eq!(malformed.code(), tonic::Code::InvalidArgument);
    }
}
