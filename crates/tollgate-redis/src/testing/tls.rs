//! Certificates made by a test itself (with `rcgen`): a private certificate
//! authority and a server certificate for `127.0.0.1` signed by it, written
//! as PEM files for a TLS `redis-server`.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A private CA and a server certificate for 127.0.0.1, as PEM files.
#[derive(Debug, Clone)]
pub struct TestCerts {
    /// The CA's certificate (what a client must trust).
    pub ca: PathBuf,
    /// The server's certificate (for 127.0.0.1, signed by the CA).
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
}

impl TestCerts {
    /// Makes a fresh CA and server certificate and writes them into `dir`.
    ///
    /// # Panics
    /// When the certificates cannot be made or written (the test cannot run).
    pub fn generate(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).expect("create the certificates' directory");
        let mut ca_params = CertificateParams::new(Vec::new()).expect("CA parameters");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tollgate test CA");
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);

        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("server parameters");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "127.0.0.1");
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().expect("a server key");
        let cert = params.signed_by(&key, &issuer).expect("the server cert");

        let files = Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
        };
        let write = |path: &Path, pem: String| {
            std::fs::write(path, pem).expect("write a PEM file");
        };
        write(&files.ca, ca_cert.pem());
        write(&files.cert, cert.pem());
        write(&files.key, key.serialize_pem());
        files
    }

    /// The CA certificate's PEM text.
    ///
    /// # Panics
    /// When the file is gone.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca).expect("read the CA file")
    }
}
