//! Plugins through a real OCI registry (CNCF Distribution, built from its Go module and
//! started on loopback): `capstan push/pull/inspect`, TLS with a custom CA and basic auth,
//! bad input answered in one line, and the host running, pinning and hot-reloading
//! plugins named by reference on the local plane.

use std::io::{Read, Write};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use anyhow::{Result, ensure};
use capstan::dev::Plane;
use capstan_tests::host::{Host, echo, echo_resource, eventually, install_plugin_crd};
use capstan_tests::oci::Registry;
use capstan_tests::{arg, capstan, plugin};
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

/// `capstan ARGS`, which must succeed; its stdout's one line.
fn ok(args: &[&str]) -> Result<String> {
    let out = capstan(args);
    ensure!(out.status.success(), "capstan {args:?}: {}", shown(&out));
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// `capstan ARGS`, which must fail with exit 2 and one `error:` line naming `cause`.
fn refused(args: &[&str], cause: &str) -> Result<()> {
    let out = capstan(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(2), "capstan {args:?}: {}", shown(&out));
    ensure!(
        stderr.lines().count() == 1 && stderr.starts_with("error: ") && stderr.contains(cause),
        "capstan {args:?} should say `{cause}` in one line: {}",
        shown(&out)
    );
    ensure!(!stderr.contains("panicked"), "{}", shown(&out));
    Ok(())
}

#[test]
fn push_then_pull_by_tag_and_by_digest_gives_the_same_bytes() -> Result<()> {
    let registry = Registry::plain()?;
    let plain = ["--plain-http", registry.addr.as_str()];
    let echo = plugin("echo");
    let tag = registry.reference("plugins/echo:1.0");
    let pinned = ok(&[&["push", arg(&echo), &tag][..], &plain].concat())?;
    ensure!(
        pinned.starts_with(&format!("{tag}@sha256:")) && pinned.len() == tag.len() + 72,
        "push prints the reference pinned to its digest: {pinned}"
    );
    let dir = tempfile::tempdir()?;
    let (by_tag, by_digest) = (dir.path().join("tag.wasm"), dir.path().join("digest.wasm"));
    ensure!(ok(&[&["pull", &tag, "-o", arg(&by_tag)][..], &plain].concat())? == pinned);
    ensure!(ok(&[&["pull", &pinned, "-o", arg(&by_digest)][..], &plain].concat())? == pinned);
    let original = std::fs::read(&echo)?;
    ensure!(std::fs::read(&by_tag)? == original && std::fs::read(&by_digest)? == original);

    let report = ok(&[&["inspect", &pinned][..], &plain].concat())?;
    ensure!(
        report.contains("\nname: echo\n"),
        "inspect works on a reference: {report}"
    );

    // The tag moves to another plugin; the pinned digest still means the first.
    let moved = ok(&[&["push", arg(&plugin("echo-canary")), &tag][..], &plain].concat())?;
    ensure!(moved != pinned);
    let again = dir.path().join("again.wasm");
    ok(&[&["pull", &pinned, "-o", arg(&again)][..], &plain].concat())?;
    ensure!(
        std::fs::read(&again)? == original,
        "a pinned digest is not the moved tag"
    );
    Ok(())
}

#[test]
fn a_registry_with_tls_and_basic_auth_needs_its_ca_and_credentials() -> Result<()> {
    let registry = Registry::secured()?;
    let ca = registry.ca.clone().expect("a secured registry has a CA");
    let auth = registry.auth_file()?;
    let tag = registry.reference("plugins/echo:1.0");
    let echo = plugin("echo");
    let trusted = ["--registry-ca", arg(&ca), "--registry-auth", arg(&auth)];
    let pinned = ok(&[&["push", arg(&echo), &tag][..], &trusted].concat())?;
    let out = tempfile::tempdir()?;
    let file = out.path().join("echo.wasm");
    ok(&[&["pull", &pinned, "-o", arg(&file)][..], &trusted].concat())?;
    ensure!(std::fs::read(&file)? == std::fs::read(&echo)?);

    let elsewhere = out.path().join("elsewhere");
    let fresh = ["--pull-dir", arg(&elsewhere)];
    let no_file = out.path().join("none.wasm");
    refused(
        &[
            &["pull", &pinned, "-o", arg(&no_file), "--registry-ca", arg(&ca)][..],
            &fresh,
        ]
        .concat(),
        &pinned,
    )?;
    refused(
        &[
            &[
                "pull",
                &pinned,
                "-o",
                arg(&no_file),
                "--registry-auth",
                arg(&auth),
            ][..],
            &fresh,
        ]
        .concat(),
        &pinned,
    )?;
    ensure!(!no_file.exists(), "nothing is written when a pull fails");
    Ok(())
}

/// A "registry" that answers every request with an HTML page, as a captive portal or a
/// misconfigured proxy does.
fn html_server() -> Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?.to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = "<!DOCTYPE html>\n<html><head><title>Sign in</title></head>\n<body><h1>Please sign in</h1>\n</body></html>\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(addr)
}

