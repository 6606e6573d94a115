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
//!
//! Memory waits as CPU does: a call is admitted to a fresh instance only once the
//! plugin's total has room for what one instance was measured to hold (its floor) beside
//! what the live ones hold and were admitted with, in the order the calls came ([`Claim`]);
//! so a plugin whose concurrency times its floor passes its total runs fewer calls at
//! once instead of faulting. Only a call that finds no other live and alone passes the
//! total faults.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread::Thread;

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
                claimed: 0,
                live: 0,
                next: 0,
                serving: 0,
                parked: BTreeMap::new(),
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

    /// Join the line and wait to be admitted ([`Self::admit_in_line`]).
    #[cfg(test)]
    pub fn admit(&self) -> Claim {
        let ticket = self.line_up();
        self.admit_in_line(ticket)
    }

    /// Take a place in the line for [`Self::admit_in_line`]: a caller that must first
    /// look for a kept instance (under its own lock) joins the line before letting go,
    /// so an instance kept after that sees it waiting (`waiting`) and is not kept.
    pub fn line_up(&self) -> Ticket {
        let mut usage = self.lock();
        usage.next += 1;
        Ticket(usage.next - 1)
    }

    /// Whether a call is in line and not yet admitted.
    pub fn waiting(&self) -> bool {
        let usage = self.lock();
        usage.next != usage.serving
    }

    /// Wait in line until the total has room for one more instance of the floor's size
    /// (or none is live: a call alone is never kept waiting), and admit it: the claim
    /// that instance's memory is first drawn from.
    pub fn admit_in_line(&self, Ticket(ticket): Ticket) -> Claim {
        let mut usage = self.lock();
        let mut waited = false;
        let claim = loop {
            let claim = usage.floor.min(self.limit);
            let fits = usage.used + usage.claimed + claim <= self.limit;
            if usage.serving == ticket && (fits || usage.live == 0) {
                break claim;
            }
            waited = true;
            // Only the head of the line can be let in, so each call waits to be woken by
            // its ticket: an admission or an end wakes one thread. Waking the whole line
            // each time (a condition variable's notify_all) cost the host most of its CPU
            // with a few hundred calls in line. A wake that comes before the park is kept
            // by the thread, and one that finds nothing to do only loops.
            usage.parked.insert(ticket, std::thread::current());
            drop(usage);
            std::thread::park();
            usage = self.lock();
        };
        if waited {
            usage.parked.remove(&ticket);
            tracing::debug!(total = %mib(self.limit), "a call waited for the plugin's memory total");
        }
        usage.serving += 1;
        usage.claimed += claim;
        usage.live += 1;
        // The next in line may fit as well.
        usage.wake_head();
        Claim(claim)
    }

    /// Take `bytes` more if the total, and above the floor the host budget, allow.
    pub fn try_grow(&self, bytes: usize) -> Result<(), Denied> {
        self.grow(bytes, &mut Claim(0))
    }

    /// Take `bytes` more, first from `claim` (already counted against the total), the
    /// rest if the total has room beside what is held and claimed; above the floor the
    /// host budget must allow all of it.
    pub fn grow(&self, bytes: usize, claim: &mut Claim) -> Result<(), Denied> {
        let mut usage = self.lock();
        let own = bytes.min(claim.0);
        (usage.used + usage.claimed)
            .checked_add(bytes - own)
            .filter(|&n| n <= self.limit)
            .ok_or(Denied::Total)?;
        let grown = usage.used + bytes;
        self.above_floor(usage.floor, usage.used, grown)?;
        usage.used = grown;
        usage.claimed -= own;
        claim.0 -= own;
        Ok(())
    }

    /// Take as much of `bytes` as `claim`, the total and (above the floor) the budget have
    /// left; how much that was.
    pub fn take_up_to(&self, bytes: usize, claim: &mut Claim) -> usize {
        let mut usage = self.lock();
        let own = bytes.min(claim.0);
        usage.claimed -= own;
        claim.0 -= own;
        let (used, floor) = (usage.used, usage.floor);
        let room = self.limit.saturating_sub(used + usage.claimed);
        let wanted = bytes.min(room.max(own));
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

    /// An admitted instance ended holding `bytes`: give them back (as [`Self::release`])
    /// with what is left of its `claim`, and let the next call in line look again.
    pub fn end(&self, bytes: usize, denied: bool, claim: Claim) {
        self.release(bytes, denied);
        let mut usage = self.lock();
        usage.claimed -= claim.0;
        usage.live -= 1;
        usage.wake_head();
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
    /// What admitted instances were promised and have not drawn yet.
    claimed: usize,
    /// Instances admitted and not ended.
    live: usize,
    /// The line: the next ticket to hand out, and the ticket admitted next.
    next: u64,
    serving: u64,
    /// The threads waiting in line, by ticket.
    parked: BTreeMap<u64, Thread>,
}

impl Usage {
    /// Wake the call at the head of the line, if it waits, to look again.
    fn wake_head(&self) {
        if let Some(head) = self.parked.get(&self.serving) {
            head.unpark();
        }
    }
}

/// A call's place in a plugin's line for memory.
#[must_use = "a ticket not admitted holds up the line"]
pub(crate) struct Ticket(u64);

/// Bytes of a plugin's total promised to one admitted instance, drawn on as it grows.
#[derive(Debug, Default)]
pub(crate) struct Claim(usize);

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

/// The resident memory of process `pid` as the kernel counts it (`VmRSS`), in bytes; 0
/// when it cannot be read. What `capstan bench` and the local plane report.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
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
        assert_eq!(pool.take_up_to(5, &mut Claim(0)), 1, "only what is left");
        assert_eq!(pool.take_up_to(5, &mut Claim(0)), 0);
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
        assert_eq!(
            bomb.take_up_to(60, &mut Claim(0)),
            50,
            "what is left: its floor and 40 spare"
        );
        small.release(50, false);
        bomb.release(50, false);
        assert_eq!(budget.spare_in_use(), 0);
    }

    #[test]
    fn a_long_line_is_let_in_one_by_one_and_nobody_is_left_waiting() {
        // Room for two instances of 40, and 64 calls lined up behind them: each end lets
        // the next in, and none is forgotten (a lost wake would leave the line stuck).
        let budget = Budget::new(10_000);
        let pool = PluginMemory::new(100, Some(budget.reserve("p", 40).unwrap()));
        let (done, finished) = std::sync::mpsc::channel();
        let line = pool.clone();
        std::thread::spawn(move || {
            let tickets: Vec<Ticket> = (0..64).map(|_| line.line_up()).collect();
            let most = Mutex::new(0);
            std::thread::scope(|s| {
                for ticket in tickets {
                    let (line, most) = (&line, &most);
                    s.spawn(move || {
                        let claim = line.admit_in_line(ticket);
                        let live = line.lock().live;
                        let mut most = most.lock().unwrap();
                        *most = (*most).max(live);
                        drop(most);
                        std::thread::sleep(std::time::Duration::from_micros(200));
                        line.end(0, false, claim);
                    });
                }
            });
            done.send(most.into_inner().unwrap()).unwrap();
        });
        let most = finished
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("all 64 calls admitted and ended within a minute");
        assert!(most <= 2, "never more live than the total has room for: {most}");
        assert_eq!(pool.lock().live, 0);
        assert!(
            pool.lock().parked.is_empty(),
            "no thread is left registered as waiting"
        );
    }

    /// An instance that held more than the floor raises it; a later load is admitted
    /// against the raised floor. An instance that was refused memory raises nothing.
    /// Calls wait in line for the total to have room for an instance of the floor's size,
    /// in the order they came; a call alone is admitted whatever it needs.
    #[test]
    fn calls_wait_in_line_for_room_in_the_plugins_total() {
        let budget = Budget::new(1000);
        let pool = PluginMemory::new(100, Some(budget.reserve("p", 40).unwrap()));
        let (first, second) = (pool.admit(), pool.admit());
        assert_eq!((first.0, second.0), (40, 40));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| tx.send(pool.admit()).unwrap());
            let waiting = rx.recv_timeout(std::time::Duration::from_millis(200));
            assert!(waiting.is_err(), "a third 40 does not fit beside 80 in 100");
            // The first grows by its claim and beyond: 10 more fit beside the second's claim.
            let mut first = first;
            assert_eq!(pool.grow(50, &mut first), Ok(()));
            assert_eq!(first.0, 0);
            assert_eq!(
                pool.grow(11, &mut Claim(0)),
                Err(Denied::Total),
                "50 held and 40 claimed: 101 > 100"
            );
            // It ends holding 50, which raises the floor: the third is admitted with 50.
            pool.end(50, false, first);
            let third = rx
                .recv_timeout(std::time::Duration::from_secs(5))
                .expect("admitted once the first ended");
            pool.end(0, false, third);
        });
        pool.end(0, false, second);
        // Alone, a call is admitted even when its floor passes the total: it faults itself.
        let small = PluginMemory::new(30, Some(budget.reserve("q", 40).unwrap()));
        let alone = small.admit();
        assert_eq!(alone.0, 30);
        small.end(0, false, alone);
    }

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
