//! The order in which a plugin's objects refused for want of CPU credit get it back:
//! first refused, first served. Without it the credit goes to whichever object asks first
//! once the debt clears: an object that spins to its deadline and retries on a short
//! backoff asks right then, takes every turn, and its siblings wait for ever.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::key::ObjectKey;

/// How long past its turn a waiter keeps its place: an object deleted meanwhile, or
/// queued behind busy workers, does not hold the others back for longer.
const GRACE: Duration = Duration::from_secs(1);

/// Objects waiting for credit, in the order they were refused.
#[derive(Default)]
pub(super) struct Line {
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    key: ObjectKey,
    /// When it was told to come back.
    due: Instant,
}

impl Line {
    /// Whether `key` may take credit now: nobody who is still coming waits ahead of it.
    pub fn first(&mut self, key: &ObjectKey, now: Instant) -> bool {
        while self.waiting.front().is_some_and(|w| w.due + GRACE < now) {
            self.waiting.pop_front();
        }
        self.waiting.front().is_none_or(|w| &w.key == key)
    }

    /// `key` took its turn: it leaves the line.
    pub fn served(&mut self, key: &ObjectKey) {
        if self.waiting.front().is_some_and(|w| &w.key == key) {
            self.waiting.pop_front();
        }
    }

    /// `key` was refused and must wait at least `wait`: it keeps its place, or joins at
    /// the end, told to come back no sooner than `step` after the one ahead of it. How
    /// long it waits.
    pub fn wait(&mut self, key: &ObjectKey, now: Instant, wait: Duration, step: Duration) -> Duration {
        let place = match self.waiting.iter().position(|w| &w.key == key) {
            Some(place) => place,
            None => {
                self.waiting.push_back(Waiter {
                    key: key.clone(),
                    due: now,
                });
                self.waiting.len() - 1
            }
        };
        let behind = place.checked_sub(1).map(|ahead| self.waiting[ahead].due + step);
        let due = behind.map_or(now + wait, |b| b.max(now + wait));
        self.waiting[place].due = due;
        due - now
    }

    /// How many objects wait.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_refused_is_the_first_served() {
        let (a, b) = (ObjectKey::from("ns/a"), ObjectKey::from("ns/b"));
        let mut line = Line::default();
        let t0 = Instant::now();
        let step = Duration::from_millis(500);
        assert!(line.first(&a, t0), "nobody waits");
        assert_eq!(
            line.wait(&b, t0, Duration::from_secs(1), step),
            Duration::from_secs(1)
        );
        let a_waits = line.wait(&a, t0, Duration::from_millis(10), step);
        assert_eq!(a_waits, Duration::from_millis(1500), "behind b, one step on");
        let later = t0 + Duration::from_millis(1200);
        assert!(!line.first(&a, later), "b was refused first");
        assert!(line.first(&b, later));
        line.served(&b);
        assert!(line.first(&a, later));
        line.served(&a);
        assert_eq!(line.len(), 0);
    }

    #[test]
    fn a_waiter_that_never_comes_back_gives_up_its_place() {
        let (a, b) = (ObjectKey::from("ns/a"), ObjectKey::from("ns/b"));
        let mut line = Line::default();
        let t0 = Instant::now();
        line.wait(&a, t0, Duration::from_millis(100), Duration::ZERO);
        line.wait(&b, t0, Duration::from_millis(1000), Duration::ZERO);
        assert!(
            !line.first(&b, t0 + Duration::from_millis(500)),
            "a may still come"
        );
        assert!(line.first(&b, t0 + Duration::from_millis(1200)), "a is gone");
        assert_eq!(line.len(), 1);
    }
}
