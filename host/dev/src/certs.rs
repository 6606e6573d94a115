//! The plane's PKI: one CA, the apiserver's serving cert, a client cert per component,
//! and the service-account signing key. Everything is fresh per plane.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and key written as PEM files.
#[derive(Debug, Clone)]
pub(crate) struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Every file the components are pointed at.
#[derive(Debug, Clone)]
pub(crate) struct Pki {
    pub ca: CertFiles,
    pub apiserver: CertFiles,
    pub admin: CertFiles,
    pub controller_manager: CertFiles,
    pub scheduler: CertFiles,
    pub kwok: CertFiles,
    /// The real node's kubelet, as `system:node:<name>` (the Node authorizer's subject).
    pub kubelet: CertFiles,
    pub kube_proxy: CertFiles,
    /// What kube-apiserver shows the kubelet when it asks for logs, exec or port-forward.
    pub apiserver_kubelet: CertFiles,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

/// Who each client cert authenticates as; the bootstrap RBAC policy already grants the
/// `system:kube-*` users what their component needs.
const ADMIN: (&str, &str) = ("capstan-admin", "system:masters");
const KCM: &str = "system:kube-controller-manager";
const SCHEDULER: &str = "system:kube-scheduler";
const KWOK: (&str, &str) = ("kwok-controller", "system:masters");
const KUBE_PROXY: &str = "system:kube-proxy";
/// Bound to `system:kubelet-api-admin`'s rights through `system:masters`, as kubeadm does.
const APISERVER_KUBELET: (&str, &str) = ("kube-apiserver-kubelet-client", "system:masters");

impl Pki {
    /// Generates all keys and certs into `dir` (created if needed); the kubelet's is for
    /// node `node`.
    pub fn generate(dir: &Path, node: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (ca, issuer) = authority(dir)?;
        let serving_names = [
            "127.0.0.1",
            "localhost",
            "10.0.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ];
        let apiserver = leaf(
            dir,
            "apiserver",
            &issuer,
            dn("kube-apiserver", None),
            serving_names.iter().map(|s| s.to_string()).collect(),
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let client = |file: &str, cn: &str, org: Option<&str>| {
            leaf(
                dir,
                file,
                &issuer,
                dn(cn, org),
                Vec::new(),
                ExtendedKeyUsagePurpose::ClientAuth,
            )
        };
        let admin = client("admin", ADMIN.0, Some(ADMIN.1))?;
        let controller_manager = client("kube-controller-manager", KCM, None)?;
        let scheduler = client("kube-scheduler", SCHEDULER, None)?;
        let kwok = client("kwok", KWOK.0, Some(KWOK.1))?;
        let node_user = format!("system:node:{node}");
        let kubelet = client("kubelet", &node_user, Some("system:nodes"))?;
        let kube_proxy = client("kube-proxy", KUBE_PROXY, None)?;
        let apiserver_kubelet = client(
            "apiserver-kubelet-client",
            APISERVER_KUBELET.0,
            Some(APISERVER_KUBELET.1),
        )?;

        let sa = KeyPair::generate()?;
        let sa_key = dir.join("sa.key");
        let sa_pub = dir.join("sa.pub");
        write_private(&sa_key, &sa.serialize_pem())?;
        std::fs::write(&sa_pub, sa.public_key_pem())?;

        Ok(Self {
            ca,
            apiserver,
            admin,
            controller_manager,
            scheduler,
            kwok,
            kubelet,
            kube_proxy,
            apiserver_kubelet,
            sa_key,
            sa_pub,
        })
    }
}

/// The plane's CA, written to `dir`, and the issuer that signs every leaf with it.
fn authority(dir: &Path) -> Result<(CertFiles, Issuer<'static, KeyPair>)> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name = dn("capstan-plane-ca", None);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca = write_pair(dir, "ca", &ca_cert.pem(), &ca_key)?;
    Ok((ca, Issuer::new(ca_params, ca_key)))
}

fn dn(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    if let Some(org) = org {
        dn.push(DnType::OrganizationName, org);
    }
    dn.push(DnType::CommonName, cn);
    dn
}

fn leaf(
    dir: &Path,
    file: &str,
    issuer: &Issuer<'_, KeyPair>,
    subject: DistinguishedName,
    sans: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
) -> Result<CertFiles> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(sans)?;
    params.distinguished_name = subject;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    let cert = params.signed_by(&key, issuer)?;
    write_pair(dir, file, &cert.pem(), &key)
}

fn write_pair(dir: &Path, file: &str, cert_pem: &str, key: &KeyPair) -> Result<CertFiles> {
    let cert = dir.join(format!("{file}.crt"));
    let key_path = dir.join(format!("{file}.key"));
    std::fs::write(&cert, cert_pem).with_context(|| format!("writing {}", cert.display()))?;
    write_private(&key_path, &key.serialize_pem())?;
    Ok(CertFiles { cert, key: key_path })
}

fn write_private(path: &Path, pem: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(pem.as_bytes())?;
    Ok(())
}
