//! A certificate authority and a server certificate for 127.0.0.1 / localhost,
//! made with `openssl` for the TLS tests (tests/one_server/tls.rs, tests/topologies/sentinel_tls.rs):
//! every server of a TLS test presents the one server certificate, and clients
//! trust the CA through `Config::tls_root_cert` or `SSL_CERT_FILE`.

use std::path::PathBuf;
use std::process::Command;

use super::server::TlsFiles;

/// A CA and a server certificate for 127.0.0.1 / localhost, in a temp dir.
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub fn make() -> Certs {
        let dir = tempfile::tempdir().expect("temp dir");
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("openssl must be installed for the TLS test");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=lockwarden test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        std::fs::write(
            dir.path().join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .expect("write san.ext");
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.crt",
        ]);
        Certs { dir }
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }
}

impl Certs {
    /// The files a TLS server is started with.
    pub fn files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.path("server.crt"),
            key: self.path("server.key"),
            ca: self.path("ca.crt"),
        }
    }

    /// The `lockwarden` command (`bin`: the test's
    /// `env!("CARGO_BIN_EXE_lockwarden")`) trusting this CA through
    /// `SSL_CERT_FILE`, as with any system bundle, with no `REDIS_URL` or
    /// `RUST_LOG` from the environment.
    pub fn lockwarden(&self, bin: &str) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.env("SSL_CERT_FILE", self.path("ca.crt"))
            .env_remove("REDIS_URL")
            .env_remove("RUST_LOG");
        cmd
    }

    /// The CA certificate (PEM), as `Config::tls_root_cert` takes it.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.path("ca.crt")).expect("read the CA certificate")
    }
}
