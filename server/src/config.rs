//! A node's config file as a whole: the broker's keys, and the keys of each endpoint the
//! node serves beside the broker API, told apart by their prefix (`grpc_v5_*` configures the
//! RocketMQ 5.x endpoint). One flat file, as before the endpoints were crates of their own;
//! each part denies keys it does not know, so a typo in either is an error naming its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use rocketraft_broker::config::BrokerConfig;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MAX;
use rocketraft_domain::limits::POP_INVISIBLE_MS_MIN;
use rocketraft_domain::secrets::SECRET_LEN_MAX;
use rocketraft_domain::secrets::validate_secret;
use rocketraft_server_kit::config_file::ConfigError;
use rocketraft_server_kit::config_file::parse_toml;
use serde::Deserialize;

/// The prefix of the keys that configure the RocketMQ 5.x gRPC endpoint.
pub const GRPC_V5_KEY_PREFIX: &str = "grpc_v5_";
/// `grpc_v5_auto_renew_invisible_ms` by default: RocketMQ proxy's 60 s.
pub const GRPC_V5_AUTO_RENEW_INVISIBLE_MS_DEFAULT: u64 = 60_000;

/// Everything a node's config file says.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub broker: BrokerConfig,
    pub grpc_v5: GrpcV5Config,
}

/// The RocketMQ 5.x gRPC endpoint's keys, without their `grpc_v5_` prefix.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrpcV5Config {
    /// Where RocketMQ 5.x's gRPC API (`apache.rocketmq.v2.MessagingService`) is served for
    /// the official 5.x clients (its own port); it reaches every topic of the cluster through
    /// the nameservers. Absent: not served.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// The access keys (key -> secret) the endpoint accepts: a 5.x client must sign its calls
    /// with one of them, or is answered `UNAUTHORIZED`. Empty: anyone may call.
    #[serde(default)]
    pub access_keys: BTreeMap<String, String>,
    /// How long a 5.x push consumer's delivery stays invisible at a time while the endpoint
    /// renews it (`auto_renew` receives); RocketMQ's proxy uses 60 s.
    #[serde(default = "default_auto_renew_invisible_ms")]
    pub auto_renew_invisible_ms: u64,
}

impl Default for GrpcV5Config {
    fn default() -> GrpcV5Config {
        GrpcV5Config {
            listen: None,
            access_keys: BTreeMap::new(),
            auto_renew_invisible_ms: GRPC_V5_AUTO_RENEW_INVISIBLE_MS_DEFAULT,
        }
    }
}

fn default_auto_renew_invisible_ms() -> u64 {
    GRPC_V5_AUTO_RENEW_INVISIBLE_MS_DEFAULT
}

impl ServerConfig {
    /// Parses a node's TOML document: keys with an endpoint's prefix go to that endpoint,
    /// the rest to the broker. Unknown keys are errors, named with their full key.
    pub fn from_table(mut table: toml::Table) -> Result<ServerConfig, ConfigError> {
        let grpc_v5_keys: Vec<String> = table
            .keys()
            .filter(|key| key.starts_with(GRPC_V5_KEY_PREFIX))
            .cloned()
            .collect();
        let mut grpc_v5 = toml::Table::new();
        for key in grpc_v5_keys {
            if let Some(value) = table.remove(&key) {
                grpc_v5.insert(key[GRPC_V5_KEY_PREFIX.len()..].to_owned(), value);
            }
        }
        let text = |table: &toml::Table| {
            toml::to_string(table).map_err(|error| ConfigError::new("<file>", error.to_string()))
        };
        Ok(ServerConfig {
            broker: BrokerConfig::from_toml(&text(&table)?)?,
            grpc_v5: parse_toml(&text(&grpc_v5)?).map_err(|error: ConfigError| {
                ConfigError::new(format!("{GRPC_V5_KEY_PREFIX}{}", error.key), error.reason)
            })?,
        })
    }

    /// Parses a node's TOML document (see [`ServerConfig::from_table`]).
    pub fn from_toml(text: &str) -> Result<ServerConfig, ConfigError> {
        let table = text
            .parse::<toml::Table>()
            .map_err(|error| ConfigError::new("<file>", error.message().to_owned()))?;
        ServerConfig::from_table(table)
    }

