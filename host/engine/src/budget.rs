//! The host-wide memory budget (`--memory-budget`): each plugin's floor, what instances
//! hold above floors, and what the instance pool keeps resident between calls. See
//! [`super::memory`] for how a plugin's instances draw on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The host-wide budget: plugins' floors, what instances hold above them, and what the
/// instance pool keeps resident in slots no instance uses.
pub(crate) struct Budget {
    total: usize,
    held: Mutex<Held>,
    /// Bytes the pool keeps resident between calls (the first pages of each warm memory
    /// slot and table, kept for speed): after a burst that is up to a slot's keep-resident
    /// size per instance that ran at once, which no instance's usage counts.
    pool: Box<dyn Fn() -> usize + Send + Sync>,
}

#[derive(Default)]
struct Held {
    /// Per plugin name: live holders, and the largest floor any of them reserved. Versions
    /// of one plugin (hot reload keeps the old one until the new one runs) share a floor.
    floors: HashMap<String, (usize, usize)>,
    /// Bytes instances hold above their plugins' floors.
    spare_in_use: usize,
}

impl Held {
    fn floors_but(&self, name: &str) -> usize {
        self.floors
            .iter()
            .filter(|(n, _)| n.as_str() != name)
            .map(|(_, (_, b))| b)
            .sum()
    }

    fn reserved(&self) -> usize {
        self.floors.values().map(|(_, b)| b).sum::<usize>() + self.spare_in_use
    }
}

impl Budget {
    /// Reserved and held above floors, and what the pool keeps resident besides.
    fn taken(&self, held: &Held) -> usize {
        held.reserved() + (self.pool)()
    }
}

/// One loaded plugin version's floor in the budget; released when dropped.
pub(crate) struct Reservation {
    pub(super) budget: Arc<Budget>,
    pub(super) name: String,
    pub(super) floor: usize,
}

impl Budget {
    /// A budget of `total` bytes, with nothing kept resident besides.
    #[cfg(test)]
    pub fn new(total: usize) -> Arc<Self> {
        Budget::with_pool(total, Box::new(|| 0))
    }

    /// A budget of `total` bytes that also counts what `pool` says is kept resident.
    pub fn with_pool(total: usize, pool: Box<dyn Fn() -> usize + Send + Sync>) -> Arc<Self> {
        Arc::new(Budget {
            total,
            held: Mutex::default(),
            pool,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The budget and what is reserved, held above floors or kept resident by the pool
    /// now, in bytes.
    pub fn usage(&self) -> (usize, usize) {
        (self.total, self.taken(&self.lock()))
    }

    /// Reserve a floor of `bytes` for plugin `name`, or say why it does not fit.
    pub fn reserve(self: &Arc<Self>, name: &str, bytes: usize) -> Result<Reservation, String> {
        let mut held = self.lock();
        let others = held.floors_but(name) + held.spare_in_use;
        let mine = held.floors.get(name).map_or(0, |(_, b)| *b).max(bytes);
        if others + mine > self.total {
            let mut holders: Vec<String> = held
                .floors
                .iter()
                .filter(|(n, _)| n.as_str() != name)
                .map(|(n, (_, b))| format!("{n} {}", mib(*b)))
                .collect();
            holders.sort();
            let plugins = match holders.len() {
                0 => "no plugin".to_string(),
                n if n > 5 => format!("{n} plugins, the first {}", holders[..5].join(", ")),
                _ => holders.join(", "),
            };
            return Err(format!(
                "plugin {name} needs {} (what one instance was measured to hold) and the host's memory budget of {} has {} left ({} reserved by {plugins}, {} in use above floors); raise --memory-budget",
                mib(bytes),
                mib(self.total),
                mib(self.total.saturating_sub(others)),
                mib(held.floors_but(name)),
                mib(held.spare_in_use),
            ));
        }
        let entry = held.floors.entry(name.to_string()).or_insert((0, 0));
        *entry = (entry.0 + 1, mine);
        Ok(Reservation {
            budget: self.clone(),
            name: name.to_string(),
            floor: bytes,
        })
    }

    /// Raise plugin `name`'s floor to `bytes`, turning `covered` bytes it holds above its
    /// floor from spare into reserved, if the budget has room; `true` when raised.
    pub(super) fn raise(&self, name: &str, bytes: usize, covered: usize) -> bool {
        let mut held = self.lock();
        let spare = held.spare_in_use.saturating_sub(covered);
        let mine = held.floors.get(name).map_or(0, |(_, b)| *b).max(bytes);
        if held.floors_but(name) + mine + spare > self.total {
            return false;
        }
        if let Some(entry) = held.floors.get_mut(name) {
            entry.1 = mine;
        }
        held.spare_in_use = spare;
        true
    }

    /// Take up to `bytes` of what no floor reserves, no instance holds above its floor
    /// and the pool does not keep resident. (A floor is never refused for the pool's warm
    /// memory: an instance of that plugin reuses it.)
    pub(super) fn take_spare_up_to(&self, bytes: usize) -> usize {
        let mut held = self.lock();
        let taken = bytes.min(self.total.saturating_sub(self.taken(&held)));
        held.spare_in_use += taken;
        taken
    }

    pub(super) fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            let mut held = self.lock();
            held.spare_in_use = held.spare_in_use.saturating_sub(bytes);
        }
    }
}

#[cfg(test)]
impl Budget {
    /// Bytes held above floors now.
    pub(super) fn spare_in_use(&self) -> usize {
        self.lock().spare_in_use
    }

    /// Plugin `name`'s floor.
    pub(super) fn floor_of(&self, name: &str) -> usize {
        self.lock().floors[name].1
    }

    /// Whether no plugin holds a floor.
    pub(super) fn no_floors(&self) -> bool {
        self.lock().floors.is_empty()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut held = self.budget.lock();
        if let Some(entry) = held.floors.get_mut(&self.name) {
            entry.0 -= 1;
            if entry.0 == 0 {
                held.floors.remove(&self.name);
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

    /// What the pool keeps resident between calls is taken before any instance grows above
    /// its floor; it never takes a floor away.
    #[test]
    fn the_pools_resident_memory_counts_against_what_instances_take_above_floors() {
        let resident = Arc::new(std::sync::atomic::AtomicUsize::new(60));
        let seen = resident.clone();
        let budget = Budget::with_pool(
            100,
            Box::new(move || seen.load(std::sync::atomic::Ordering::Relaxed)),
        );
        let floor = budget
            .reserve("echo", 30)
            .expect("a floor is not refused for warm slots");
        assert_eq!(budget.usage(), (100, 90));
        assert_eq!(
            budget.take_spare_up_to(50),
            10,
            "only what neither floors nor the pool hold"
        );
        budget.give_back(10);
        resident.store(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(budget.take_spare_up_to(50), 50, "the pool's memory reused");
        drop(floor);
    }
}
