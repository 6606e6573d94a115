//! The Helm chart `charts/capstan` rendered by the pinned `helm` alone, no cluster:
//! `capstan inspect --helm-values` output as a values file, one clear message for each
//! typo or unusable plugin, a rollout only without hot reload, and Secrets granted by the
//! operator's values, never by a plugin's.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use capstan_tests::{capstan_bin, compile_cache, plugin};
use serde_json::Value;

use capstan_tests::helm::{
    chart, ci_values, echo_grants, event_grants, grant, grants, helm, host_config, of_kind, one, render,
    scheduled_echo_grants, strings, union, wasm_from, with_custom_section,
};

#[test]
fn inspect_prints_the_values_entry_the_chart_takes() -> Result<()> {
    let ha: Value = serde_saphyr::from_str(&std::fs::read_to_string(ci_values("ha-values.yaml"))?)?;
    let dir = std::env::temp_dir().join(format!("capstan-helm-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for name in ["echo", "scheduled-echo"] {
        let out = Command::new(capstan_bin())
            .args(["inspect", "--helm-values"])
            .arg(plugin(name))
            .env("CAPSTAN_CACHE_DIR", compile_cache())
            .output()?;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout)?;
        let printed: Value = serde_saphyr::from_str(&text)?;
        let entry = &printed["plugins"][name];
        // The ci values were written from this output: the same kinds, key for key.
        assert_eq!(entry["parent"], ha["plugins"][name]["parent"], "{name}");
        assert_eq!(entry["children"], ha["plugins"][name]["children"], "{name}");
        assert_eq!(entry["related"], ha["plugins"][name]["related"], "{name}");
        assert!(entry.get("source").is_none(), "the source is the user's to add");

        // The user's flow: that output as a values file plus the file itself installs.
        let values = dir.join(format!("{name}.yaml"));
        std::fs::write(&values, &text)?;
        let docs = render(
            "capstan",
            &[
                "-f",
                values.to_str().unwrap(),
                "--set-file",
                &wasm_from(name, &plugin(name)),
            ],
        )?;
        let role = one(&docs, "ClusterRole");
        let expected = match name {
            "echo" => echo_grants(),
            _ => scheduled_echo_grants(),
        };
        assert_eq!(grants(role), union([expected, event_grants()]), "{name}");
    }
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn typos_and_unusable_plugins_fail_helm_with_one_clear_message() {
    let echo = wasm_from("echo", &plugin("echo"));
    let single = ci_values("single-values.yaml");
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let big_file = std::env::temp_dir().join(format!("capstan-big-{}.wasm", std::process::id()));
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.resize(1_100_000, 0xff);
    std::fs::write(&big_file, bytes).unwrap();
    let big = wasm_from("echo", &big_file);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--set-file", &big],
            "a ConfigMap holds at most 1048576: ship it in a volume",
        ),
        (
            vec!["--set", "replicaz=2"],
            "additional properties 'replicaz' not allowed",
        ),
        (
            vec!["--set", "leaderElection.leaseDuraton=20s"],
            "additional properties 'leaseDuraton' not allowed",
        ),
        (
            vec!["--set", "plugins.echo.limits.deadlin=1s"],
            "additional properties 'deadlin' not allowed",
        ),
        (
            vec!["--set", "plugins.echo.parent.namespace=true"],
            "additional properties 'namespace' not allowed",
        ),
        (vec!["--set", "resync=soon"], "/resync"),
        (vec!["--set", "logFormat=yaml"], "/logFormat"),
        (
            vec!["--set", "replicas=2"],
            "more than one host needs leader election",
        ),
        (
            vec![
                "--set",
                "sharding.enabled=true",
                "--set",
                "leaderElection.enabled=true",
            ],
            "leaderElection.enabled and sharding.enabled exclude each other",
        ),
        (vec!["--set", "sharding.key=name"], "/sharding/key"),
        (
            vec!["--set", "plugins.echo.source.wasm=echo.wasm"],
            "plugins.echo.source.wasm is not a WebAssembly file",
        ),
        (
            vec!["--set", "plugins.echo.source.volume.emptyDir.medium=Memory"],
            "plugins.echo.source needs exactly one of wasm",
        ),
        (
            vec!["--set", "plugins.echo.source.file=other.wasm"],
            "plugins.echo.source.file goes with source.volume",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["template", "capstan", chart, "-f", &single];
        // --set-file wins over --set; the case that sets the wasm itself goes without.
        if !extra.iter().any(|a| a.starts_with("plugins.echo.source.wasm=")) {
            args.extend(["--set-file", &echo]);
        }
        args.extend(extra.iter());
        let Err(err) = helm(&args, None) else {
            panic!("{extra:?} must fail");
        };
        assert!(err.contains(needle), "{extra:?}: {needle:?} not in {err}");
        // One error, not a wall of text.
        assert!(err.trim().lines().count() <= 4, "{extra:?}: {err}");
    }
    // A values file without any plugin says what to add.
    let Err(err) = helm(&["template", "capstan", chart], None) else {
        panic!("no plugins must fail");
    };
    assert!(err.contains("capstan inspect --helm-values"), "{err}");
    std::fs::remove_file(big_file).ok();
}

