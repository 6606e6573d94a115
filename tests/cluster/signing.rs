//! Signed plugins, against a real registry (CNCF Distribution, TLS and basic auth): key
//! pairs from `capstan generate-key-pair`, `capstan sign` pushing a cosign signature,
//! `capstan verify` accepting key A and refusing unsigned, key-B and tampered plugins, and
//! a host on the local plane whose verify policy loads the plugin signed with A and refuses
//! the others (unsigned, signed with B, a file, a signed layer changed) in one line each
//! while it serves.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::{Result, ensure};
use capstan::dev::Plane;
use capstan_tests::host::{Host, echo, echo_resource, eventually, install_plugin_crd};
use capstan_tests::oci::Registry;
use capstan_tests::{arg, capstan_with, plugin};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams, PostParams};

fn shown(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A secured registry, two key pairs (A with a password, B without) and the flags that
/// reach the registry.
struct Setup {
    registry: Registry,
    dir: tempfile::TempDir,
    flags: Vec<String>,
}

const PASSWORD: &str = "correct horse";

impl Setup {
    fn new() -> Result<Setup> {
        let registry = Registry::secured()?;
        let dir = tempfile::tempdir()?;
        let ca = registry.ca.clone().expect("a secured registry has a CA");
        let flags = vec![
            "--registry-ca".to_string(),
            arg(&ca).to_string(),
            "--registry-auth".to_string(),
            arg(&registry.auth_file()?).to_string(),
        ];
        let setup = Setup { registry, dir, flags };
        setup.ok(
            &["generate-key-pair", "--output-prefix", arg(&setup.file("a"))],
            PASSWORD,
        )?;
        setup.ok(
            &["generate-key-pair", "--output-prefix", arg(&setup.file("b"))],
            "",
        )?;
        Ok(setup)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&self, args: &[&str], password: &str) -> Output {
        let flags: Vec<&str> = if ["generate-key-pair"].contains(&args[0]) {
            Vec::new()
        } else {
            self.flags.iter().map(String::as_str).collect()
        };
        capstan_with(&[args, &flags].concat(), &[("COSIGN_PASSWORD", password)])
    }

    /// `capstan ARGS` must succeed; its stdout.
    fn ok(&self, args: &[&str], password: &str) -> Result<String> {
        let out = self.run(args, password);
        ensure!(out.status.success(), "capstan {args:?}: {}", shown(&out));
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    }

    /// Push `plugin` as `path`; the pinned reference.
    fn push(&self, plugin: &Path, path: &str) -> Result<String> {
        self.ok(&["push", arg(plugin), &self.registry.reference(path)], "")
    }

    /// `capstan verify REF --key KEY` with a fresh store: exit 1 and one `refused:` line
    /// naming `cause`, or exit 0 when `cause` is empty.
    fn verify(&self, reference: &str, key: &str, cause: &str) -> Result<()> {
        let store = tempfile::tempdir()?;
        let key = self.file(&format!("{key}.pub"));
        let out = self.run(
            &[
                "verify",
                reference,
                "--key",
                arg(&key),
                "--pull-dir",
                arg(store.path()),
            ],
            "",
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        if cause.is_empty() {
            ensure!(out.status.success(), "verify {reference}: {}", shown(&out));
            ensure!(String::from_utf8_lossy(&out.stdout).contains("signed by"));
            return Ok(());
        }
        ensure!(
            out.status.code() == Some(1)
                && stderr.lines().count() == 1
                && stderr.starts_with("refused: ")
                && stderr.contains(cause)
                && !stderr.contains("panicked"),
            "verify {reference} should refuse with `{cause}` in one line: {}",
            shown(&out)
        );
        Ok(())
    }
}

/// The registry's file holding the blob whose bytes are `content`.
fn blob_file(root: &Path, content: &[u8]) -> Option<PathBuf> {
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "data")
                && std::fs::read(&path).is_ok_and(|b| b == content)
            {
                return Some(path);
            }
        }
    }
    None
}

