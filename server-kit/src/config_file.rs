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
            .or_else(|| missing_key(text, &error))
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

/// For a "missing field" error, the field's full key: `table.field`, with the inline table
/// the error's span starts at (`table = { ... }`) or the table whose header last precedes
/// the span, or the field alone at the top level.
fn missing_key(text: &str, error: &toml::de::Error) -> Option<String> {
    let field = error
        .message()
        .strip_prefix("missing field `")?
        .split('`')
        .next()?;
    let span = error.span()?;
    let inline = text
        .get(..span.start)
        .and_then(|before| before.lines().last())
        .and_then(|line| line.split_once('='))
        .filter(|(_, value)| value.trim().is_empty() || value.trim_start().starts_with('{'))
        .map(|(table, _)| table.trim());
    let header = text.get(..span.end).and_then(|before| {
        before
            .lines()
            .rev()
            .map(str::trim)
            .find(|line| line.starts_with('['))
            .map(|header| header.trim_matches(|c| c == '[' || c == ']').trim())
    });
    let table = inline.filter(|table| !table.is_empty()).or(header);
    Some(match table {
        Some(table) if !table.is_empty() => format!("{table}.{field}"),
        _ => field.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        _cert: String,
        _key: String,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Config {
        _port: Option<u32>,
        _tls: Option<Pair>,
        _other: Option<Pair>,
    }

    #[test]
    fn a_missing_field_is_named_with_its_table() {
        for (text, key) in [
            ("_tls = { _cert = \"x\" }\n", "_tls._key"),
            ("_port = 1\n[_tls]\n_cert = \"x\"\n", "_tls._key"),
            (
                "[_tls]\n_cert = \"x\"\n[_other]\n_cert = \"y\"\n_key = \"z\"\n",
                "_tls._key",
            ),
            ("_port = \"one\"\n", "_port"),
            ("_colour = 1\n", "_colour"),
        ] {
            let error = parse_toml::<Config>(text).expect_err(text);
            assert_eq!(error.key, key, "{text:?}: {error}");
        }
    }
}
