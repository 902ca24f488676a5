//! Shared secrets on the wire: the admin token that admin calls to a broker carry, and the
//! cluster secret that registrations with a nameserver carry, each in its own gRPC metadata
//! key. A server configured with a secret refuses calls without it; one configured with none
//! (`broker dev`, tests) checks nothing.
//!
//! Invariants: a secret is 1 to [`SECRET_LEN_MAX`] visible ASCII characters (so it is a valid
//! metadata value), and it is compared in time independent of where it differs.

/// gRPC metadata key of the admin token.
pub const ADMIN_TOKEN_HEADER: &str = "rr-admin-token";
/// gRPC metadata key of the cluster secret.
pub const CLUSTER_SECRET_HEADER: &str = "rr-cluster-secret";
/// Longest secret accepted.
pub const SECRET_LEN_MAX: usize = 256;

/// Why a configured secret cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a secret must be 1 to {SECRET_LEN_MAX} visible ASCII characters (no spaces)")]
pub struct BadSecret;

/// Checks a secret from a config file.
pub fn validate_secret(secret: &str) -> Result<(), BadSecret> {
    let visible = secret.bytes().all(|byte| byte.is_ascii_graphic());
    if secret.is_empty() || secret.len() > SECRET_LEN_MAX || !visible {
        return Err(BadSecret);
    }
    Ok(())
}

/// Adds `secret` (checked by [`validate_secret`]) to `request` under `header`.
pub fn attach<T>(request: &mut tonic::Request<T>, header: &'static str, secret: &str) {
    if let Ok(value) = secret.parse() {
        request.metadata_mut().insert(header, value);
    }
}

/// Whether `request` carries `expected` under `header`.
pub fn carries<T>(request: &tonic::Request<T>, header: &'static str, expected: &str) -> bool {
    request
        .metadata()
        .get(header)
        .is_some_and(|given| constant_time_eq(given.as_bytes(), expected.as_bytes()))
}

/// Byte equality whose time depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_exactly_the_secret_it_was_given() {
        let mut request = tonic::Request::new(());
        assert!(!carries(&request, ADMIN_TOKEN_HEADER, "s3cret"));
        attach(&mut request, ADMIN_TOKEN_HEADER, "s3cret");
        assert!(carries(&request, ADMIN_TOKEN_HEADER, "s3cret"));
        assert!(!carries(&request, ADMIN_TOKEN_HEADER, "s3cre"));
        assert!(!carries(&request, ADMIN_TOKEN_HEADER, "s3creT"));
        assert!(!carries(&request, CLUSTER_SECRET_HEADER, "s3cret"));
    }

    #[test]
    fn secrets_are_visible_ascii_of_bounded_length() {
        assert_eq!(validate_secret("a"), Ok(()));
        assert_eq!(validate_secret(&"x".repeat(SECRET_LEN_MAX)), Ok(()));
        for bad in [
            String::new(),
            "x".repeat(SECRET_LEN_MAX + 1),
            "two words".into(),
            "tab\t".into(),
            "é".into(),
        ] {
            assert_eq!(validate_secret(&bad), Err(BadSecret), "{bad:?}");
        }
    }
}
