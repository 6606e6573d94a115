//! Memory governance at two levels. Each plugin's live instances share one total
//! (`limits.memoryTotal`): a plugin running many calls at once cannot hold concurrency ×
//! its per-call cap, and when it reaches its total only its own calls fault. And every
//! loaded plugin reserves that total from the host's budget (`--memory-budget`) when it is
//! loaded: a plugin that does not fit is refused at load, so the host's own worst case is
//! known before anything runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Linear memory held by one plugin's live instances, against its total.
pub(crate) struct PluginMemory {
    limit: usize,
    used: AtomicUsize,
    /// This plugin's share of the host budget, given back when the last holder is dropped.
    _reservation: Option<Reservation>,
}

impl PluginMemory {
    /// A pool of `limit` bytes, holding `reservation` for as long as it lives.
    pub fn new(limit: usize, reservation: Option<Reservation>) -> Arc<Self> {
        Arc::new(PluginMemory {
            limit,
            used: AtomicUsize::new(0),
            _reservation: reservation,
        })
    }

    /// The plugin's total.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Take `bytes` more if the total allows.
    pub fn try_grow(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.limit)
            })
            .is_ok()
    }

    /// Take as much of `bytes` as the total has left, and say how much that was.
    pub fn take_up_to(&self, bytes: usize) -> usize {
        let mut taken = 0;
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                taken = bytes.min(self.limit.saturating_sub(used));
                Some(used + taken)
            });
        taken
    }

    /// Give back `bytes` an instance held.
    pub fn release(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Bytes held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// The host-wide budget the loaded plugins' totals must fit in.
pub(crate) struct Budget {
    total: usize,
    /// Per plugin name: live holders, and the largest total any of them reserved. Versions
    /// of one plugin (hot reload keeps the old one until the new one runs) share a share.
    held: Mutex<HashMap<String, (usize, usize)>>,
}

/// One loaded plugin version's claim on the budget; released when dropped.
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    name: String,
}

impl Budget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> Arc<Self> {
        Arc::new(Budget {
            total,
            held: Mutex::default(),
        })
    }

    /// Reserve `bytes` for plugin `name`, or say why it does not fit.
    pub fn reserve(self: &Arc<Self>, name: &str, bytes: usize) -> Result<Reservation, String> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let others: usize = held
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .map(|(_, (_, b))| b)
            .sum();
        let mine = held.get(name).map_or(0, |(_, b)| *b).max(bytes);
        if others + mine > self.total {
            let mut holders: Vec<String> = held
                .iter()
                .filter(|(n, _)| n.as_str() != name)
                .map(|(n, (_, b))| format!("{n} {}", mib(*b)))
                .collect();
            holders.sort();
            return Err(format!(
                "memoryTotal {} of plugin {name} does not fit the host's memory budget of {} ({} reserved by {}); raise --memory-budget or lower limits.memoryTotal",
                mib(bytes),
                mib(self.total),
                mib(others),
                if holders.is_empty() {
                    "nobody".into()
                } else {
                    holders.join(", ")
                },
            ));
        }
        let entry = held.entry(name.to_string()).or_insert((0, 0));
        *entry = (entry.0 + 1, mine);
        Ok(Reservation {
            budget: self.clone(),
            name: name.to_string(),
        })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.budget.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = held.get_mut(&self.name) {
            entry.0 -= 1;
            if entry.0 == 0 {
                held.remove(&self.name);
            }
        }
    }
}

/// Bytes as MiB for messages.
pub(crate) fn mib(bytes: usize) -> String {
    format!("{} MiB", bytes >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_total_is_shared_by_its_instances() {
        let pool = PluginMemory::new(10, None);
        assert!(pool.try_grow(6));
        assert!(!pool.try_grow(5), "6 + 5 is over 10");
        assert!(pool.try_grow(4));
        pool.release(6);
        assert!(pool.try_grow(5));
        assert_eq!(pool.used(), 9);
        assert_eq!(pool.take_up_to(5), 1, "only what is left");
        assert_eq!(pool.take_up_to(5), 0);
        assert_eq!(pool.used(), 10);
    }

    #[test]
    fn totals_must_fit_the_budget_and_versions_of_one_plugin_share_theirs() {
        let budget = Budget::new(300 << 20);
        let echo = budget.reserve("echo", 128 << 20).unwrap();
        let echo_v2 = budget.reserve("echo", 128 << 20).unwrap();
        let other = budget.reserve("other", 128 << 20).unwrap();
        let refused = budget.reserve("third", 128 << 20).err().expect("over the budget");
        assert!(
            refused.contains("--memory-budget") && refused.contains("echo 128 MiB, other 128 MiB"),
            "{refused}"
        );
        drop(echo);
        assert!(
            budget.reserve("third", 128 << 20).is_err(),
            "echo's second version still holds its share"
        );
        drop(echo_v2);
        let third = budget.reserve("third", 128 << 20).unwrap();
        drop((other, third));
        assert!(budget.held.lock().unwrap().is_empty());
    }
}
