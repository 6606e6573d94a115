//! Memory governance at two levels. Each plugin's live instances share one total
//! (`limits.memoryTotal`): a plugin running many calls at once cannot hold concurrency ×
//! its per-call cap, and when it reaches its total only its own calls fault. And the
//! host's budget (`--memory-budget`) is shared by what plugins are measured to use, not
//! by their worst case: each plugin reserves, at load, what one of its instances was
//! measured to hold (its floor, always there for it); memory above the floor is taken
//! from what no one has reserved while an instance holds it, and given back when it ends.
//! A plugin that finds that spare memory gone faults alone; the others keep their floors.
//! Real calls measure too: an instance that ends holding more than its plugin's floor,
//! never having been refused memory, raises the floor to what it held (never past the
//! plugin's total, which no instance can pass), when the budget has that much unreserved:
//! what a plugin was seen to need is reserved for it, and later loads are admitted
//! against it.

use std::sync::{Arc, Mutex};

pub(crate) use super::budget::{Budget, Reservation, mib};

/// Linear memory held by one plugin's live instances, against its total.
pub(crate) struct PluginMemory {
    limit: usize,
    usage: Mutex<Usage>,
    /// This plugin's floor in the host budget, given back when the last holder is dropped.
    reservation: Option<Reservation>,
}

/// Why memory was not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Denied {
    /// The plugin's live instances would pass its own total.
    Total,
    /// Above its floor, and the host budget has nothing unreserved left.
    Budget,
}

impl PluginMemory {
    /// A pool of `limit` bytes, holding `reservation` for as long as it lives.
    pub fn new(limit: usize, reservation: Option<Reservation>) -> Arc<Self> {
        let floor = reservation.as_ref().map_or(0, |r| r.floor);
        Arc::new(PluginMemory {
            limit,
            usage: Mutex::new(Usage {
                used: 0,
                floor,
                told: floor,
            }),
            reservation,
        })
    }

    /// The plugin's total.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The part of the host budget reserved for this plugin.
    pub fn floor(&self) -> usize {
        self.lock().floor
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.usage.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take `bytes` more if the total, and above the floor the host budget, allow.
    pub fn try_grow(&self, bytes: usize) -> Result<(), Denied> {
        let mut usage = self.lock();
        let grown = usage
            .used
            .checked_add(bytes)
            .filter(|&n| n <= self.limit)
            .ok_or(Denied::Total)?;
        self.above_floor(usage.floor, usage.used, grown)?;
        usage.used = grown;
        Ok(())
    }

    /// Take as much of `bytes` as the total (and above the floor the budget) have left;
    /// how much that was.
    pub fn take_up_to(&self, bytes: usize) -> usize {
        let mut usage = self.lock();
        let (used, floor) = (usage.used, usage.floor);
        let wanted = bytes.min(self.limit.saturating_sub(used));
        let taken = match &self.reservation {
            None => wanted,
            Some(r) => {
                let extra = over(used + wanted, floor) - over(used, floor);
                wanted - extra + r.budget.take_spare_up_to(extra)
            }
        };
        usage.used += taken;
        taken
    }

    /// Give back `bytes` an instance held when it ended, first raising the floor to them
    /// if they passed it, the instance was never `denied` memory (a plugin hitting its
    /// limits measures nothing), and the budget has room.
    pub fn release(&self, bytes: usize, denied: bool) {
        let mut usage = self.lock();
        let Some(r) = &self.reservation else {
            usage.used = usage.used.saturating_sub(bytes);
            return;
        };
        if bytes > usage.floor && !denied {
            // Bytes the live instances hold above the floor today that the raised floor covers.
            let covered = over(usage.used, usage.floor) - over(usage.used, bytes);
            if r.budget.raise(&r.name, bytes, covered) {
                usage.floor = bytes;
                usage.tell(&r.name);
            }
        }
        let left = usage.used.saturating_sub(bytes);
        r.budget
            .give_back(over(usage.used, usage.floor) - over(left, usage.floor));
        usage.used = left;
    }

    /// What growing from `from` to `to` bytes takes above `floor`, taken from the budget.
    fn above_floor(&self, floor: usize, from: usize, to: usize) -> Result<(), Denied> {
        let Some(r) = &self.reservation else {
            return Ok(());
        };
        let extra = over(to, floor) - over(from, floor);
        let got = r.budget.take_spare_up_to(extra);
        if got == extra {
            return Ok(());
        }
        r.budget.give_back(got);
        Err(Denied::Budget)
    }

    /// Bytes held now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.lock().used
    }
}

/// What one plugin's instances hold, and its floor.
struct Usage {
    used: usize,
    floor: usize,
    /// The floor last logged.
    told: usize,
}

