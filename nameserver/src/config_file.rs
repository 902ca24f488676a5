//! TOML config files for the `broker` and `nameserver` binaries: unknown keys are errors, and
//! every error names the key it is about, so a typo or a bad value never goes unnoticed.

use serde::de::DeserializeOwned;

/// A configuration value that cannot be used, named by its key.
#[derive(Debug, thiserror::Error)]
#[error("config key `{key}`: {reason}")]
pub struct ConfigError {
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

/// Parses a TOML document into `T` (which should deny unknown fields); a failure names the
/// key on the line the parser stopped at.
pub fn parse_toml<T: DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|error| {
        // An unknown key is named in the message; any other error points into the line of
        // its key, which is what precedes `=` there.
        let unknown = error
            .message()
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split('`').next());
        let key = unknown
            .map(str::to_owned)
            .or_else(|| {
                error
                    .span()
                    .and_then(|span| text.get(..span.start))
                    .and_then(|before| before.lines().last())
                    .and_then(|line| line.split('=').next())
                    .map(|key| key.trim().to_owned())
            })
            .filter(|key| !key.is_empty())
            .unwrap_or_else(|| "<file>".to_owned());
        ConfigError::new(key, error.message().to_owned())
    })
}
