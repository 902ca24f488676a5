//! Logging of the `broker` and `nameserver` binaries: `RUST_LOG` filters, `log_format`
//! chooses plain text (colour codes only on a terminal) or one JSON object per line.

use std::io::IsTerminal;

use serde::Deserialize;

/// How log lines are written (`log_format` in a config file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the process's logger; `default_filter` applies when `RUST_LOG` is unset.
pub fn init_logging(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => builder.json().init(),
    }
}