impl Usage {
    /// Log a raised floor once it has grown by a quarter since last said: a plugin that
    /// grows page by page is not logged page by page.
    fn tell(&mut self, name: &str) {
        if self.floor >= self.told + self.told / 4 {
            tracing::info!(plugin = %name, floor = %mib(self.floor), "plugin floor raised: an instance held this much");
            self.told = self.floor;
        }
    }
}

/// Bytes of `used` above `floor`.
fn over(used: usize, floor: usize) -> usize {
    used.saturating_sub(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_total_is_shared_by_its_instances() {
        let pool = PluginMemory::new(10, None);
        assert_eq!(pool.try_grow(6), Ok(()));
        assert_eq!(pool.try_grow(5), Err(Denied::Total), "6 + 5 is over 10");
        assert_eq!(pool.try_grow(4), Ok(()));
        pool.release(6, false);
        assert_eq!(pool.try_grow(5), Ok(()));
        assert_eq!(pool.used(), 9);
        assert_eq!(pool.take_up_to(5), 1, "only what is left");
        assert_eq!(pool.take_up_to(5), 0);
        assert_eq!(pool.used(), 10);
    }

    #[test]
    fn floors_must_fit_the_budget_and_versions_of_one_plugin_share_theirs() {
        let budget = Budget::new(300 << 20);
        let echo = budget.reserve("echo", 128 << 20).unwrap();
        let echo_v2 = budget.reserve("echo", 128 << 20).unwrap();
        let other = budget.reserve("other", 128 << 20).unwrap();
        let refused = budget.reserve("third", 128 << 20).err().expect("over the budget");
        assert!(
            refused.contains("has 44 MiB left (256 MiB reserved by echo 128 MiB, other 128 MiB, 0 MiB in use above floors); raise --memory-budget"),
            "{refused}"
        );
        drop(echo);
        assert!(
            budget.reserve("third", 128 << 20).is_err(),
            "echo's second version still holds its floor"
        );
        drop(echo_v2);
        let third = budget.reserve("third", 128 << 20).unwrap();
        drop((other, third));
        assert!(budget.no_floors());
    }

    /// Above its floor a plugin borrows what no one reserved, while it holds it; when that
    /// is gone it is refused, and the other plugin's floor is still there for it.
    #[test]
    fn above_its_floor_a_plugin_uses_spare_budget_and_never_another_floor() {
        let budget = Budget::new(100);
        let small = PluginMemory::new(50, Some(budget.reserve("small", 10).unwrap()));
        let bomb = PluginMemory::new(1000, Some(budget.reserve("bomb", 10).unwrap()));
        assert_eq!(bomb.try_grow(90), Ok(()), "its floor of 10 and all 80 spare");
        assert_eq!(bomb.try_grow(1), Err(Denied::Budget), "nothing spare is left");
        assert_eq!(
            small.try_grow(10),
            Ok(()),
            "the other plugin's floor is untouched"
        );
        assert_eq!(small.try_grow(1), Err(Denied::Budget));
        assert!(
            budget.reserve("late", 1).is_err(),
            "spare memory in use counts at load"
        );
        bomb.release(90, true);
        assert_eq!(budget.spare_in_use(), 0, "given back when the instance ends");
        assert_eq!(small.try_grow(40), Ok(()));
        assert_eq!(small.try_grow(1), Err(Denied::Total));
        assert_eq!(bomb.take_up_to(60), 50, "what is left: its floor and 40 spare");
        small.release(50, false);
        bomb.release(50, false);
        assert_eq!(budget.spare_in_use(), 0);
    }

    /// An instance that held more than the floor raises it; a later load is admitted
    /// against the raised floor. An instance that was refused memory raises nothing.
    #[test]
    fn real_instances_raise_the_floor_unless_they_hit_a_limit() {
        let budget = Budget::new(100);
        let grower = PluginMemory::new(80, Some(budget.reserve("grower", 10).unwrap()));
        assert_eq!(grower.try_grow(30), Ok(()));
        grower.release(30, false);
        assert_eq!(grower.floor(), 30, "what one instance was seen to hold");
        assert_eq!(budget.spare_in_use(), 0);
        assert_eq!(budget.floor_of("grower"), 30);
        assert!(
            budget.reserve("late", 71).is_err(),
            "admitted against the raised floor"
        );
        let late = PluginMemory::new(80, Some(budget.reserve("late", 60).unwrap()));
        assert_eq!(grower.try_grow(40), Ok(()), "10 borrowed");
        assert_eq!(grower.try_grow(1), Err(Denied::Budget));
        grower.release(40, true);
        assert_eq!(
            grower.floor(),
            30,
            "an instance that hit a limit measures nothing"
        );
        assert_eq!(budget.spare_in_use(), 0);
        assert_eq!(grower.try_grow(40), Ok(()));
        grower.release(40, false);
        assert_eq!(grower.floor(), 40);
        assert!(budget.reserve("third", 1).is_err(), "all 100 reserved now");
        assert_eq!(late.try_grow(60), Ok(()), "the other floor is whole");
        late.release(60, false);
    }
}
