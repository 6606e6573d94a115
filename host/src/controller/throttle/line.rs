//! The order in which a plugin's objects refused for want of CPU credit get it back:
//! each waiter holds the credit its kind of call is expected to cost for as long as it
//! keeps its place, so an object asking later starts only on the credit left over once everyone
//! refused before it is covered. Without it the credit goes to whichever object asks
//! first once the debt clears: an object that spins to its deadline and retries on a
//! short backoff asks right then, takes every turn, and its siblings wait for ever. An
//! honest plugin's waiters hold microseconds each, so a long line of them holds nothing
//! back.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::Call;
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
    /// The call it waits to make.
    call: Call,
    /// When it was told to come back.
    due: Instant,
}

impl Line {
    /// How many waiters of each kind of call are ahead of `key` (all of them, if it is
    /// not in the line), once those that did not come back in time have lost their places.
    pub fn ahead(&mut self, key: &ObjectKey, now: Instant) -> [u32; 2] {
        self.waiting.retain(|w| w.due + GRACE >= now);
        let mut ahead = [0, 0];
        for w in self.waiting.iter().take_while(|w| &w.key != key) {
            ahead[w.call as usize] += 1;
        }
        ahead
    }

    /// `key` took its turn: it leaves the line.
    pub fn served(&mut self, key: &ObjectKey) {
        if let Some(place) = self.waiting.iter().position(|w| &w.key == key) {
            self.waiting.remove(place);
        }
    }

    /// `key`, refused a `call`, was told to come back after `wait`: it keeps its place,
    /// or joins at the end.
    pub fn wait(&mut self, key: &ObjectKey, call: Call, now: Instant, wait: Duration) {
        let due = now + wait;
        match self.waiting.iter_mut().find(|w| &w.key == key) {
            Some(w) => {
                w.due = due;
                w.call = call;
            }
            None => self.waiting.push_back(Waiter {
                key: key.clone(),
                call,
                due,
            }),
        }
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
    fn waiters_are_counted_ahead_of_those_refused_after_them_until_served() {
        let (a, b, c) = (
            ObjectKey::from("ns/a"),
            ObjectKey::from("ns/b"),
            ObjectKey::from("ns/c"),
        );
        let mut line = Line::default();
        let t0 = Instant::now();
        assert_eq!(line.ahead(&a, t0), [0, 0], "nobody waits");
        line.wait(&b, Call::Reconcile, t0, Duration::from_secs(1));
        line.wait(&a, Call::Related, t0, Duration::from_secs(2));
        assert_eq!(line.ahead(&b, t0), [0, 0]);
        assert_eq!(line.ahead(&a, t0), [0, 1], "b was refused first");
        assert_eq!(line.ahead(&c, t0), [1, 1], "a newcomer is behind both");
        line.served(&b);
        assert_eq!(line.ahead(&a, t0), [0, 0]);
        line.served(&a);
        assert_eq!(line.len(), 0);
    }

    #[test]
    fn a_waiter_that_never_comes_back_gives_up_its_place() {
        let (a, b) = (ObjectKey::from("ns/a"), ObjectKey::from("ns/b"));
        let mut line = Line::default();
        let t0 = Instant::now();
        line.wait(&a, Call::Reconcile, t0, Duration::from_millis(100));
        line.wait(&b, Call::Reconcile, t0, Duration::from_millis(1000));
        assert_eq!(
            line.ahead(&b, t0 + Duration::from_millis(500)),
            [0, 1],
            "a may still come"
        );
        assert_eq!(
            line.ahead(&b, t0 + Duration::from_millis(1200)),
            [0, 0],
            "a is gone"
        );
        assert_eq!(line.len(), 1);
    }
}
