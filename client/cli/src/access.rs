//! How the tools reach a cluster that guards its admin calls with a token or serves TLS: the
//! `--admin-token` and `--tls-ca` flags `mqadmin` and `rocketraft-bench` take alike, and the
//! clients made from them. Without either flag every client is plain and tokenless.

use std::net::SocketAddr;
use std::path::PathBuf;

use rocketraft_client::admin::Admin;
use rocketraft_client::connector::ClientTls;
use rocketraft_client::connector::Connector;
use rocketraft_client::group::GroupError;
use rocketraft_domain::secrets::ADMIN_TOKEN_HEADER;
use rocketraft_proto::broker::broker_client::BrokerClient;
use tonic::transport::Channel;

/// The flags that let a tool into a guarded cluster.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AccessArgs {
    /// The brokers' admin token, for clusters that set one (better given in the
    /// environment than on a command line others can list).
    #[arg(long, global = true, env = "RR_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// The CA (PEM) the brokers' TLS certificates are verified against, for clusters that
    /// serve TLS.
    #[arg(long, global = true, env = "RR_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
}

/// A cluster's way in, loaded from [`AccessArgs`]; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ClusterAccess {
    admin_token: Option<String>,
    tls: Option<ClientTls>,
}

impl ClusterAccess {
    /// Plain connections, and `admin_token` on admin calls if given.
    pub fn with_admin_token(admin_token: Option<String>) -> ClusterAccess {
        ClusterAccess {
            admin_token,
            tls: None,
        }
    }

    /// Reads the CA file, if one is named.
    pub fn load(args: &AccessArgs) -> std::io::Result<ClusterAccess> {
        let tls = args
            .tls_ca
            .as_deref()
            .map(ClientTls::from_ca_file)
            .transpose()?;
        Ok(ClusterAccess {
            admin_token: args.admin_token.clone(),
            tls,
        })
    }

    /// The TLS the brokers are verified with, if they serve it.
    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_ref()
    }

    /// How connections to nodes and nameservers are opened.
    pub fn connector(&self) -> Connector {
        match &self.tls {
            Some(tls) => Connector::tls(tls.clone()),
            None => Connector::plain(),
        }
    }

    /// An admin client of the cluster the `nameservers` route to.
    pub fn admin(&self, nameservers: Vec<String>) -> Admin {
        let mut admin = Admin::new(nameservers);
        if let Some(token) = &self.admin_token {
            admin = admin.with_admin_token(token.clone());
        }
        match &self.tls {
            Some(tls) => admin.with_tls(tls.clone()),
            None => admin,
        }
    }

    /// Connects to the broker API of the node at `addr`.
    pub async fn connect(&self, addr: SocketAddr) -> Result<BrokerClient<Channel>, GroupError> {
        self.connector().connect(addr).await
    }

    /// `message` as an admin call: with the token, if there is one.
    pub fn admin_request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = &self.admin_token {
            rocketraft_domain::secrets::attach(&mut request, ADMIN_TOKEN_HEADER, token);
        }
        request
    }
}
