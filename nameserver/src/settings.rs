//! `NameServerSettings`: what `nameserver` is told to do, from its config file
//! (`nameserver --config FILE`, TOML) with its flags written over it.
//!
//! ```toml
//! listen = "0.0.0.0:9876"
//! broker_expiry_ms = 120000
//! log_format = "text"  # or "json"
//! connections_max = 10000
//! cluster_secret = "..."  # brokers must register with it
//! metrics_listen = "0.0.0.0:9877"  # Prometheus scrapes /metrics here (off when absent)
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use crate::server::BROKER_EXPIRY_DEFAULT;
use crate::server::LISTEN_DEFAULT;
use crate::server::NameServerConfig;
use crate::server::ServerTlsFiles;
use rocketraft_server_kit::config_file::ConfigError;
use rocketraft_server_kit::config_file::parse_toml;
use rocketraft_server_kit::connection_limit::CONNECTIONS_MAX_DEFAULT;
use rocketraft_server_kit::logging::LogFormat;

/// Every key is optional; a missing one takes its default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameServerSettings {
    /// Where the nameserver serves ([`LISTEN_DEFAULT`]).
    pub listen: Option<SocketAddr>,
    /// A broker node not heard from for this many milliseconds is dropped
    /// ([`BROKER_EXPIRY_DEFAULT`]).
    pub broker_expiry_ms: Option<u64>,
    /// How log lines are written.
    #[serde(default)]
    pub log_format: LogFormat,
    /// Connections served at once, at most ([`CONNECTIONS_MAX_DEFAULT`]); more are refused.
    pub connections_max: Option<usize>,
    /// Broker registrations must carry this secret (the brokers' `cluster_secret`).
    pub cluster_secret: Option<String>,
    /// Where Prometheus scrapes `/metrics`; absent: no endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// TLS on the nameserver port (`cert`, `key`: PEM files); absent: plain HTTP/2. A TLS
    /// cluster's brokers verify it against their `tls.ca`.
    pub tls: Option<ServerTlsFiles>,
}

impl NameServerSettings {
    /// Parses a config file; an unknown key or a bad value is an error naming the key.
    pub fn from_toml(text: &str) -> Result<NameServerSettings, ConfigError> {
        parse_toml(text)
    }

    /// The address to serve on and the server's config, defaults filled in and checked.
    pub fn resolve(&self) -> Result<(SocketAddr, NameServerConfig), ConfigError> {
        let listen = match self.listen {
            Some(listen) => listen,
            None => LISTEN_DEFAULT
                .parse()
                .map_err(|_| ConfigError::new("listen", "the default address is malformed"))?,
        };
        let expiry_ms = self
            .broker_expiry_ms
            .unwrap_or(BROKER_EXPIRY_DEFAULT.as_millis() as u64);
        if expiry_ms == 0 {
            return Err(ConfigError::new("broker_expiry_ms", "must be positive"));
        }
        let connections_max = self.connections_max.unwrap_or(CONNECTIONS_MAX_DEFAULT);
        if connections_max == 0 {
            return Err(ConfigError::new("connections_max", "must be positive"));
        }
        if let Some(secret) = &self.cluster_secret {
            rocketraft_domain::secrets::validate_secret(secret)
                .map_err(|error| ConfigError::new("cluster_secret", error.to_string()))?;
        }
        Ok((
            listen,
            NameServerConfig {
                broker_expiry: Duration::from_millis(expiry_ms),
                connections_max,
                cluster_secret: self.cluster_secret.clone(),
                metrics_listen: self.metrics_listen,
                tls: self.tls.clone(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_what_the_file_leaves_out() {
        let (listen, config) = NameServerSettings::from_toml("")
            .expect("empty file")
            .resolve()
            .expect("defaults");
        assert_eq!(listen.to_string(), LISTEN_DEFAULT);
        assert_eq!(config.broker_expiry, BROKER_EXPIRY_DEFAULT);
        let (listen, config) =
            NameServerSettings::from_toml("listen = \"0.0.0.0:1\"\nbroker_expiry_ms = 1\n")
                .expect("valid")
                .resolve()
                .expect("the smallest expiry");
        assert_eq!(listen.to_string(), "0.0.0.0:1");
        assert_eq!(config.broker_expiry, Duration::from_millis(1));
        assert_eq!(config.metrics_listen, None, "no endpoint unless asked");
        let (_, config) = NameServerSettings::from_toml("metrics_listen = \"127.0.0.1:9877\"\n")
            .expect("valid")
            .resolve()
            .expect("resolves");
        assert_eq!(
            config.metrics_listen.map(|addr| addr.to_string()),
            Some("127.0.0.1:9877".to_owned())
        );
        assert_eq!(config.tls, None, "plain unless asked");
        let (_, config) = NameServerSettings::from_toml(
            "[tls]\ncert = \"/etc/rocketraft/ns.pem\"\nkey = \"/etc/rocketraft/ns.key\"\n",
        )
        .expect("valid")
        .resolve()
        .expect("resolves");
        assert_eq!(
            config.tls,
            Some(ServerTlsFiles {
                cert: "/etc/rocketraft/ns.pem".into(),
                key: "/etc/rocketraft/ns.key".into(),
            })
        );
    }

    #[test]
    fn errors_name_the_key() {
        for (text, key) in [
            ("colour = \"blue\"\n", "colour"),
            ("listen = \"nowhere\"\n", "listen"),
            ("broker_expiry_ms = \"soon\"\n", "broker_expiry_ms"),
            ("log_format = \"yaml\"\n", "log_format"),
            ("metrics_listen = \"port 9877\"\n", "metrics_listen"),
            ("[tls]\ncert = \"a.pem\"\n", "tls.key"),
        ] {
            let error = NameServerSettings::from_toml(text).expect_err(text);
            assert_eq!(error.key, key, "{error}");
        }
        let zero = NameServerSettings {
            broker_expiry_ms: Some(0),
            ..NameServerSettings::default()
        };
        assert_eq!(zero.resolve().expect_err("zero").key, "broker_expiry_ms");
        let no_connections = NameServerSettings {
            connections_max: Some(0),
            ..NameServerSettings::default()
        };
        assert_eq!(
            no_connections.resolve().expect_err("zero").key,
            "connections_max"
        );
        let spaced_secret = NameServerSettings {
            cluster_secret: Some("two words".into()),
            ..NameServerSettings::default()
        };
        assert_eq!(
            spaced_secret.resolve().expect_err("bad").key,
            "cluster_secret"
        );
    }
}
