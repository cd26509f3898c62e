//! A private PKI for one test: a CA, a server certificate for one IP address and the name
//! `localhost`, and a client certificate, written as PEM files (keys mode 0600) into a directory removed on drop.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// The files of a private PKI; see the module documentation.
#[derive(Debug)]
pub struct TestPki {
    dir: PathBuf,
}

impl TestPki {
    /// A CA, a server certificate for `server_ip` and a client certificate, under a fresh
    /// directory named for `tag`.
    pub fn new(tag: &str, server_ip: IpAddr) -> TestPki {
        let dir = std::env::temp_dir().join(format!("ufrag-pki-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pki = TestPki { dir };
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("ufrag test CA {tag}"));
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        pki.write("ca.pem", &ca.pem(), false);
        for (name, san, purpose) in [
            (
                "server",
                vec![server_ip.to_string(), "localhost".to_string()],
                ExtendedKeyUsagePurpose::ServerAuth,
            ),
            (
                "client",
                vec!["ufrag-relay".to_string()],
                ExtendedKeyUsagePurpose::ClientAuth,
            ),
        ] {
            let mut params = CertificateParams::new(san).unwrap();
            params.extended_key_usages = vec![purpose];
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &ca).unwrap();
            pki.write(&format!("{name}.pem"), &cert.pem(), false);
            pki.write(&format!("{name}.key"), &key.serialize_pem(), true);
        }
        pki
    }

    fn write(&self, name: &str, text: &str, secret: bool) {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        let mode = if secret { 0o600 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A file of this PKI: `ca.pem`, `server.pem`, `server.key`, `client.pem`, `client.key`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The directory, for other files of the same test (a password file).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
