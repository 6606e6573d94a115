//! A loaded plugin: its calls, each in a fresh instance of the precompiled component
//! (or, under `reuseInstances`, one kept from an earlier call), admitted to the plugin's
//! memory total and a pool slot first.

use std::sync::Arc;

use super::instance::{fault_of, json};
use super::sandbox::{self, State};
use super::{
    DispatchError, Engine, Fault, Instance, Limits, LoadError, Metadata, Reconcile, RelatedParent,
    RelatedQuery, Request, Response, deadline, kept, limits, logs, memory, object_key, rename, versions,
};

/// A loaded plugin: precompiled, linked against the sandbox, ready to instantiate.
#[derive(Clone)]
pub struct Plugin {
    pub(super) engine: Engine,
    pub(super) pre: Arc<versions::Pre>,
    pub(super) limits: Limits,
    /// What its live instances hold together, against `limits.memory_total`.
    pub(super) memory: Arc<memory::PluginMemory>,
    pub(super) name: Arc<str>,
    pub(super) metadata: Option<Metadata>,
    /// What the plugin may still log, shared by all its calls.
    pub(super) logs: Arc<logs::LogBudget>,
    /// Its settings as JSON text, accepted by the plugin.
    pub(super) settings: Arc<str>,
    /// What one instance was measured to hold at load (linear memory and lift fuel).
    pub(super) footprint: usize,
    /// The name the plugin declares, when it runs under another ([`Plugin::renamed`]).
    pub(super) declared: Option<Arc<str>>,
    /// Instances kept for the next call, under `reuseInstances`; made anew with the
    /// memory, limits or settings their instances were made under.
    pub(super) kept: Option<Arc<kept::Kept>>,
}

/// Settings of a plugin the operator configured none for.
pub(super) const NO_SETTINGS: &str = "{}";

impl Reconcile for Plugin {
    fn metadata(&self) -> &Metadata {
        Plugin::metadata(self)
    }

    fn related(&self, parent: &RelatedParent) -> Result<Vec<RelatedQuery>, DispatchError> {
        Plugin::related(self, parent)
    }

    fn reconcile(&self, request: &Request) -> Result<Response, DispatchError> {
        Plugin::reconcile(self, request)
    }

    fn charge_log(&self, bytes: usize) -> bool {
        self.logs.allow(bytes)
    }
}

impl Plugin {
    /// What the plugin declared at load.
    pub fn metadata(&self) -> &Metadata {
        self.metadata.as_ref().expect("metadata is read during load")
    }

    /// The limits its calls run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// What one instance was measured to hold at load, in bytes.
    pub fn footprint(&self) -> usize {
        self.footprint
    }

    /// Its floor in the host's memory budget, in bytes: always there for it.
    pub fn reserved(&self) -> usize {
        self.memory.floor()
    }

    /// The same compiled plugin under other limits.
    pub fn with_limits(&self, limits: Limits) -> Result<Plugin, LoadError> {
        self.engine.check_limits(&limits)?;
        let memory = self.engine.reserve(&self.name, &limits, self.footprint)?;
        Ok(Plugin {
            kept: kept::Kept::of(&self.engine, &memory, &limits),
            memory,
            logs: Arc::new(logs::LogBudget::new(limits.log_bytes_per_second)),
            limits,
            ..self.clone()
        })
    }

    /// The contract version the plugin was built against.
    pub fn contract_version(&self) -> &'static str {
        self.pre.version()
    }

    /// The same plugin with these settings, once the plugin has accepted them; its own
    /// message when it refuses them.
    pub fn with_settings(&self, settings: &serde_json::Value) -> Result<Plugin, LoadError> {
        let text = match settings {
            serde_json::Value::Null => NO_SETTINGS.to_string(),
            serde_json::Value::Object(_) => json(settings),
            _ => return Err(LoadError::Settings("settings must be a mapping".into())),
        };
        let mut instance = self
            .instantiate("<settings>")
            .map_err(|f| LoadError::Settings(f.to_string()))?;
        instance.validate_settings(&text)?;
        Ok(Plugin {
            settings: Arc::from(text),
            kept: kept::Kept::of(&self.engine, &self.memory, &self.limits),
            ..self.clone()
        })
    }

    /// The settings every call gets, as JSON text.
    pub fn settings(&self) -> &str {
        &self.settings
    }

    /// What the plugin reads for `parent`, in a fresh instance; nothing when it declares
    /// no related kinds.
    pub fn related(&self, parent: &RelatedParent) -> Result<Vec<RelatedQuery>, DispatchError> {
        if self.metadata().related.is_empty() {
            return Ok(Vec::new());
        }
        let parent = parent.json();
        let key = object_key(parent);
        let _span = tracing::debug_span!("related", plugin = %self.name, object = %key).entered();
        let mut instance = self.instance_for(key)?;
        let queries = instance.related(parent)?;
        self.done(instance);
        Ok(queries)
    }

    /// Reconcile one object in a fresh (or, under `reuseInstances`, a kept) instance.
    pub fn reconcile(&self, request: &Request) -> Result<Response, DispatchError> {
        let key = object_key(&request.parent);
        let _span = tracing::debug_span!("dispatch", plugin = %self.name, object = %key).entered();
        let mut instance = self.instance_for(key)?;
        let response = instance.reconcile(request);
        // A faulted instance is never called again; an answer refused, or an error the
        // plugin returned, leaves it sound.
        if !matches!(response, Err(DispatchError::Fault(_))) {
            self.done(instance);
        }
        let mut response = response?;
        if let Some(declared) = &self.declared {
            rename::relabel(&mut response.children, declared, &self.name);
        }
        Ok(response)
    }

    /// A fresh instance; reused across calls only by benchmarks.
    pub fn instantiate(&self, object: &str) -> Result<Instance, Fault> {
        self.fresh(object.to_string(), self.memory.line_up())
    }

    /// An instance for a call on `object`: a kept one when the plugin reuses them.
    fn instance_for(&self, object: String) -> Result<Instance, Fault> {
        let Some(kept) = &self.kept else {
            return self.fresh(object, self.memory.line_up());
        };
        match kept.take(&object) {
            Ok(instance) => Ok(instance),
            Err(ticket) => self.fresh(object, ticket),
        }
    }

    /// Keep `instance` for the next call when the plugin reuses them.
    fn done(&self, instance: Instance) {
        if let Some(kept) = &self.kept {
            kept.keep(instance);
        }
    }

    fn fresh(&self, object: String, ticket: memory::Ticket) -> Result<Instance, Fault> {
        // In line for the plugin's memory total first (as calls are for its CPU share),
        // then for a pool slot: a call waiting for its own plugin's memory holds no slot
        // another plugin could use.
        let claim = self.memory.admit_in_line(ticket);
        let slot = self.engine.slots.take(&self.name);
        let ticking = self.engine.clock.ticking();
        let state = State::new(
            self.name.clone(),
            object,
            self.limits.memory,
            (self.memory.clone(), claim),
            self.logs.clone(),
        );
        let lift = limits::lift_allowance(&self.limits);
        let mut store = sandbox::store(&self.engine.inner, state, lift);
        deadline::arm(&mut store, self.limits.deadline);
        let bindings = self.pre.instantiate(&mut store).map_err(|e| {
            match fault_of(&store, &e, self.limits.deadline) {
                Fault::Trap(msg) => Fault::Instantiate(msg),
                other => other,
            }
        })?;
        Ok(Instance {
            store,
            bindings,
            limits: self.limits.clone(),
            settings: self.settings.clone(),
            ticking: Some(ticking),
            _slot: slot,
        })
    }
}
