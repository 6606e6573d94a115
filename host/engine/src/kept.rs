//! Instances kept between calls, for a plugin whose limits say `reuseInstances`: one
//! whose start is costly (a Python or JavaScript runtime) then starts once per call
//! running at once instead of once per call, as a long-running hook server would.
//!
//! A kept instance still holds its pool slot and its memory, so it is kept only while
//! nothing waits for either, and given back as soon as something does: a call in its
//! plugin's line for memory, or any plugin's call waiting for a slot. It is kept only
//! when its call ended cleanly (no fault, no memory denied) holding no more than its
//! plugin's floor, so what it holds idle is what the host budget reserved for it anyway.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::memory::{PluginMemory, Ticket};
use super::slots::{Reclaim, Slots};
use super::{Engine, Instance, Limits, deadline};

/// One plugin's idle instances.
pub(crate) struct Kept {
    idle: Mutex<Vec<Instance>>,
    memory: Arc<PluginMemory>,
    slots: Arc<Slots>,
    clock: Arc<deadline::Clock>,
}

impl Kept {
    /// Where a plugin under `limits` keeps its instances, none kept yet: nowhere unless it
    /// reuses them. Its instances draw on `memory`.
    pub fn of(engine: &Engine, memory: &Arc<PluginMemory>, limits: &Limits) -> Option<Arc<Kept>> {
        if !limits.reuse_instances {
            return None;
        }
        let kept = Arc::new(Kept {
            idle: Mutex::default(),
            memory: memory.clone(),
            slots: engine.slots.clone(),
            clock: engine.clock.clone(),
        });
        let weak: Weak<Kept> = Arc::downgrade(&kept);
        engine.slots.register(weak);
        Some(kept)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Instance>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A kept instance, ready for a call on `object`; when there is none, a place in the
    /// plugin's line for memory, taken before letting go of the idle list so that an
    /// instance kept after this sees the call waiting.
    pub fn take(&self, object: &str) -> Result<Instance, Ticket> {
        let mut idle = self.lock();
        match idle.pop() {
            Some(mut instance) => {
                drop(idle);
                instance.resume(object, self.clock.ticking());
                Ok(instance)
            }
            None => Err(self.memory.line_up()),
        }
    }

    /// Keep `instance`, whose call ended without a fault, for the next call; drop it
    /// instead when it was denied memory or holds more than the floor, or (after the
    /// fact, with every other kept one) when a call waits for memory or a slot.
    pub fn keep(&self, mut instance: Instance) {
        if !instance.reusable(self.memory.floor()) {
            return;
        }
        instance.pause();
        let mut idle = self.lock();
        idle.push(instance);
        if self.memory.waiting() || self.slots.waiting() {
            let given_back = std::mem::take(&mut *idle);
            drop(idle);
            drop(given_back);
        }
    }
}

impl Reclaim for Kept {
    fn reclaim(&self) {
        let given_back = std::mem::take(&mut *self.lock());
        drop(given_back);
    }
}
