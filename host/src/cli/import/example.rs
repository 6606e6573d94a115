//! What a directory laid out as Metacontroller's examples are holds: every YAML document
//! under it (controllers, CRDs, the hook's Deployment and Service) and the files each
//! kustomization's `configMapGenerator` turns into a ConfigMap — or that a ConfigMap
//! written out in a manifest holds in its `data`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

/// The objects and generated ConfigMaps of one example directory.
#[derive(Debug, Default)]
pub(super) struct Example {
    /// Every Kubernetes object found, with the file it came from.
    pub objects: Vec<(PathBuf, Value)>,
    /// `configMapGenerator` entries and ConfigMaps' `data`: (name, files) with each
    /// file's path on disk, or the path [`Example::text`] knows an inline file by.
    pub generated: Vec<(String, Vec<PathBuf>)>,
    /// The text of each file a ConfigMap holds inline, by the path it is known by.
    inline: Vec<(PathBuf, String)>,
    /// The files kustomizations list as `resources`: what `kubectl apply -k` installs.
    pub resources: Vec<PathBuf>,
}

impl Example {
    /// Everything under `dir`, read in file-name order.
    pub fn read(dir: &Path) -> anyhow::Result<Example> {
        anyhow::ensure!(dir.is_dir(), "{} is not a directory", dir.display());
        let mut example = Example::default();
        for path in yaml_files(dir)? {
            example.add(&path)?;
        }
        Ok(example)
    }

    fn add(&mut self, path: &Path) -> anyhow::Result<()> {
        let is_kustomization = path
            .file_name()
            .is_some_and(|n| n == "kustomization.yaml" || n == "kustomization.yml");
        for doc in super::super::input::documents(path)? {
            if is_kustomization {
                self.generators(path, &doc)?;
            } else if doc.get("kind").is_some_and(Value::is_string) {
                if doc["kind"] == "ConfigMap" {
                    self.inline_files(path, &doc);
                }
                self.objects.push((path.to_path_buf(), doc));
            }
        }
        Ok(())
    }

    fn generators(&mut self, path: &Path, doc: &Value) -> anyhow::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let listed = doc["resources"].as_array().into_iter().flatten();
        self.resources
            .extend(listed.filter_map(Value::as_str).map(|r| normal(&dir.join(r))));
        let entries = doc["configMapGenerator"].as_array().cloned().unwrap_or_default();
        for (i, entry) in entries.iter().enumerate() {
            let field = format!("{}: configMapGenerator[{i}]", path.display());
            let name = entry["name"]
                .as_str()
                .with_context(|| format!("{field}.name is missing"))?;
            let files = entry["files"].as_array().cloned().unwrap_or_default();
            let files = files
                .iter()
                .map(|f| {
                    let f = f
                        .as_str()
                        .with_context(|| format!("{field}.files: not a string"))?;
                    // `key=path` names the key apart from the file; the key is the file's name here.
                    let file = f.split_once('=').map_or(f, |(_, p)| p);
                    Ok(dir.join(file))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            self.generated.push((name.to_string(), files));
        }
        Ok(())
    }

    /// A ConfigMap's `data` as files, known by `DIR/NAME/KEY` beside the manifest.
    fn inline_files(&mut self, path: &Path, config_map: &Value) {
        let (Some(name), Some(data)) = (
            config_map["metadata"]["name"].as_str(),
            config_map["data"].as_object(),
        ) else {
            return;
        };
        let dir = path.parent().unwrap_or(Path::new(".")).join(name);
        let files = (data.iter())
            .filter_map(|(key, text)| Some((dir.join(key), text.as_str()?.to_string())))
            .collect::<Vec<_>>();
        self.generated
            .push((name.to_string(), files.iter().map(|(p, _)| p.clone()).collect()));
        self.inline.extend(files);
    }

    /// The text of a file a ConfigMap holds inline, if `path` is one.
    pub fn inline(&self, path: &Path) -> Option<&str> {
        self.inline
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.as_str())
    }

    /// The text of one of the example's files: inline in a ConfigMap, or on disk.
    pub fn text(&self, path: &Path) -> anyhow::Result<String> {
        match self.inline(path) {
            Some(text) => Ok(text.to_string()),
            None => std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display())),
        }
    }

    /// The example's CRDs, each once: a CRD in two files is the one a kustomization
    /// installs (examples ship an all-in-one copy beside it); two that differ otherwise
    /// are refused.
    pub fn crds(&self) -> anyhow::Result<Vec<Value>> {
        let mut out: Vec<(&PathBuf, &Value)> = Vec::new();
        for (path, crd) in self.of_kind("CustomResourceDefinition") {
            let name = &crd["metadata"]["name"];
            let Some(seen) = out.iter_mut().find(|(_, c)| c["metadata"]["name"] == *name) else {
                out.push((path, crd));
                continue;
            };
            let installed = |p: &Path| self.resources.contains(&normal(p));
            match (installed(seen.0), installed(path)) {
                _ if seen.1 == crd => {}
                (false, true) => *seen = (path, crd),
                (true, false) => {}
                _ => anyhow::bail!(
                    "CustomResourceDefinition {} is defined twice, differently ({} and {})",
                    name.as_str().unwrap_or_default(),
                    seen.0.display(),
                    path.display()
                ),
            }
        }
        Ok(out.into_iter().map(|(_, c)| c.clone()).collect())
    }

    /// Objects of `kind`.
    pub fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a (PathBuf, Value)> + 'a {
        self.objects.iter().filter(move |(_, o)| o["kind"] == kind)
    }
}

/// `path` with its `.` and `..` resolved, as written (no links followed).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Every `.yaml`/`.yml` file under `dir`, sorted, hidden directories skipped.
fn yaml_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).with_context(|| format!("cannot read {}", d.display()))?;
        for entry in entries {
            let path = entry?.path();
            let hidden = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if hidden {
                continue;
            }
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}
