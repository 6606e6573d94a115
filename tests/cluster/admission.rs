//! Which plugin files a running host admits, at start and by hot reload, under one set of
//! rules: a second file of a plugin name is refused alone, with a line naming both files,
//! and a plugin whose measured memory the host's budget no longer holds is refused alone;
//! the other plugins keep serving. Concurrency is no rule: plugins share the instance pool.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use capstan::dev::Plane;
use capstan_tests::host::{eventually, http_get, install_plugin_crd, start_host_with};
use capstan_tests::plugin;
use serde_json::Value;

const REFUSED_AT_START: &str = "plugin not loaded; the other plugins run";
const REFUSED_LATER: &str = "new plugin file refused; the running version keeps serving";

/// The `error` of the first line with `message` whose error contains `needle`.
fn refusal(log: &[Value], message: &str, needle: &str) -> Option<String> {
    log.iter()
        .filter(|l| l["message"] == message)
        .filter_map(|l| l["error"].as_str())
        .find(|e| e.contains(needle))
        .map(String::from)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_file_of_a_name_or_one_over_the_memory_budget_is_refused_alone() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("admission").await?;
    let dir = std::env::temp_dir().join(format!("capstan-admission-{ns}"));
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(plugin("echo"), dir.join("echo2.wasm"))?;
    // Each plugin reserves what one instance was measured to hold, about 5 MiB (most of it
    // the lift allowance of a 4 MiB response): two fit 12 MiB, three do not. Their
    // concurrency (the default each) adds up to more than the pool of 40, which they share.
    let extra = [
        "--hot-reload",
        "--reload-interval",
        "300ms",
        "--max-instances",
        "40",
        "--memory-budget",
        "12Mi",
    ];
    let mut host = start_host_with(plane, &["echo"], &ns, &dir, &extra)?;
    let (first, again) = (dir.join("echo.wasm"), dir.join("echo2.wasm"));
    let (first, again) = (first.display().to_string(), again.display().to_string());
    let named = eventually("the second echo refused", Duration::from_secs(60), async || {
        Ok(refusal(
            &host.log(),
            REFUSED_AT_START,
            "plugin name echo is taken",
        ))
    })
    .await?;
    // Files are read in name order: the first (echo.wasm) keeps the name.
    ensure!(
        named.contains(&format!("taken by {first}; {again} is refused")),
        "{named}"
    );
    let health = eventually("the health address", Duration::from_secs(10), async || {
        Ok(host.address("health probes"))
    })
    .await?;
    ensure!(http_get(&health, "/healthz")?.0.contains("200"), "the host runs");

    // Hot reload: a third echo (its name is taken), then two plugins (the first fits
    // beside echo in the memory budget, the second does not).
    let put = |from: &str, to: &str| -> Result<()> {
        let tmp = dir.join(format!(".{to}.tmp"));
        std::fs::copy(plugin(from), &tmp)?;
        Ok(std::fs::rename(&tmp, dir.join(to))?)
    };
    put("echo", "echo3.wasm")?;
    put("tenant", "tenant.wasm")?;
    eventually("tenant started", Duration::from_secs(60), async || {
        let log = host.log();
        Ok(log
            .iter()
            .any(|l| l["message"] == "new plugin started" && l["plugin"] == "tenant")
            .then_some(()))
    })
    .await?;
    put("hostile", "hostile.wasm")?;
    let crowded = eventually("hostile refused", Duration::from_secs(60), async || {
        Ok(refusal(&host.log(), REFUSED_LATER, "plugin hostile needs"))
    })
    .await?;
    ensure!(
        crowded.contains("the host's memory budget of 12 MiB has") && crowded.contains("reserved by echo "),
        "{crowded}"
    );
    let third = dir.join("echo3.wasm").display().to_string();
    let log = host.log();
    let taken = refusal(&log, REFUSED_LATER, &third).unwrap_or_default();
    ensure!(
        taken.contains(&format!("plugin name echo is taken by {first}")),
        "{taken}"
    );
    let (status, body) = http_get(&health, "/readyz")?;
    ensure!(body.contains("plugin hostile needs"), "{status}\n{body}");
    host.signal(libc::SIGTERM);
    ensure!(
        host.wait(Duration::from_secs(30))?.code() == Some(0),
        "a clean exit"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// A config entry refused at start and fixed later keeps its entry's rules: a shadow of
/// echo whose file was not a plugin at first starts, once it is, as `echo-shadow` beside
/// the live echo, not as a second live echo (nor is it refused for echo's name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_fixed_after_a_refusal_runs_under_its_entry() -> Result<()> {
    let plane = Plane::shared().await?;
    install_plugin_crd(plane, "echo").await?;
    let ns = plane.namespace("admission-fixed").await?;
    let dir = tempfile::tempdir()?;
    let later = dir.path().join("later.wasm");
    std::fs::write(&later, b"not a plugin yet")?;
    let config = dir.path().join("config.yaml");
    let entries = serde_json::json!({"plugins": [
        {"path": plugin("echo")},
        {"path": later, "name": "echo", "mode": "shadow"},
    ]});
    std::fs::write(&config, entries.to_string())?;
    let args = ["--config", config.to_str().unwrap(), "--namespace", &ns];
    let reload = ["--hot-reload", "--reload-interval", "300ms"];
    let args: Vec<&str> = args.iter().chain(&reload).copied().collect();
    let mut host = capstan_tests::host::Host::start(plane, &args, &dir.path().join("host.log"), &[])?;
    eventually("the broken shadow refused", Duration::from_secs(60), async || {
        Ok(refusal(&host.log(), REFUSED_AT_START, "not a WebAssembly file"))
    })
    .await?;
    let tmp = dir.path().join(".later.tmp");
    std::fs::copy(plugin("echo"), &tmp)?;
    std::fs::rename(&tmp, &later)?;
    let started = eventually("the fixed file started", Duration::from_secs(60), async || {
        let log = host.log();
        let refused = refusal(&log, REFUSED_LATER, "");
        let started = log
            .iter()
            .find(|l| l["message"] == "new plugin started")
            .map(|l| l["plugin"].to_string());
        Ok(started.map(Ok).or(refused.map(Err)))
    })
    .await?;
    ensure!(
        started.as_deref() == Ok("\"echo-shadow\""),
        "the fixed shadow entry ran as {started:?}"
    );
    host.signal(libc::SIGTERM);
    ensure!(
        host.wait(Duration::from_secs(30))?.code() == Some(0),
        "a clean exit"
    );
    Ok(())
}

/// The config's signature policy covers the plugin directory's files too: an unsigned
/// file there is refused, in one line, like a file entry (here it is the only plugin, so
/// the host exits with the line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_covers_the_plugin_directory() -> Result<()> {
    let plane = Plane::shared().await?;
    let dir = tempfile::tempdir()?;
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::copy(plugin("echo"), plugins.join("echo.wasm"))?;
    std::fs::write(
        dir.path().join("team.pub"),
        "a key the files are not signed with\n",
    )?;
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "verify: {keys: [team.pub]}\nplugins: []\n")?;
    let log = dir.path().join("host.log");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--plugins",
        plugins.to_str().unwrap(),
    ];
    let mut host = capstan_tests::host::Host::start(plane, &args, &log, &[])?;
    // Refused at load, the only plugin: the host exits once loading is over, which for a
    // plugin in this test binary's compile cache is seconds; one that ran would serve on.
    let exit = host.wait(Duration::from_secs(120));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let exit = exit.with_context(|| format!("an unsigned directory file ran: {text}"))?;
    ensure!(!exit.success(), "{text}");
    let last = text.trim().lines().last().unwrap_or_default();
    ensure!(
        last.contains("echo.wasm") && last.contains("carries no signature"),
        "{text}"
    );
    Ok(())
}
