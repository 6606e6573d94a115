//! A real OCI registry for the tests: the CNCF Distribution registry, built from its pinned
//! Go module into the cache (`scripts/k8s-build.sh registry`) and started on loopback,
//! over plain HTTP or with TLS and basic auth.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The pinned registry binary, built into the cache when missing.
pub fn registry_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| crate::pinned_tool("registry", "REGISTRY_VERSION", "registry"))
}

/// A user of a registry with basic auth.
pub const USER: (&str, &str) = ("capstan", "s3cret-pw");

/// A running registry; stopped (and its storage removed) when dropped.
pub struct Registry {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The CA that signed its certificate, with TLS.
    pub ca: Option<PathBuf>,
}

impl Registry {
    /// A registry over plain HTTP, without auth.
    pub fn plain() -> Result<Registry> {
        Self::start(false)
    }

    /// A registry over TLS (its CA in [`Registry::ca`]) that wants [`USER`]'s password.
    pub fn secured() -> Result<Registry> {
        Self::start(true)
    }

    fn start(secured: bool) -> Result<Registry> {
        let dir = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let storage = dir.path().join("storage");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n  secret: capstan-tests\n",
            storage.display()
        );
        let mut ca = None;
        if secured {
            let (ca_file, cert, key) = certificates(dir.path())?;
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ));
            let htpasswd = dir.path().join("htpasswd");
            let hash = bcrypt::hash(USER.1, 4)?;
            std::fs::write(&htpasswd, format!("{}:{hash}\n", USER.0))?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: capstan\n    path: {}\n",
                htpasswd.display()
            ));
            ca = Some(ca_file);
        }
        let file = dir.path().join("config.yml");
        std::fs::write(&file, config)?;
        let child = Command::new(registry_bin())
            .arg("serve")
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the registry")?;
        let registry = Registry {
            child: Some(child),
            dir,
            addr,
            ca,
        };
        registry.wait_listening()?;
        Ok(registry)
    }

    fn wait_listening(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(&self.addr).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        anyhow::bail!("the registry did not listen on {} within 30 s", self.addr)
    }

    /// Where it keeps blobs and manifests (`docker/registry/v2/…`), to tamper with.
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// `oci://ADDR/PATH`.
    pub fn reference(&self, path: &str) -> String {
        format!("oci://{}/{path}", self.addr)
    }

    /// A Docker config file holding [`USER`]'s credentials for this registry.
    pub fn auth_file(&self) -> Result<PathBuf> {
        let file = self.dir.path().join("docker-config.json");
        let auth = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{}:{}", USER.0, USER.1),
        );
        std::fs::write(
            &file,
            format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.addr),
        )?;
        Ok(file)
    }

    /// Stop it (the registry "goes away"); its storage is kept until drop.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A CA and a serving certificate for 127.0.0.1 signed by it: (ca, cert, key).
fn certificates(dir: &Path) -> Result<(PathBuf, PathBuf, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?
        .signed_by(&key, &issuer)?;
    let files = (
        dir.join("ca.pem"),
        dir.join("registry.pem"),
        dir.join("registry.key"),
    );
    std::fs::write(&files.0, ca_cert.pem())?;
    std::fs::write(&files.1, cert.pem())?;
    std::fs::write(&files.2, key.serialize_pem())?;
    Ok(files)
}
