//! The contract versions a plugin may be built against, behind one interface: the current
//! one, and each older one adapted to it (a 0.2 plugin sets no labels or annotations on its
//! parent; a 0.1 plugin gets no settings, related objects or time either, and its retries
//! carry no delay).

use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use super::bindings::{self, v0_1, v0_2};
use super::load::LoadError;
use super::sandbox::State;
use super::types::{Metadata, RelatedQuery, Request};

type Wire = bindings::capstan::reconciler::types::Response;
type WireError = bindings::capstan::reconciler::types::ReconcileError;

/// A component linked against the sandbox, by the version it exports.
#[derive(Clone)]
pub(crate) enum Pre {
    Current(bindings::ReconcilerPre<State>),
    V0_2(v0_2::ReconcilerPre<State>),
    V0_1(v0_1::ReconcilerPre<State>),
}

/// One live instance's exports.
pub(crate) enum Bindings {
    Current(bindings::Reconciler),
    V0_2(v0_2::Reconciler),
    V0_1(v0_1::Reconciler),
}

/// Every version's host imports.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    bindings::Reconciler::add_to_linker::<State, wasmtime::component::HasSelf<State>>(linker, |s| s)?;
    v0_2::Reconciler::add_to_linker::<State, wasmtime::component::HasSelf<State>>(linker, |s| s)?;
    v0_1::Reconciler::add_to_linker::<State, wasmtime::component::HasSelf<State>>(linker, |s| s)
}

impl Pre {
    /// Link `component`, which exports `version` of the plugin interface.
    pub fn new(
        linker: &Linker<State>,
        engine: &wasmtime::Engine,
        component: &Component,
        version: &str,
    ) -> Result<Pre, LoadError> {
        let pre = linker
            .instantiate_pre(component)
            .map_err(|e| super::load::link_error(component, engine, e))?;
        let exports = |e: wasmtime::Error| LoadError::Exports(format!("{e:#}"));
        Ok(match version {
            "0.1.0" => Pre::V0_1(v0_1::ReconcilerPre::new(pre).map_err(exports)?),
            "0.2.0" => Pre::V0_2(v0_2::ReconcilerPre::new(pre).map_err(exports)?),
            _ => Pre::Current(bindings::ReconcilerPre::new(pre).map_err(exports)?),
        })
    }

    /// The contract version the plugin was built against.
    pub fn version(&self) -> &'static str {
        match self {
            Pre::Current(_) => bindings::WIT_VERSION,
            Pre::V0_2(_) => "0.2.0",
            Pre::V0_1(_) => "0.1.0",
        }
    }

    pub fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Bindings> {
        Ok(match self {
            Pre::Current(pre) => Bindings::Current(pre.instantiate(&mut *store)?),
            Pre::V0_2(pre) => Bindings::V0_2(pre.instantiate(&mut *store)?),
            Pre::V0_1(pre) => Bindings::V0_1(pre.instantiate(&mut *store)?),
        })
    }
}

impl Bindings {
    pub fn metadata(&self, store: &mut Store<State>) -> wasmtime::Result<Result<Metadata, LoadError>> {
        Ok(match self {
            Bindings::Current(b) => Metadata::try_from(b.capstan_reconciler_plugin().call_metadata(store)?),
            Bindings::V0_2(b) => Metadata::try_from(b.capstan_reconciler_plugin().call_metadata(store)?),
            Bindings::V0_1(b) => Ok(b.capstan_reconciler_plugin().call_metadata(store)?.into()),
        })
    }