/// Push an artifact `capstan push` would never make: a Wasm config over `layer`.
fn push_odd(registry: &Registry, path: &str, media_type: &str, layer: Vec<u8>) -> Result<String> {
    use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
    use oci_client::manifest::OciImageManifest;
    let reference: oci_client::Reference = format!("{}/{path}", registry.addr).parse()?;
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let layers = vec![ImageLayer::new(layer, media_type.to_string(), None)];
    let config = Config::new(
        br#"{"created":"2026-01-01T00:00:00Z","architecture":"wasm","os":"wasip2","layerDigests":[]}"#
            .to_vec(),
        "application/vnd.wasm.config.v0+json".to_string(),
        None,
    );
    let mut manifest = OciImageManifest::build(&layers, &config, None);
    manifest.media_type = Some("application/vnd.oci.image.manifest.v1+json".to_string());
    let auth = oci_client::secrets::RegistryAuth::Anonymous;
    tokio::runtime::Runtime::new()?.block_on(client.push(
        &reference,
        &layers,
        config,
        &auth,
        Some(manifest),
    ))?;
    Ok(registry.reference(path))
}

#[test]
fn bad_references_and_bad_artifacts_are_one_line_errors() -> Result<()> {
    let registry = Registry::plain()?;
    let plain = ["--plain-http", registry.addr.as_str()];
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out.wasm");
    let pull = |reference: &str, extra: &[&str], cause: &str| {
        refused(
            &[&["pull", reference, "-o", arg(&out)][..], &plain, extra].concat(),
            cause,
        )
    };
    pull("oci://echo:1.0", &[], "name the registry")?;
    pull("oci://reg.example/Echo:1.0", &[], "malformed reference")?;
    pull(
        &format!("{}@sha256:abc", registry.reference("echo:1.0")),
        &[],
        "malformed",
    )?;
    pull(
        &registry.reference("plugins/absent:1.0"),
        &[],
        "plugins/absent:1.0",
    )?;

    let html = html_server()?;
    refused(
        &[
            "pull",
            &format!("oci://{html}/plugins/echo:1.0"),
            "-o",
            arg(&out),
            "--plain-http",
            &html,
        ],
        &html,
    )?;

    let tar = push_odd(
        &registry,
        "odd/tar:1",
        "application/vnd.oci.image.layer.v1.tar",
        b"not a plugin".to_vec(),
    )?;
    pull(&tar, &[], "not application/wasm")?;
    let text = push_odd(
        &registry,
        "odd/text:1",
        "application/wasm",
        b"#!/bin/sh\necho hi\n".to_vec(),
    )?;
    pull(&text, &[], "not WebAssembly")?;

    let tag = registry.reference("plugins/echo:1.0");
    ok(&[&["push", arg(&plugin("echo")), &tag][..], &plain].concat())?;
    pull(&tag, &["--max-bytes", "1000"], "over the maximum of 1000")?;
    pull(&tag, &["--require-digest"], "requireDigest")?;
    let garbled = dir.path().join("docker-config.json");
    std::fs::write(&garbled, "{\"auths\": [")?;
    pull(&tag, &["--registry-auth", arg(&garbled)], "credentials for")?;
    ensure!(!out.exists(), "nothing is written when a pull fails");

    let not_wasm = dir.path().join("x.wasm");
    std::fs::write(&not_wasm, "plugins:\n")?;
    refused(
        &[&["push", arg(&not_wasm), &tag][..], &plain].concat(),
        "not a WebAssembly file",
    )?;
    Ok(())
}