    /// Checks every value once, at start; an error names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.broker.validate()?;
        if self.grpc_v5.listen.is_some() && self.broker.namesrv.is_empty() {
            return Err(ConfigError::new(
                "grpc_v5_listen",
                "needs namesrv: the 5.x endpoint finds every topic's broker groups there",
            ));
        }
        self.validate_grpc_v5_access_keys()?;
        let range = POP_INVISIBLE_MS_MIN..=POP_INVISIBLE_MS_MAX;
        if !range.contains(&self.grpc_v5.auto_renew_invisible_ms) {
            return Err(ConfigError::new(
                "grpc_v5_auto_renew_invisible_ms",
                format!(
                    "must be {POP_INVISIBLE_MS_MIN} to {POP_INVISIBLE_MS_MAX} (a pop's invisible \
                     time)"
                ),
            ));
        }
        Ok(())
    }

    fn validate_grpc_v5_access_keys(&self) -> Result<(), ConfigError> {
        const KEY: &str = "grpc_v5_access_keys";
        for (access_key, secret) in &self.grpc_v5.access_keys {
            // A client's signature header lists the access key between commas.
            if validate_secret(access_key).is_err() || access_key.contains(',') {
                return Err(ConfigError::new(
                    KEY,
                    format!(
                        "access key {access_key:?}: 1 to {SECRET_LEN_MAX} visible ASCII \
                         characters, no commas"
                    ),
                ));
            }
            validate_secret(secret).map_err(|error| {
                ConfigError::new(
                    KEY,
                    format!("the secret of access key {access_key}: {error}"),
                )
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = r#"
        group = "broker-a"
        node_id = 1
        listen = "127.0.0.1:10911"
        data_dir = "/tmp/rr"
        [peers]
        1 = "127.0.0.1:10911"
    "#;

    #[test]
    fn endpoint_keys_are_split_from_the_broker_keys() {
        let config = ServerConfig::from_toml(&format!(
            "grpc_v5_listen = \"127.0.0.1:8081\"\nnamesrv = [\"127.0.0.1:9876\"]\n{VALID}\n\
             [grpc_v5_access_keys]\napp = \"s3cret\"\n"
        ))
        .expect("valid");
        config.validate().expect("validates");
        assert_eq!(config.broker.group, "broker-a");
        assert_eq!(
            config.grpc_v5.listen,
            Some("127.0.0.1:8081".parse().expect("addr"))
        );
        assert_eq!(config.grpc_v5.access_keys["app"], "s3cret");
        assert_eq!(
            config.grpc_v5.auto_renew_invisible_ms,
            GRPC_V5_AUTO_RENEW_INVISIBLE_MS_DEFAULT
        );
    }

    #[test]
    fn unknown_keys_are_named_in_full() {
        let error = ServerConfig::from_toml(&format!("grpc_v5_lisen = \"127.0.0.1:1\"\n{VALID}"))
            .expect_err("a typo in an endpoint key");
        assert_eq!(error.key, "grpc_v5_lisen");
        let error = ServerConfig::from_toml(&format!("lisen = \"127.0.0.1:1\"\n{VALID}"))
            .expect_err("a typo in a broker key");
        assert_eq!(error.key, "lisen");
        let error = ServerConfig::from_toml(&format!("grpc_v5_listen = 5\n{VALID}"))
            .expect_err("not an address");
        assert_eq!(error.key, "grpc_v5_listen");
    }

    #[test]
    fn the_5x_endpoint_needs_a_nameserver() {
        let mut config = ServerConfig::from_toml(VALID).expect("valid");
        config.grpc_v5.listen = Some("127.0.0.1:8081".parse().expect("an address"));
        config.broker.namesrv = vec!["127.0.0.1:9876".into()];
        config.validate().expect("a 5.x endpoint with a nameserver");
        config.broker.namesrv.clear();
        assert_eq!(
            config.validate().expect_err("no route source").key,
            "grpc_v5_listen"
        );
    }

    #[test]
    fn auto_renew_is_bounded_by_a_pops_invisible_time() {
        let mut config = ServerConfig::from_toml(VALID).expect("valid");
        for (ms, valid) in [
            (POP_INVISIBLE_MS_MIN, true),
            (POP_INVISIBLE_MS_MIN - 1, false),
            (POP_INVISIBLE_MS_MAX, true),
            (POP_INVISIBLE_MS_MAX + 1, false),
        ] {
            config.grpc_v5.auto_renew_invisible_ms = ms;
            match config.validate() {
                Ok(()) => assert!(valid, "{ms} accepted"),
                Err(error) => {
                    assert!(!valid, "{ms} refused");
                    assert_eq!(error.key, "grpc_v5_auto_renew_invisible_ms");
                }
            }
        }
    }

    #[test]
    fn access_keys_are_bounded() {
        let config = ServerConfig::from_toml(&format!(
            "{VALID}\n[grpc_v5_access_keys]\napp = \"{}\"\n",
            "s".repeat(SECRET_LEN_MAX)
        ))
        .expect("a table of access keys");
        config.validate().expect("access keys within bounds");
        for (access_key, secret) in [
            ("app", "s".repeat(SECRET_LEN_MAX + 1)),
            ("app", String::new()),
            ("a,b", "s3cret".into()),
            ("two words", "s3cret".into()),
        ] {
            let mut config = config.clone();
            config.grpc_v5.access_keys = BTreeMap::from([(access_key.into(), secret)]);
            assert_eq!(
                config.validate().expect_err(access_key).key,
                "grpc_v5_access_keys"
            );
        }
    }
}
