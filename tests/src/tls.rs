//! Certificates for TLS tests, made in the test with rcgen: a CA, and one certificate it
//! signs for 127.0.0.1 that every node of a test group and the nameserver serve, and that
//! the nodes present to their peers.

use std::path::PathBuf;

use rcgen::BasicConstraints;
use rcgen::CertificateParams;
use rcgen::CertifiedIssuer;
use rcgen::DnType;
use rcgen::ExtendedKeyUsagePurpose;
use rcgen::IsCa;
use rcgen::KeyPair;
use rcgen::SanType;
use rocketraft_broker::config::TlsSettings;
use rocketraft_client::connector::ClientTls;
use rocketraft_nameserver::server::ServerTlsFiles;
use tempfile::TempDir;

/// A CA and a node certificate it signed, as PEM files in a temporary dir.
pub struct TestCerts {
    dir: TempDir,
    ca_pem: String,
}

impl TestCerts {
    /// A fresh CA (named `ca_name`) and a certificate for 127.0.0.1 signed by it, usable as
    /// a server's and as a client's.
    pub fn generate(ca_name: &str) -> anyhow::Result<TestCerts> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, ca_name);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let node_key = KeyPair::generate()?;
        let mut node_params = CertificateParams::new(vec!["localhost".to_owned()])?;
        node_params
            .subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse()?));
        node_params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let node_cert = node_params.signed_by(&node_key, &ca)?;

        let dir = tempfile::tempdir()?;
        let ca_pem = ca.pem();
        std::fs::write(dir.path().join("ca.pem"), &ca_pem)?;
        std::fs::write(dir.path().join("node.pem"), node_cert.pem())?;
        std::fs::write(dir.path().join("node.key"), node_key.serialize_pem())?;
        Ok(TestCerts { dir, ca_pem })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A broker's `[tls]` with these files.
    pub fn settings(&self) -> TlsSettings {
        TlsSettings {
            cert: self.path("node.pem"),
            key: self.path("node.key"),
            ca: self.path("ca.pem"),
        }
    }

    /// A nameserver's `[tls]` with these files.
    pub fn server_files(&self) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: self.path("node.pem"),
            key: self.path("node.key"),
        }
    }

    /// A client that trusts this CA.
    pub fn client_tls(&self) -> ClientTls {
        ClientTls::from_ca_pem(&self.ca_pem)
    }
}
