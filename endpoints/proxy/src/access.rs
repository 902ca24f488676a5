//! Access keys: who may call the 5.x endpoint. A 5.x client configured with an access key
//! and its secret signs every call: its `authorization` header reads
//! `MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>`,
//! the signature being HMAC-SHA1 (RFC 2104) of its `x-mq-date-time` header's value under the
//! secret. An endpoint configured with keys answers a call without a valid signature with
//! `UNAUTHORIZED` and the reason; one configured with none checks nothing.
//!
//! Invariants: a signature is compared in time independent of where it differs; a refusal
//! names the access key but never the secret. The signed time is not checked against the
//! clock (RocketMQ's clients send it in differing formats), so a captured header can be
//! replayed: serve the endpoint over TLS where the network is not trusted.

use std::collections::BTreeMap;

use rocketraft_domain::secrets::constant_time_eq;
use tonic::metadata::MetadataMap;

use crate::pb;
use crate::status;

/// The header holding a call's signature.
pub const AUTHORIZATION_HEADER: &str = "authorization";
/// The header whose value a client signs.
pub const DATE_TIME_HEADER: &str = "x-mq-date-time";
/// The only signing algorithm RocketMQ's 5.x clients use.
const ALGORITHM: &str = "MQv2-HMAC-SHA1";
/// SHA-1's block size, which HMAC pads its key to.
const SHA1_BLOCK_BYTES: usize = 64;

/// The access keys an endpoint accepts, each with its secret.
#[derive(Clone, Default)]
pub struct AccessKeys {
    secrets: BTreeMap<String, String>,
}

impl AccessKeys {
    /// Accepts calls signed with one of `secrets` (access key -> secret); none: every call.
    pub fn new(secrets: BTreeMap<String, String>) -> AccessKeys {
        AccessKeys { secrets }
    }

    /// `Ok` if a call with `metadata` may proceed; otherwise the `UNAUTHORIZED` status.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), pb::Status> {
        if self.secrets.is_empty() {
            return Ok(());
        }
        self.verify(metadata).map_err(|reason| {
            tracing::info!(reason, "5.x call refused");
            status::status(pb::Code::Unauthorized, reason).unwrap_or_default()
        })
    }

    fn verify(&self, metadata: &MetadataMap) -> Result<(), String> {
        let header = |name| {
            metadata
                .get(name)
                .and_then(|value| value.to_str().ok())
                .ok_or_else(|| format!("no {name} header: this endpoint requires an access key"))
        };
        let signed = parse_authorization(header(AUTHORIZATION_HEADER)?)?;
        let date_time = header(DATE_TIME_HEADER)?;
        let secret = self
            .secrets
            .get(signed.access_key)
            .ok_or_else(|| format!("unknown access key {}", signed.access_key))?;
        let expected = hmac_sha1(secret.as_bytes(), date_time.as_bytes());
        if !constant_time_eq(&signed.signature, &expected) {
            return Err(format!(
                "the signature does not match access key {}'s secret",
                signed.access_key
            ));
        }
        Ok(())
    }
}

/// What an `authorization` header says.
#[derive(Debug, PartialEq, Eq)]
struct Signed<'a> {
    access_key: &'a str,
    signature: Vec<u8>,
}

fn parse_authorization(header: &str) -> Result<Signed<'_>, String> {
    let malformed = || format!("malformed {AUTHORIZATION_HEADER} header");
    let fields = header
        .strip_prefix(ALGORITHM)
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| format!("{AUTHORIZATION_HEADER} is not signed with {ALGORITHM}"))?;
    let (mut access_key, mut signed_headers, mut signature) = (None, None, None);
    for field in fields.split(',') {
        let (name, value) = field.trim().split_once('=').ok_or_else(malformed)?;
        match name {
            "Credential" => access_key = Some(value),
            "SignedHeaders" => signed_headers = Some(value),
            "Signature" => signature = Some(value),
            _ => {}
        }
    }
    if signed_headers != Some(DATE_TIME_HEADER) {
        return Err(format!("the signature must cover {DATE_TIME_HEADER} alone"));
    }
    Ok(Signed {
        access_key: access_key.ok_or_else(malformed)?,
        signature: decode_hex(signature.ok_or_else(malformed)?).ok_or_else(malformed)?,
    })
}