    /// The plugin's verdict on `settings`; a 0.1 plugin takes none.
    pub fn validate_settings(
        &self,
        store: &mut Store<State>,
        settings: &str,
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Bindings::Current(b) => b
                .capstan_reconciler_plugin()
                .call_validate_settings(store, &settings.to_string()),
            Bindings::V0_2(b) => b
                .capstan_reconciler_plugin()
                .call_validate_settings(store, &settings.to_string()),
            Bindings::V0_1(_) if settings == "{}" => Ok(Ok(())),
            Bindings::V0_1(_) => Ok(Err(
                "built against capstan:reconciler@0.1.0, which takes no settings".into(),
            )),
        }
    }

    /// What the plugin reads for `parent`; a 0.1 plugin reads nothing.
    pub fn related(
        &self,
        store: &mut Store<State>,
        parent: &str,
        settings: &str,
    ) -> wasmtime::Result<Vec<RelatedQuery>> {
        match self {
            Bindings::Current(b) => Ok(b
                .capstan_reconciler_plugin()
                .call_related(store, &parent.to_string(), &settings.to_string())?
                .into_iter()
                .map(RelatedQuery::from)
                .collect()),
            Bindings::V0_2(b) => Ok(b
                .capstan_reconciler_plugin()
                .call_related(store, &parent.to_string(), &settings.to_string())?
                .into_iter()
                .map(RelatedQuery::from)
                .collect()),
            Bindings::V0_1(_) => Ok(Vec::new()),
        }
    }

    /// One reconcile; `parent` and `children` are the request's texts.
    pub fn reconcile(
        &self,
        store: &mut Store<State>,
        request: &Request,
        settings: &str,
        now: String,
    ) -> wasmtime::Result<Result<Wire, WireError>> {
        use bindings::capstan::reconciler::types as wit;
        let parent = request.parent.text().to_string();
        let children = request.children.iter().map(|c| c.text().to_string()).collect();
        let related = || request.related.iter().map(|r| r.text().to_string()).collect();
        match self {
            Bindings::Current(b) => {
                let wire = wit::Request {
                    parent,
                    children,
                    related: related(),
                    settings: settings.to_string(),
                    now,
                    finalizing: request.finalizing,
                };
                b.capstan_reconciler_plugin().call_reconcile(store, &wire)
            }
            Bindings::V0_2(b) => {
                let wire = v0_2::capstan::reconciler::types::Request {
                    parent,
                    children,
                    related: related(),
                    settings: settings.to_string(),
                    now,
                    finalizing: request.finalizing,
                };
                let answer = b.capstan_reconciler_plugin().call_reconcile(store, &wire)?;
                Ok(answer.map(from_v0_2).map_err(|e| match e {
                    v0_2::capstan::reconciler::types::ReconcileError::Retry(r) => {
                        WireError::Retry(wit::Retry {
                            message: r.message,
                            after_ms: r.after_ms,
                        })
                    }
                    v0_2::capstan::reconciler::types::ReconcileError::Fatal(m) => WireError::Fatal(m),
                }))
            }
            Bindings::V0_1(b) => {
                let wire = v0_1::capstan::reconciler::types::Request {
                    parent,
                    children,
                    finalizing: request.finalizing,
                };
                let answer = b.capstan_reconciler_plugin().call_reconcile(store, &wire)?;
                Ok(answer.map(from_v0_1).map_err(|e| match e {
                    v0_1::capstan::reconciler::types::ReconcileError::Retry(message) => {
                        WireError::Retry(wit::Retry {
                            message,
                            after_ms: None,
                        })
                    }
                    v0_1::capstan::reconciler::types::ReconcileError::Fatal(m) => WireError::Fatal(m),
                }))
            }
        }
    }
}

/// An older answer is today's without what its version could not say: no labels or
/// annotations for the parent.
macro_rules! older_response {
    ($name:ident, $version:ident) => {
        fn $name(r: $version::capstan::reconciler::types::Response) -> Wire {
            use bindings::capstan::reconciler::types as wit;
            use $version::capstan::reconciler::types::EventType as Old;
            Wire {
                children: r.children,
                status: r.status,
                requeue_after_ms: r.requeue_after_ms,
                events: r
                    .events
                    .into_iter()
                    .map(|e| wit::Event {
                        event_type: match e.event_type {
                            Old::Normal => wit::EventType::Normal,
                            Old::Warning => wit::EventType::Warning,
                        },
                        reason: e.reason,
                        message: e.message,
                    })
                    .collect(),
                finalized: r.finalized,
                parent_labels: Vec::new(),
                parent_annotations: Vec::new(),
            }
        }
    };
}

older_response!(from_v0_1, v0_1);
older_response!(from_v0_2, v0_2);
