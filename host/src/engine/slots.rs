//! Back-pressure on the instance pool: a call waits for a free slot instead of failing to
//! instantiate. An exhausted pool is the host's limit, never a fault of the object being
//! reconciled.

use std::sync::{Arc, Condvar, Mutex};

/// Counts the free slots of the engine's pool.
pub(crate) struct Slots {
    free: Mutex<u32>,
    freed: Condvar,
}

/// One taken slot; given back when dropped (after the instance that used it).
pub(crate) struct Slot(Arc<Slots>);

impl Slots {
    /// `n` free slots.
    pub fn new(n: u32) -> Arc<Slots> {
        Arc::new(Slots {
            free: Mutex::new(n),
            freed: Condvar::new(),
        })
    }

    /// Take a slot, blocking this (blocking-pool) thread until one is free.
    pub fn take(self: &Arc<Self>) -> Slot {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Slot(self.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn never_more_holders_than_slots() {
        let slots = Slots::new(2);
        let (held, peak) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (slots, held, peak) = (slots.clone(), held.clone(), peak.clone());
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let _slot = slots.take();
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
        assert_eq!(*slots.free.lock().unwrap(), 2, "every slot given back");
    }
}
