//! A loaded plugin: its calls, each in a fresh instance of the precompiled component,
//! admitted to the plugin's memory total and a pool slot first.

use std::sync::Arc;

use super::instance::{fault_of, json};
use super::sandbox::{self, State};
use super::{
    DispatchError, Engine, Fault, Instance, Limits, LoadError, Metadata, Reconcile, RelatedParent,
    RelatedQuery, Request, Response, deadline, limits, logs, memory, object_key, rename, versions,
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
        Ok(Plugin {
            memory: self.engine.reserve(&self.name, &limits, self.footprint)?,
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
        Ok(self.instance_for(key)?.related(parent)?)
    }

    /// Reconcile one object in a fresh instance.
    pub fn reconcile(&self, request: &Request) -> Result<Response, DispatchError> {
        let key = object_key(&request.parent);
        let _span = tracing::debug_span!("dispatch", plugin = %self.name, object = %key).entered();
        let mut response = self.instance_for(key)?.reconcile(request)?;
        if let Some(declared) = &self.declared {
            rename::relabel(&mut response.children, declared, &self.name);
        }
        Ok(response)
    }

    /// A fresh instance; reused across calls only by benchmarks.
    pub fn instantiate(&self, object: &str) -> Result<Instance, Fault> {
        self.instance_for(object.to_string())
    }

    fn instance_for(&self, object: String) -> Result<Instance, Fault> {
        // In line for the plugin's memory total first (as calls are for its CPU share),
        // then for a pool slot: a call waiting for its own plugin's memory holds no slot
        // another plugin could use.
        let claim = self.memory.admit();
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
            _ticking: ticking,
            _slot: slot,
        })
    }
}