#[test]
fn verify_accepts_the_signing_key_and_refuses_unsigned_other_key_and_tampered() -> Result<()> {
    let setup = Setup::new()?;
    let key_a = setup.file("a.key");
    let key_a_text = std::fs::read_to_string(&key_a)?;
    ensure!(
        key_a_text.contains("ENCRYPTED SIGSTORE PRIVATE KEY"),
        "cosign's key format"
    );

    let echo = plugin("echo");
    let pinned = setup.push(&echo, "plugins/echo:1.0")?;
    // Signed by tag: the digest the tag names is what gets signed.
    let signed = setup.ok(
        &[
            "sign",
            &setup.registry.reference("plugins/echo:1.0"),
            "--key",
            arg(&key_a),
        ],
        PASSWORD,
    )?;
    ensure!(
        signed == pinned,
        "sign prints the reference it signed: {signed} vs {pinned}"
    );
    setup.verify(&pinned, "a", "")?;
    setup.verify(&setup.registry.reference("plugins/echo:1.0"), "a", "")?;

    // The wrong password is one line, nothing pushed.
    let out = setup.run(&["sign", &pinned, "--key", arg(&key_a)], "wrong");
    ensure!(out.status.code() == Some(2) && !String::from_utf8_lossy(&out.stderr).contains("panicked"));

    setup.verify(&pinned, "b", "not signed by a trusted key")?;

    let unsigned = setup.push(&plugin("echo-canary"), "plugins/unsigned:1.0")?;
    setup.verify(&unsigned, "a", "not signed")?;

    // Signed with B, checked against A.
    let by_b = setup.push(&plugin("echo-canary"), "plugins/by-b:1.0")?;
    setup.ok(&["sign", &by_b, "--key", arg(&setup.file("b.key"))], "")?;
    setup.verify(&by_b, "b", "")?;
    setup.verify(&by_b, "a", "not signed by a trusted key")?;

    // One byte of a signed plugin changed and pushed again under its tag: a new digest,
    // which nobody signed.
    let mut bytes = std::fs::read(&echo)?;
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let changed = setup.file("changed.wasm");
    std::fs::write(&changed, &bytes)?;
    let retagged = setup.push(&changed, "plugins/echo:1.0")?;
    ensure!(retagged != pinned);
    setup.verify(&setup.registry.reference("plugins/echo:1.0"), "a", "not signed")?;

    // One byte of the signed layer changed in the registry's own storage: the digest the
    // signature names is the same, the bytes are not.
    let original = std::fs::read(&echo)?;
    let file = blob_file(&setup.registry.storage(), &original).expect("the registry keeps the layer");
    std::fs::write(&file, &bytes)?;
    setup.verify(&pinned, "a", "digest")?;

    // Bad keys are errors of the command, exit 2.
    let junk = setup.file("junk.pub");
    std::fs::write(&junk, "not a key")?;
    let out = setup.run(&["verify", &pinned, "--key", arg(&junk)], "");
    ensure!(out.status.code() == Some(2), "{}", shown(&out));
    ensure!(
        String::from_utf8_lossy(&out.stderr).contains("not a public key"),
        "{}",
        shown(&out)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_under_a_verify_policy_runs_the_signed_plugin_and_refuses_the_others() -> Result<()> {
    let setup = Setup::new()?;
    let signed = setup.push(&plugin("echo"), "plugins/echo:1.0")?;
    setup.ok(&["sign", &signed, "--key", arg(&setup.file("a.key"))], PASSWORD)?;
    let unsigned = setup.push(&plugin("echo-canary"), "plugins/unsigned:1.0")?;
    let by_b = setup.push(&plugin("echo-canary"), "plugins/by-b:1.0")?;
    setup.ok(&["sign", &by_b, "--key", arg(&setup.file("b.key"))], "")?;
    let other = setup.push(&plugin("scheduled-echo"), "plugins/scheduled-echo:1.0")?;
    setup.ok(&["sign", &other, "--key", arg(&setup.file("b.key"))], "")?;
    // Signed with A, then one byte of its layer changed in the registry's storage.
    let tenant = plugin("tenant");
    let tampered = setup.push(&tenant, "plugins/tampered:1.0")?;
    setup.ok(&["sign", &tampered, "--key", arg(&setup.file("a.key"))], PASSWORD)?;
    let mut bytes = std::fs::read(&tenant)?;
    let blob = blob_file(&setup.registry.storage(), &bytes).expect("the registry keeps the layer");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&blob, &bytes)?;

    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    install_plugin_crd(plane, "scheduled-echo").await?;
    let ns = plane.namespace("signing").await?;
    let config = setup.file("config.yaml");
    // A file under the policy, and a file of the plugin directory: both unsigned.
    let from_file = setup.file("echo_canary.wasm");
    std::fs::copy(plugin("echo-canary"), &from_file)?;
    let dir = setup.file("plugins");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(plugin("tenant"), dir.join("tenant.wasm"))?;
    let registry = &setup.registry;
    let text = serde_json::json!({
        "registry": {
            "caFiles": [registry.ca.clone().expect("a CA")],
            "authFile": registry.auth_file()?,
        },
        "verify": {"keys": [setup.file("a.pub")]},
        "plugins": [
            {"path": signed, "name": "echo"},
            {"path": unsigned, "name": "unsigned"},
            {"path": by_b, "name": "by-b"},
            {"path": from_file, "name": "from-file"},
            {"path": tampered, "name": "tampered"},
            // Its own policy instead of the global one.
            {"path": other, "verify": {"keys": [setup.file("b.pub")]}},
        ],
    });
    std::fs::write(&config, serde_json::to_string(&text)?)?;
    let host = Host::start(
        plane,
        &[
            "--config",
            arg(&config),
            "--plugins",
            arg(&dir),
            "--namespace",
            &ns,
            "--hot-reload",
            "--reload-interval",
            "200ms",
        ],
        &setup.file("host.log"),
        &[],
    )?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client, &ns);
    echoes
        .create(&PostParams::default(), &echo("first", "hello")?)
        .await?;
    eventually("the signed Echo's Job", Duration::from_secs(60), async || {
        let listed = jobs.list(&ListParams::default()).await?;
        Ok(listed
            .items
            .iter()
            .any(|j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with("first")))
            .then_some(()))
    })
    .await?;

    let log = host.log();
    let refused: Vec<&serde_json::Value> = log
        .iter()
        .filter(|l| l["message"] == "plugin not loaded; the other plugins run")
        .collect();
    let said = |what: &str, why: &str| {
        refused.iter().any(|l| {
            let (path, error) = (
                l["path"].as_str().unwrap_or(""),
                l["error"].as_str().unwrap_or(""),
            );
            (path.contains(what) || error.contains(what)) && error.contains(why) && !error.contains('\n')
        })
    };
    ensure!(
        said("unsigned", "not signed"),
        "the unsigned plugin is refused: {refused:?}"
    );
    ensure!(
        said("by-b", "not signed by a trusted key"),
        "B's plugin is refused: {refused:?}"
    );
    ensure!(
        said("echo_canary.wasm", "carries no signature"),
        "a file under a policy is refused: {refused:?}"
    );
    ensure!(
        said("tampered", "digest"),
        "a changed layer is refused: {refused:?}"
    );
    ensure!(
        said("tenant.wasm", "carries no signature"),
        "a file of the plugin directory under a policy is refused: {refused:?}"
    );
    ensure!(refused.len() == 5, "exactly five refused: {refused:?}");
    ensure!(
        log.iter()
            .any(|l| l["message"] == "plugin signature verified" && l["reference"] == signed.as_str()),
        "the host says whose signature it checked"
    );
    ensure!(
        log.iter()
            .filter(|l| l["message"] == "plugin signature verified")
            .count()
            == 2,
        "echo under the global key, scheduled-echo under its own"
    );

    // The refused file rewritten (with hot reload) is refused again, under the same
    // policy: it never runs, whatever its bytes.
    let tmp = setup.file("echo_canary.tmp");
    std::fs::copy(plugin("echo-rogue"), &tmp)?;
    std::fs::rename(&tmp, &from_file)?;
    let rewritten = from_file.display().to_string();
    eventually(
        "the rewritten file refused",
        Duration::from_secs(60),
        async || {
            Ok(host
                .log()
                .iter()
                .any(|l| {
                    l["message"] == "new plugin file refused; the running version keeps serving"
                        && l["path"] == rewritten.as_str()
                        && l["error"]
                            .as_str()
                            .is_some_and(|e| e.contains("carries no signature"))
                })
                .then_some(()))
        },
    )
    .await?;
    ensure!(
        !host.logged("new plugin started"),
        "a file refused under a policy ran once rewritten"
    );

    // A new version under the policy that nobody signed: refused, the signed one serves on.
    let mut text = text;
    text["plugins"][0]["path"] = serde_json::json!(unsigned);
    let tmp = setup.file("config.tmp");
    std::fs::write(&tmp, serde_json::to_string(&text)?)?;
    std::fs::rename(&tmp, &config)?;
    eventually("the refused reload", Duration::from_secs(60), async || {
        Ok(host
            .log()
            .iter()
            .any(|l| {
                l["message"] == "pull failed; the running version stays"
                    && l["error"].as_str().is_some_and(|e| e.contains("not signed"))
            })
            .then_some(()))
    })
    .await?;
    echoes
        .create(&PostParams::default(), &echo("second", "hello")?)
        .await?;
    eventually("the second Echo's Job", Duration::from_secs(60), async || {
        let listed = jobs.list(&ListParams::default()).await?;
        Ok(listed
            .items
            .iter()
            .find(|j| {
                j.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("second"))
            })
            .map(|j| j.metadata.labels.clone().unwrap_or_default()))
    })
    .await
    .and_then(|labels| {
        ensure!(
            !labels.contains_key("capstan.dev/canary"),
            "the signed version still reconciles: {labels:?}"
        );
        Ok(())
    })?;
    Ok(())
}
