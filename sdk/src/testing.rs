//! Run a [`Reconciler`] natively in `cargo test`, from YAML or JSON fixtures, with no Wasm.
//!
//! ```
//! # use capstan_sdk::{Context, Metadata, ReconcileError, Reconciler, Response};
//! # use k8s_openapi::api::core::v1::ConfigMap;
//! # struct Mirror;
//! # impl Reconciler for Mirror {
//! #     type Parent = ConfigMap;
//! #     fn metadata() -> Metadata { Metadata::new("mirror", "0.1.0") }
//! #     fn reconcile(cm: ConfigMap, _: &Context) -> Result<Response, ReconcileError> {
//! #         Response::new().status(&cm.data)
//! #     }
//! # }
//! use capstan_sdk::testing::Fixture;
//!
//! let response = Fixture::parse(
//!     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\ndata: {k: v}",
//! )
//! .unwrap()
//! .reconcile::<Mirror>()
//! .unwrap();
//! assert_eq!(response.status.unwrap()["k"], "v");
//! ```

use std::{fmt, path::Path};

use crate::{KindRef, Metadata, ReconcileError, Reconciler, Response};

/// A fixture file or text that could not be read.
#[derive(Debug)]
pub struct FixtureError(String);

impl fmt::Display for FixtureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FixtureError {}

/// Parse YAML or JSON text holding one or more documents (`---` separated).
pub fn parse_documents(text: &str) -> Result<Vec<serde_json::Value>, FixtureError> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| serde_json::Value::deserialize(doc).map_err(|e| FixtureError(e.to_string())))
        .filter(|doc| !matches!(doc, Ok(serde_json::Value::Null)))
        .collect()
}

/// Read a YAML or JSON file holding one or more documents.
pub fn load_documents(path: impl AsRef<Path>) -> Result<Vec<serde_json::Value>, FixtureError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|e| FixtureError(format!("{}: {e}", path.display())))?;
    parse_documents(&text).map_err(|e| FixtureError(format!("{}: {e}", path.display())))
}

/// One reconcile's input: a parent, observed children and the finalizing flag.
#[derive(Clone, Debug)]
pub struct Fixture {
    parent: serde_json::Value,
    children: Vec<serde_json::Value>,
    finalizing: bool,
}

impl Fixture {
    /// A fixture whose parent is this object.
    pub fn new(parent: serde_json::Value) -> Self {
        Fixture {
            parent,
            children: Vec::new(),
            finalizing: false,
        }
    }

    /// A fixture whose parent is the single document in `text`.
    pub fn parse(text: &str) -> Result<Self, FixtureError> {
        match <[_; 1]>::try_from(parse_documents(text)?) {
            Ok([parent]) => Ok(Fixture::new(parent)),
            Err(docs) => Err(FixtureError(format!(
                "expected one parent document, found {}",
                docs.len()
            ))),
        }
    }

    /// A fixture whose parent is the single document in the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        let path = path.as_ref();
        let text =
            std::fs::read_to_string(path).map_err(|e| FixtureError(format!("{}: {e}", path.display())))?;
        Fixture::parse(&text).map_err(|e| FixtureError(format!("{}: {e}", path.display())))
    }

    /// Add observed children from YAML/JSON text (one or more documents).
    pub fn children(mut self, text: &str) -> Result<Self, FixtureError> {
        self.children.extend(parse_documents(text)?);
        Ok(self)
    }

    /// Add observed children from a YAML/JSON file (one or more documents).
    pub fn children_file(mut self, path: impl AsRef<Path>) -> Result<Self, FixtureError> {
        self.children.extend(load_documents(path)?);
        Ok(self)
    }

    /// Add one observed child.
    pub fn child(mut self, child: serde_json::Value) -> Self {
        self.children.push(child);
        self
    }

    /// Mark the parent as being finalized.
    pub fn finalizing(mut self) -> Self {
        self.finalizing = true;
        self
    }

    /// Run `R` on this fixture, exactly as the Wasm export would.
    pub fn reconcile<R: Reconciler>(self) -> Result<Response, ReconcileError> {
        crate::guest::run::<R>(self.parent, self.children, self.finalizing)
    }
}

/// `R`'s metadata with its parent kind, as the host would read it.
pub fn metadata<R: Reconciler>() -> (KindRef, Metadata) {
    crate::guest::full_metadata::<R>()
}

/// Assert that the committed file at `path` holds exactly `generated` (e.g. a CRD made
/// from the Rust type). With `CAPSTAN_BLESS=1` in the environment it rewrites the file
/// first, which is how such files are regenerated.
///
/// # Panics
/// When the file is missing or stale, with the command that regenerates it.
pub fn assert_generated(path: impl AsRef<Path>, generated: &str) {
    let path = path.as_ref();
    if std::env::var_os("CAPSTAN_BLESS").is_some() {
        std::fs::write(path, generated).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: regenerate it with CAPSTAN_BLESS=1 cargo test",
        path.display()
    );
}
