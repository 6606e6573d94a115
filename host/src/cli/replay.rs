//! `capstan test --replay DIR`: re-run the reconciles `capstan run --record DIR` recorded,
//! with this plugin, on the same inputs (parent, children, the recorded related objects
//! as candidates for its own queries, settings and time), and list the objects whose
//! answer changed. With the version that was recorded nothing changes: a plugin is a pure
//! function of its request.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{Value, json};

use super::{PluginArgs, input};
use crate::engine::Plugin;
use crate::record::{self, Recording};
use crate::validate::Allowances;

/// Replay every recording under `dir` of the plugin's parent kind; exit 1 if any answer
/// changed.
pub(super) fn run(args: &PluginArgs, allow: &Allowances, dir: &Path) -> anyhow::Result<ExitCode> {
    let mut files = record::files(dir)?;
    anyhow::ensure!(
        !files.is_empty(),
        "{}: no recordings (*.json) to replay; record some with `capstan run --record DIR`",
        dir.display()
    );
    // Names start with the time they were written: replay in that order.
    files.sort_by(|a, b| a.0.file_name().cmp(&b.0.file_name()));
    let (path, memory) = args.component()?;
    let bare = args.load_bare(&path, memory)?;
    let mut with_settings: Vec<(Value, Plugin)> = Vec::new();
    let (mut replayed, mut changed, mut other_kinds) = (0usize, 0usize, 0usize);
    for (file, _) in &files {
        let recording = Recording::read(file)?;
        if !same_kind(&bare, &recording.parent) {
            other_kinds += 1;
            continue;
        }
        let plugin = match with_settings.iter().position(|(s, _)| *s == recording.settings) {
            Some(i) => &with_settings[i].1,
            None => {
                let plugin = bare
                    .with_settings(&recording.settings)
                    .map_err(|e| anyhow::anyhow!("{}: the recorded settings: {e}", file.display()))?;
                with_settings.push((recording.settings.clone(), plugin));
                &with_settings[with_settings.len() - 1].1
            }
        };
        replayed += 1;
        let now = replay(plugin, &recording, allow);
        if let Some(diff) = difference(&recording.outcome, &now)? {
            changed += 1;
            println!(
                "changed: {} ({})\n{diff}",
                recording.object(),
                shown(file, dir).display()
            );
        }
    }
    let skipped = match other_kinds {
        0 => String::new(),
        n => format!(" ({n} of other parent kinds skipped)"),
    };
    println!(
        "{replayed} reconciles replayed{skipped}: {} unchanged, {changed} changed",
        replayed - changed
    );
    anyhow::ensure!(
        replayed > 0,
        "{}: no recording has the plugin's parent kind {}",
        dir.display(),
        bare.metadata().parent
    );
    Ok(if changed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What `plugin` answers to the recorded request, as data.
fn replay(plugin: &Plugin, recording: &Recording, allow: &Allowances) -> Value {
    let request = input::request(
        plugin,
        recording.parent.clone(),
        recording.children.clone(),
        &recording.related,
        recording.now,
        recording.finalizing,
        allow,
    );
    match request {
        Ok(request) => record::outcome(&plugin.reconcile(&request)),
        Err(input::Unrequestable::Dispatch(e)) => record::outcome(&Err(e)),
        Err(input::Unrequestable::Refused(m)) => json!({ "error": { "refused": format!("related: {m}") } }),
    }
}

/// Whether `parent` is of the plugin's parent kind (group and kind; any version).
fn same_kind(plugin: &Plugin, parent: &Value) -> bool {
    let declared = &plugin.metadata().parent;
    let api_version = parent["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    parent["kind"].as_str() == Some(declared.kind.as_str()) && group == declared.group
}

/// `None` when the two answers mean the same; else their unified diff, recorded first.
fn difference(recorded: &Value, now: &Value) -> anyhow::Result<Option<String>> {
    let (mut a, mut b) = (recorded.clone(), now.clone());
    a.sort_all_objects();
    b.sort_all_objects();
    if a == b {
        return Ok(None);
    }
    let yaml = |v: &Value| serde_saphyr::to_string(v);
    Ok(Some(
        similar::TextDiff::from_lines(&yaml(&a)?, &yaml(&b)?)
            .unified_diff()
            .header("recorded", "replayed")
            .to_string(),
    ))
}

/// `file` relative to the replayed directory, for the report.
fn shown(file: &Path, dir: &Path) -> PathBuf {
    file.strip_prefix(dir)
        .map_or_else(|_| file.to_path_buf(), Path::to_path_buf)
}
