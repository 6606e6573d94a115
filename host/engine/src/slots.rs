//! The instance pool, shared fairly by every plugin: a call waits for a free slot instead
//! of failing to instantiate, and when plugins wait together the next free slot goes to
//! the one holding fewest. A plugin alone may use the whole pool; under contention each
//! gets at least its fair share (the pool over the plugins wanting slots), so a busy
//! plugin slows only itself. An exhausted pool is the host's limit, never a fault of the
//! object being reconciled.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::Thread;

/// The engine's pool of instance slots.
pub(crate) struct Slots {
    pool: Mutex<Pool>,
    /// Where finished instances are kept for reuse, holding slots: a call that must
    /// wait for a slot has them given back first.
    kept: Mutex<Vec<Weak<dyn Reclaim>>>,
}

/// Instances kept idle that give their slots back when a call waits for one.
pub(crate) trait Reclaim: Send + Sync {
    /// Drop every instance kept.
    fn reclaim(&self);
}

/// Free slots, and per plugin the slots it holds and the calls it has waiting.
#[derive(Default)]
struct Pool {
    free: u32,
    held: HashMap<Arc<str>, u32>,
    waiting: HashMap<Arc<str>, u32>,
    /// The threads of waiting calls, per plugin, in the order they began to wait.
    parked: HashMap<Arc<str>, VecDeque<Thread>>,
}

impl Pool {
    fn held(&self, owner: &str) -> u32 {
        self.held.get(owner).copied().unwrap_or(0)
    }

    /// A slot is free and no other plugin waiting holds fewer than `owner` (ties share).
    fn turn_of(&self, owner: &str) -> bool {
        let mine = self.held(owner);
        self.free > 0
            && !self
                .waiting
                .keys()
                .any(|other| other.as_ref() != owner && self.held(other) < mine)
    }

    /// Wake the first waiting call of the plugin whose turn a free slot is, if it sleeps:
    /// only it may take the slot, so the other waiting calls sleep on. Waking all of them
    /// for every slot (a condition variable's `notify_all`) costs a host with hundreds
    /// of calls waiting most of its CPU, as it did the plugins' memory line.
    fn wake_next(&self) {
        if self.free == 0 {
            return;
        }
        let next = self.waiting.keys().min_by_key(|owner| self.held(owner));
        if let Some(thread) = next.and_then(|owner| self.parked.get(owner)?.front()) {
            thread.unpark();
        }
    }

    /// Take this thread out of `owner`'s sleeping calls.
    fn leave(&mut self, owner: &str, me: &Thread) {
        if let Some(queue) = self.parked.get_mut(owner) {
            queue.retain(|t| t.id() != me.id());
            if queue.is_empty() {
                self.parked.remove(owner);
            }
        }
    }
}

/// One taken slot; given back when dropped (after the instance that used it).
pub(crate) struct Slot {
    slots: Arc<Slots>,
    owner: Arc<str>,
}

impl Slots {
    /// `n` free slots.
    pub fn new(n: u32) -> Arc<Slots> {
        Arc::new(Slots {
            pool: Mutex::new(Pool {
                free: n,
                ..Pool::default()
            }),
            kept: Mutex::default(),
        })
    }