/// Bytes of hex text (either case); `None` if it is not hex.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

/// HMAC-SHA1 of `message` under `key` (RFC 2104).
fn hmac_sha1(key: &[u8], message: &[u8]) -> [u8; 20] {
    let mut block = [0u8; SHA1_BLOCK_BYTES];
    if key.len() > SHA1_BLOCK_BYTES {
        block[..20].copy_from_slice(&sha1_smol::Sha1::from(key).digest().bytes());
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let padded = |pad: u8| block.map(|byte| byte ^ pad);
    let mut inner = sha1_smol::Sha1::new();
    inner.update(&padded(0x36));
    inner.update(message);
    let mut outer = sha1_smol::Sha1::new();
    outer.update(&padded(0x5c));
    outer.update(&inner.digest().bytes());
    outer.digest().bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn hmac_sha1_matches_the_rfc_2202_vectors() {
        assert_eq!(
            hex(&hmac_sha1(&[0x0b; 20], b"Hi There")),
            "b617318655057264e28bc0b6fb378c8ef146be00"
        );
        assert_eq!(
            hex(&hmac_sha1(b"Jefe", b"what do ya want for nothing?")),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
        // A key longer than a block is hashed first.
        assert_eq!(
            hex(&hmac_sha1(
                &[0xaa; 80],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "aa4ae5e15272d00e95705637ce8a3b55ed402112"
        );
    }

    fn signed(access_key: &str, secret: &str, date_time: &str) -> MetadataMap {
        let signature = hex(&hmac_sha1(secret.as_bytes(), date_time.as_bytes()));
        let mut metadata = MetadataMap::new();
        let authorization = format!(
            "{ALGORITHM} Credential={access_key}, SignedHeaders={DATE_TIME_HEADER}, Signature={signature}"
        );
        metadata.insert(AUTHORIZATION_HEADER, authorization.parse().expect("ascii"));
        metadata.insert(DATE_TIME_HEADER, date_time.parse().expect("ascii"));
        metadata
    }

    fn refusal(keys: &AccessKeys, metadata: &MetadataMap) -> Option<String> {
        let status = keys.check(metadata).err()?;
        assert_eq!(status.code(), pb::Code::Unauthorized);
        Some(status.message)
    }

    #[test]
    fn a_call_must_be_signed_with_a_known_key_and_its_secret() {
        let keys = AccessKeys::new(BTreeMap::from([("app".into(), "s3cret".into())]));
        let now = "2026-12-02T19:40:00+00:00";
        assert_eq!(refusal(&keys, &signed("app", "s3cret", now)), None);
        let wrong_secret = refusal(&keys, &signed("app", "guess", now)).expect("refused");
        assert!(wrong_secret.contains("does not match"), "{wrong_secret}");
        assert!(!wrong_secret.contains("s3cret"), "never the secret");
        let unknown = refusal(&keys, &signed("other", "s3cret", now)).expect("refused");
        assert!(unknown.contains("unknown access key other"), "{unknown}");
        let unsigned = refusal(&keys, &MetadataMap::new()).expect("refused");
        assert!(unsigned.contains("requires an access key"), "{unsigned}");

        let mut replaced_time = signed("app", "s3cret", now);
        replaced_time.insert(
            DATE_TIME_HEADER,
            "2026-12-02T19:41:00+00:00".parse().expect("ascii"),
        );
        assert!(
            refusal(&keys, &replaced_time).is_some(),
            "the signature covers the time"
        );

        assert_eq!(
            refusal(&AccessKeys::default(), &MetadataMap::new()),
            None,
            "no keys configured: no check"
        );
    }

    #[test]
    fn a_malformed_authorization_is_refused_with_a_reason() {
        for header in [
            "Basic dXNlcjpwYXNz",
            "MQv2-HMAC-SHA1 Credential=app",
            "MQv2-HMAC-SHA1 Credential=app, SignedHeaders=host, Signature=00",
            "MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature=xyz",
            "MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature=abc",
            "MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature=00",
        ] {
            assert!(parse_authorization(header).is_err(), "{header}");
        }
        let parsed = parse_authorization(
            "MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, Signature=0aFF",
        )
        .expect("well formed");
        assert_eq!(
            parsed,
            Signed {
                access_key: "app",
                signature: vec![0x0a, 0xff]
            }
        );
    }
}