#[test]
fn sharded_replicas_all_run_and_hold_only_member_leases() -> Result<()> {
    let docs = render(
        "capstan",
        &[
            "-f",
            &ci_values("single-values.yaml"),
            "--set",
            "replicas=3",
            "--set",
            "sharding.enabled=true",
            "--set",
            "sharding.key=namespace",
            "--set-file",
            &wasm_from("echo", &plugin("echo")),
        ],
    )?;
    let deployment = one(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    // Every replica runs at once, so a rollout need not stop them all first.
    assert!(
        deployment["spec"]["strategy"].is_null(),
        "{}",
        deployment["spec"]["strategy"]
    );
    let args: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for expected in [
        "--sharding",
        "--shard-key=namespace",
        "--leader-election-namespace=capstan",
    ] {
        assert!(args.contains(&expected), "{expected} in {args:?}");
    }
    assert!(!args.contains(&"--leader-elect"), "no leader election: {args:?}");
    let roles = of_kind(&docs, "Role");
    let sharding = roles
        .iter()
        .find(|r| {
            r["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-sharding"))
        })
        .expect("the sharding Role");
    assert_eq!(
        sharding["rules"],
        serde_json::json!([{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "patch", "delete"],
        }])
    );
    Ok(())
}

#[test]
fn hot_reload_keeps_the_pod_template_and_without_it_a_new_plugin_rolls_the_deployment() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-helm-rollout-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let v2 = dir.join("echo-v2.wasm");
    std::fs::write(
        &v2,
        with_custom_section(&std::fs::read(plugin("echo"))?, "capstan-test", b"v2"),
    )?;
    let template = |hot: bool, wasm: &Path| -> Result<Value> {
        let hot = format!("hotReload.enabled={hot}");
        let docs = render(
            "capstan",
            &[
                "-f",
                &ci_values("single-values.yaml"),
                "--set",
                &hot,
                "--set-file",
                &wasm_from("echo", wasm),
            ],
        )?;
        Ok(one(&docs, "Deployment")["spec"]["template"].clone())
    };
    let v1 = plugin("echo");
    assert_eq!(
        template(true, &v1)?,
        template(true, &v2)?,
        "hot reload: no rollout"
    );
    assert_ne!(
        template(false, &v1)?,
        template(false, &v2)?,
        "no hot reload: a rollout"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn secrets_are_granted_by_the_operator_never_by_the_plugin() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-helm-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let values = dir.join("vault.yaml");
    // What `capstan inspect --helm-values` prints for a plugin that declares Secret.
    std::fs::write(
        &values,
        "plugins:\n  vault:\n    source: {volume: {emptyDir: {}}, file: vault.wasm}\n    \
         parent: {group: example.com, version: v1, kind: Vault, plural: vaults, namespaced: true}\n    \
         children: [{group: \"\", version: v1, kind: Secret, plural: secrets, namespaced: true}]\n",
    )?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(
        refused.to_string().contains("plugins.vault.allowSecrets=true"),
        "{refused}"
    );
    let docs = render(
        "capstan",
        &[
            "-f",
            values.to_str().unwrap(),
            "--set",
            "plugins.vault.allowSecrets=true",
        ],
    )?;
    let config = host_config(&docs);
    assert!(config.contains("allowSecrets: true"), "{config}");
    let granted = of_kind(&docs, "ClusterRole").iter().any(|r| {
        r["rules"].as_array().into_iter().flatten().any(|rule| {
            rule["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == "secrets"))
        })
    });
    assert!(granted, "the operator's grant becomes RBAC for Secrets");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn related_kinds_are_read_only_secrets_among_them_only_by_grant_and_settings_and_updates_reach_the_host()
-> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-helm-related-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let values = dir.join("reader.yaml");
    // What `capstan inspect --helm-values` prints for a plugin that reads Secrets and
    // ConfigMaps, with settings the operator adds.
    std::fs::write(
        &values,
        "plugins:\n  reader:\n    source: {volume: {emptyDir: {}}, file: reader.wasm}\n    \
         parent: {group: example.com, version: v1, kind: Reader, plural: readers, namespaced: true}\n    \
         children: [{group: batch, version: v1, kind: Job, plural: jobs, namespaced: true}]\n    \
         related:\n      - {group: \"\", version: v1, kind: ConfigMap, plural: configmaps, namespaced: true}\n      \
         - {group: \"\", version: v1, kind: Secret, plural: secrets, namespaced: true}\n    \
         settings: {image: \"registry.example.com/tools:1\", backoffLimit: 2}\n    \
         allowNamespaces: [\"*\"]\n    \
         updates: {Job: {method: RollingRecreate, statusChecks: {conditions: [{type: Complete, status: \"True\"}]}}}\n",
    )?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(
        refused.to_string().contains("plugins.reader.allowSecrets=true"),
        "reading Secrets needs the grant too: {refused}"
    );
    let docs = render(
        "capstan",
        &[
            "-f",
            values.to_str().unwrap(),
            "--set",
            "plugins.reader.allowSecrets=true",
        ],
    )?;
    let rules = union(of_kind(&docs, "ClusterRole").into_iter().map(grants));
    let reads = |resource: &str| grant("", resource, &["get", "list", "watch"]);
    for resource in ["configmaps", "secrets"] {
        let held: BTreeSet<_> = rules.iter().filter(|g| g.1 == resource).cloned().collect();
        assert_eq!(held, reads(resource), "{resource}: read, never written");
    }
    let config: serde_json::Value = serde_saphyr::from_str(host_config(&docs))?;
    assert_eq!(
        config["plugins"][0]["settings"],
        serde_json::json!({"image": "registry.example.com/tools:1", "backoffLimit": 2}),
        "{config}"
    );
    assert_eq!(config["plugins"][0]["allowNamespaces"], serde_json::json!(["*"]));
    assert_eq!(
        config["plugins"][0]["updates"],
        serde_json::json!({"Job": {"method": "RollingRecreate", "statusChecks": {"conditions": [{"type": "Complete", "status": "True"}]}}}),
        "{config}"
    );
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn one_plugin_file_runs_twice_under_the_names_the_values_give() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-helm-twice-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let values = dir.join("twice.yaml");
    let entry = |key: &str, image: &str| {
        format!(
            "  {key}:\n    name: {key}\n    source: {{volume: {{emptyDir: {{}}}}, file: echo.wasm}}\n    \
             parent: {{group: capstan.dev, version: v1alpha1, kind: Echo, plural: echoes, namespaced: true}}\n    \
             children: [{{group: batch, version: v1, kind: Job, plural: jobs, namespaced: true}}]\n    \
             settings: {{image: \"{image}\"}}\n"
        )
    };
    let text = format!(
        "plugins:\n{}{}",
        entry("echo-blue", "busybox:1"),
        entry("echo-green", "busybox:2")
    );
    std::fs::write(&values, text)?;
    let docs = render("capstan", &["-f", values.to_str().unwrap()])?;
    let config: Value = serde_saphyr::from_str(host_config(&docs))?;
    let runs: Vec<(String, String)> = config["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().into(),
                p["settings"]["image"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        vec![
            ("echo-blue".to_string(), "busybox:1".to_string()),
            ("echo-green".to_string(), "busybox:2".to_string())
        ],
        "{config}"
    );
    let bad = std::fs::read_to_string(&values)?.replace("name: echo-green", "name: Echo_Green");
    std::fs::write(&values, bad)?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(refused.to_string().contains("name"), "{refused}");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn shadow_and_canary_entries_reach_the_host_config_and_only_known_modes_pass() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("capstan-helm-shadow-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let values = dir.join("shadow.yaml");
    let entry = |key: &str, extra: &str| {
        format!(
            "  {key}:\n    name: echo\n    source: {{volume: {{emptyDir: {{}}}}, file: echo.wasm}}\n    \
             parent: {{group: capstan.dev, version: v1alpha1, kind: Echo, plural: echoes, namespaced: true}}\n    \
             children: [{{group: batch, version: v1, kind: Job, plural: jobs, namespaced: true}}]\n{extra}"
        )
    };
    let canary = "    canary: {file: echo-v2.wasm, selector: {matchLabels: {canary: \"true\"}}}\n";
    let text = format!(
        "plugins:\n{}{}",
        entry("echo", canary),
        entry("echo-next", "    mode: shadow\n")
    );
    std::fs::write(&values, &text)?;
    let docs = render("capstan", &["-f", values.to_str().unwrap()])?;
    let config: Value = serde_saphyr::from_str(host_config(&docs))?;
    let modes: Vec<(String, Value)> = config["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (p["path"].as_str().unwrap_or_default().into(), p["mode"].clone()))
        .collect();
    assert_eq!(modes.len(), 2, "{config}");
    assert_eq!(modes[0].1, Value::Null, "live is the default: {config}");
    assert!(modes[1].0.contains("echo-next"), "{config}");
    assert_eq!(modes[1].1, "shadow", "{config}");
    // The host reads what the chart wrote.
    let parsed = capstan::config::parse(host_config(&docs))?;
    assert_eq!(parsed.plugins[1].mode, capstan::config::Mode::Shadow);
    let candidate = parsed.plugins[0].canary.as_ref().context("the canary")?;
    assert!(
        candidate.path.ends_with("plugins/echo/echo-v2.wasm"),
        "{candidate:?}"
    );
    assert_eq!(
        candidate
            .selector
            .match_labels
            .as_ref()
            .and_then(|l| l.get("canary"))
            .map(String::as_str),
        Some("true")
    );
    std::fs::write(&values, text.replace("mode: shadow", "mode: dark"))?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(refused.to_string().contains("mode"), "{refused}");
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

#[test]
fn an_oci_source_is_pulled_by_the_host_with_the_pull_secret_ca_and_digest_rule_the_values_give() -> Result<()>
{
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("oci.yaml");
    let digest = format!("sha256:{}", "ab".repeat(32));
    let reference = format!("oci://registry.example/plugins/echo:1.0@{digest}");
    let text = format!(
        "registry: {{pullSecret: regcred, caConfigMap: registry-ca, plainHttp: ['10.0.0.9:5000'], requireDigest: true}}\n\
         plugins:\n  echo:\n    source: {{oci: '{reference}'}}\n    \
         parent: {{group: capstan.dev, version: v1alpha1, kind: Echo, plural: echoes, namespaced: true}}\n    \
         children: [{{group: batch, version: v1, kind: Job, plural: jobs, namespaced: true}}]\n"
    );
    std::fs::write(&values, &text)?;
    let docs = render("capstan", &["-f", values.to_str().unwrap()])?;
    // The host reads what the chart wrote: the reference, the credentials and CA it mounts.
    let config = capstan::config::parse(host_config(&docs))?;
    assert_eq!(config.plugins[0].path.to_str(), Some(reference.as_str()));
    assert!(config.registry.require_digest);
    assert_eq!(config.registry.plain_http, ["10.0.0.9:5000"]);
    assert_eq!(
        config.registry.auth_file.as_deref(),
        Some(Path::new("../registry-auth/.dockerconfigjson"))
    );
    assert_eq!(config.registry.ca_files, [Path::new("../registry-ca/ca.crt")]);
    let pod = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    let volumes = serde_json::to_string(&pod["volumes"])?;
    assert!(
        volumes.contains("\"secretName\":\"regcred\"") && volumes.contains("\"name\":\"registry-ca\""),
        "{volumes}"
    );
    assert!(
        !volumes.contains("plugin-echo"),
        "an oci source has no volume: {volumes}"
    );
    let args = strings(&pod["containers"][0]["args"]);
    assert!(
        args.contains(&"--pull-dir=/var/lib/capstan/pulled".to_string()),
        "{args:?}"
    );

    // A tag without a digest is refused at render when requireDigest is set.
    std::fs::write(&values, text.replace(&format!("@{digest}"), ""))?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(refused.to_string().contains("no digest"), "{refused}");
    // And a source is one of wasm, volume or oci.
    std::fs::write(
        &values,
        text.replace("source: {oci:", "source: {volume: {emptyDir: {}}, oci:"),
    )?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(refused.to_string().contains("exactly one of"), "{refused}");
    Ok(())
}

#[test]
fn a_signature_policy_reaches_the_host_with_its_keys_and_refuses_plugins_from_files() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("verify.yaml");
    let reference = format!(
        "oci://registry.example/plugins/echo:1.0@sha256:{}",
        "ab".repeat(32)
    );
    let kinds = "parent: {group: capstan.dev, version: v1alpha1, kind: Echo, plural: echoes, namespaced: true}\n    \
                 children: [{group: batch, version: v1, kind: Job, plural: jobs, namespaced: true}]\n";
    let text = format!(
        "registry: {{verify: {{keysConfigMap: plugin-keys, keys: [release.pub]}}}}\n\
         plugins:\n  echo:\n    source: {{oci: '{reference}'}}\n    {kinds}  \
         greeter:\n    source: {{oci: '{reference}'}}\n    verify: {{keys: [team-a.pub]}}\n    {kinds}"
    );
    std::fs::write(&values, &text)?;
    let docs = render("capstan", &["-f", values.to_str().unwrap()])?;
    let config = capstan::config::parse(host_config(&docs))?;
    let global = config.verify.as_ref().expect("a global policy");
    assert_eq!(global.keys, [Path::new("../verify-keys/release.pub")]);
    let own = config
        .plugins
        .iter()
        .find_map(|p| p.verify.as_ref())
        .expect("greeter's own policy");
    assert_eq!(own.keys, [Path::new("../verify-keys/team-a.pub")]);
    let pod = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    let volumes = serde_json::to_string(&pod["volumes"])?;
    assert!(volumes.contains("\"name\":\"plugin-keys\""), "{volumes}");

    // A plugin from a ConfigMap under the policy never loads: helm says so.
    let from_volume = text.replacen(
        &format!("source: {{oci: '{reference}'}}"),
        "source: {volume: {configMap: {name: my-plugins}}, file: echo.wasm}",
        1,
    );
    std::fs::write(&values, from_volume)?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(refused.to_string().contains("carries no signature"), "{refused}");
    // Keys need the ConfigMap they are entries of.
    std::fs::write(&values, text.replace("keysConfigMap: plugin-keys, ", ""))?;
    let refused = render("capstan", &["-f", values.to_str().unwrap()]).unwrap_err();
    assert!(refused.to_string().contains("keysConfigMap"), "{refused}");
    Ok(())
}