    /// Have `kept` give its instances back whenever a call waits for a slot.
    pub fn register(&self, kept: Weak<dyn Reclaim>) {
        let mut all = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|k| k.strong_count() > 0);
        all.push(kept);
    }

    /// Whether a call waits for a slot.
    pub fn waiting(&self) -> bool {
        !self.lock().waiting.is_empty()
    }

    /// Drop every kept instance (outside the pool's lock: each gives its slot back).
    fn reclaim(&self) {
        let kept: Vec<_> = (self.kept.lock().unwrap_or_else(|e| e.into_inner()).iter())
            .filter_map(Weak::upgrade)
            .collect();
        for k in kept {
            k.reclaim();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a slot for plugin `owner`, blocking this (blocking-pool) thread until it is
    /// the plugin's turn.
    pub fn take(self: &Arc<Self>, owner: &Arc<str>) -> Slot {
        let mut pool = self.lock();
        if !pool.turn_of(owner) {
            *pool.waiting.entry(owner.clone()).or_default() += 1;
            // Waiting now, so an instance kept from here on is not kept; those kept
            // before give their slots back.
            drop(pool);
            self.reclaim();
            pool = self.lock();
            let me = std::thread::current();
            let mut parked = false;
            while !pool.turn_of(owner) {
                if !parked {
                    pool.parked
                        .entry(owner.clone())
                        .or_default()
                        .push_back(me.clone());
                    parked = true;
                }
                // The slot may be another's turn whose call was not yet asleep when it
                // came free: wake it. (A wake that comes before the park is kept.)
                pool.wake_next();
                drop(pool);
                std::thread::park();
                pool = self.lock();
            }
            pool.leave(owner, &me);
            if let Some(n) = pool.waiting.get_mut(owner) {
                *n -= 1;
                if *n == 0 {
                    pool.waiting.remove(owner);
                }
            }
        }
        pool.free -= 1;
        *pool.held.entry(owner.clone()).or_default() += 1;
        // Whom this call's turn held back (it held fewer) may go now.
        pool.wake_next();
        Slot {
            slots: self.clone(),
            owner: owner.clone(),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut pool = self.slots.lock();
        pool.free += 1;
        if let Some(n) = pool.held.get_mut(&self.owner) {
            *n -= 1;
            if *n == 0 {
                pool.held.remove(&self.owner);
            }
        }
        pool.wake_next();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[test]
    fn never_more_holders_than_slots() {
        let slots = Slots::new(2);
        let (held, peak) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (slots, held, peak) = (slots.clone(), held.clone(), peak.clone());
                let owner: Arc<str> = Arc::from(format!("plugin-{}", i % 3));
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _slot = slots.take(&owner);
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::yield_now();
                        held.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(peak.load(Ordering::SeqCst), 2);
        let pool = slots.lock();
        assert_eq!(pool.free, 2, "every slot given back");
        assert!(pool.held.is_empty() && pool.waiting.is_empty() && pool.parked.is_empty());
    }

    /// A hundred calls of five plugins waiting on four slots, each woken by name: every
    /// call gets its slot in the end (a lost wake would leave the pool stuck).
    #[test]
    fn many_calls_waiting_on_a_small_pool_all_get_their_slot() {
        let slots = Slots::new(4);
        let (done, finished) = std::sync::mpsc::channel();
        let pool = slots.clone();
        std::thread::spawn(move || {
            let threads: Vec<_> = (0..100)
                .map(|i| {
                    let slots = pool.clone();
                    let owner: Arc<str> = Arc::from(format!("plugin-{}", i % 5));
                    std::thread::spawn(move || {
                        for _ in 0..20 {
                            let _slot = slots.take(&owner);
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("2 000 takes of 4 slots done within a minute");
        let pool = slots.lock();
        assert_eq!(pool.free, 4, "every slot given back");
        assert!(pool.waiting.is_empty() && pool.parked.is_empty());
    }

    #[test]
    fn one_plugin_alone_may_take_the_whole_pool() {
        let slots = Slots::new(4);
        let busy: Arc<str> = Arc::from("busy");
        let taken: Vec<Slot> = (0..4).map(|_| slots.take(&busy)).collect();
        assert_eq!(slots.lock().held("busy"), 4);
        drop(taken);
        assert_eq!(slots.lock().free, 4);
    }

    /// A plugin holding the whole pool, with more calls queued, does not starve another:
    /// each slot it gives back goes to the plugin holding fewer until both hold half.
    #[test]
    fn under_contention_a_freed_slot_goes_to_the_plugin_holding_fewest() {
        let slots = Slots::new(4);
        let (busy, quiet): (Arc<str>, Arc<str>) = (Arc::from("busy"), Arc::from("quiet"));
        let mut held: Vec<Slot> = (0..4).map(|_| slots.take(&busy)).collect();
        let waiter = |owner: &Arc<str>| {
            let (slots, owner) = (slots.clone(), owner.clone());
            std::thread::spawn(move || slots.take(&owner))
        };
        let more_busy: Vec<_> = (0..4).map(|_| waiter(&busy)).collect();
        let quiet_calls: Vec<_> = (0..2).map(|_| waiter(&quiet)).collect();
        while slots.lock().waiting.values().sum::<u32>() < 6 {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Two slots come back: both go to the plugin holding none, not to the busy one
        // that queued first.
        held.truncate(2);
        let quiet_slots: Vec<Slot> = quiet_calls.into_iter().map(|t| t.join().unwrap()).collect();
        let pool = slots.lock();
        assert_eq!((pool.held("quiet"), pool.held("busy")), (2, 2));
        assert_eq!(pool.waiting.get("busy"), Some(&4), "the busy plugin's calls wait");
        drop(pool);
        drop((held, quiet_slots));
        let rest: Vec<Slot> = more_busy.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(
            rest.len(),
            4,
            "with the pool free again the busy plugin takes it all"
        );
    }
}