/// A config file with `registry.plainHttp` and one plugin entry at `reference`.
fn write_config(file: &Path, registry: &Registry, reference: &str) -> Result<()> {
    let config = serde_json::json!({
        "registry": {"plainHttp": [registry.addr]},
        "plugins": [{"path": reference, "name": "echo"}],
    });
    // Written beside and renamed, as a ConfigMap update lands.
    let tmp = file.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_string(&config)?)?;
    std::fs::rename(&tmp, file)?;
    Ok(())
}

/// The Job of Echo `name`, once there is one.
async fn job_of(jobs: &Api<Job>, name: &str) -> Result<Job> {
    eventually(
        &format!("the Job of {name}"),
        Duration::from_secs(60),
        async || {
            let listed = jobs.list(&ListParams::default()).await?;
            Ok(listed
                .items
                .into_iter()
                .find(|j| j.metadata.name.as_deref().is_some_and(|n| n.starts_with(name))))
        },
    )
    .await
}

fn canary(job: &Job) -> bool {
    job.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key("capstan.dev/canary"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_runs_a_pinned_reference_follows_a_changed_one_and_outlives_its_registry() -> Result<()> {
    let mut registry = Registry::plain()?;
    let plain = ["--plain-http", registry.addr.as_str()];
    let tag = registry.reference("plugins/echo:stable");
    let v1 = ok(&[&["push", arg(&plugin("echo")), &tag][..], &plain].concat())?;

    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("registry").await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("config.yaml");
    write_config(&config, &registry, &v1)?;
    let host = Host::start(
        plane,
        &[
            "--config",
            arg(&config),
            "--namespace",
            &ns,
            "--hot-reload",
            "--reload-interval",
            "200ms",
        ],
        &dir.path().join("host.log"),
        &[],
    )?;
    let client = plane.client().await?;
    let echoes: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &echo_resource());
    let jobs: Api<Job> = Api::namespaced(client, &ns);
    echoes
        .create(&PostParams::default(), &echo("first", "hello")?)
        .await?;
    ensure!(
        !canary(&job_of(&jobs, "first").await?),
        "v1 makes Echo's own Jobs"
    );
    ensure!(
        host.log()
            .iter()
            .any(|l| l["message"] == "plugin pulled" && l["reference"] == v1.as_str()),
        "the host says what it pulled"
    );

    // The tag moves on; the pinned digest in the config does not.
    let v2 = ok(&[&["push", arg(&plugin("echo-canary")), &tag][..], &plain].concat())?;
    echoes
        .create(&PostParams::default(), &echo("second", "hello")?)
        .await?;
    ensure!(
        !canary(&job_of(&jobs, "second").await?),
        "a moved tag is not followed"
    );

    // A new reference in the config is pulled and swapped in.
    write_config(&config, &registry, &v2)?;
    eventually("the reload to v2", Duration::from_secs(60), async || {
        Ok(host.logged("plugin reloaded").then_some(()))
    })
    .await?;
    echoes
        .create(&PostParams::default(), &echo("third", "hello")?)
        .await?;
    ensure!(
        canary(&job_of(&jobs, "third").await?),
        "v2 reconciles after the reference changed"
    );

    // The registry goes away: a reference it cannot serve leaves v2 running.
    registry.stop();
    let gone = format!("{tag}@sha256:{}", "0".repeat(64));
    write_config(&config, &registry, &gone)?;
    eventually("the failed pull", Duration::from_secs(90), async || {
        Ok(host
            .logged("pull failed; the running version stays")
            .then_some(()))
    })
    .await?;
    echoes
        .create(&PostParams::default(), &echo("fourth", "hello")?)
        .await?;
    ensure!(
        canary(&job_of(&jobs, "fourth").await?),
        "the running version keeps serving"
    );
    Ok(())
}
