//! One lease discipline, shared by leader election ([`crate::leader`]) and shard
//! membership ([`crate::shard::members`]):
//!
//! - **A term ends by itself.** The right to reconcile is a [`Tenure`]: a term that lasts
//!   `renew_deadline` past the *start* of its last successful renewal ([`Fence::renewed`]).
//!   Every reader compares that instant with the monotonic clock, so neither a hung API
//!   call, a paused process (SIGSTOP) nor a busy task extends it: after a pause, the first
//!   thing any reconcile or write checks finds the term over. A frozen machine may stop
//!   the monotonic clock as well, so the term also ends once the boot or wall clock moved
//!   beyond it by the lease's margin since the renewal began ([`clock`]).
//! - **An ended term never resumes.** A renewal after the term ended starts a new one;
//!   work pinned to the old term ([`Tenure::pin`]: a reconcile, a shard's controllers)
//!   stays fenced, and a shard's ranges are earned again.
//! - **Others expire by this process's clock.** Another holder's Lease is timed from when
//!   this process saw its resourceVersion change ([`Observed`]), so clocks need not agree.
//! - **Every call has a deadline**: the term's end ([`Fence::deadline`]).
//! - **Writes are fenced too**: a controller's client refuses to write outside its term
//!   ([`guard`]).
//!
//! Others wait `lease_duration` after *seeing* a renewal, which happened after it
//! started; the holder stops `renew_deadline` after it started. So the holder has stopped
//! before anyone takes over, by `lease_duration - renew_deadline` at least, whatever the
//! clocks say, provided their rates agree within that margin.
//!
//! The sequence (the unit test
//! `a_renewal_after_the_term_ended_begins_another_and_pinned_work_stays_fenced`): a renewal
//! that started at `attempt` succeeded, so the tenure is held; a reconcile pinned to that
//! term stays fenced once the term ends, even if another begins.

pub mod clock;
mod expiry;
pub mod guard;
mod hold;
mod settings;

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use clock::Clocks;
pub use clock::now;
pub use expiry::{Observed, valid_for};
pub use guard::guard;
pub use hold::{Holder, hold};
pub use settings::{Settings, identity};

/// The wall clock written into Leases (`renewTime`, `acquireTime`): the only wall-clock
/// times one replica reads from another, and which no decision here depends on. Built
/// with the `dev` feature, `CAPSTAN_DEV_CLOCK_OFFSET` (signed seconds) skews it, so the
/// tests can show that a replica whose clock is off changes nothing.
pub fn wall_clock() -> k8s_openapi::jiff::Timestamp {
    let now = k8s_openapi::jiff::Timestamp::now();
    #[cfg(feature = "dev")]
    if let Some(offset) = std::env::var("CAPSTAN_DEV_CLOCK_OFFSET")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        return now
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(offset))
            .unwrap_or(now);
    }
    now
}

/// One term of holding a lease.
#[derive(Clone, Copy, Debug)]
struct Term {
    /// Counts terms; work pinned to one is fenced in every later one.
    generation: u64,
    /// When the term ends unless renewed; `None`: not held.
    until: Option<Instant>,
    /// When this generation's term ended, once its holder ended it ([`Fence::end`]): what
    /// work pinned to it reports as its fence, however late it looks after (a thawed
    /// process whose renew loop ran first).
    ended: Option<Instant>,
    /// Held for good (no election).
    always: bool,
    /// When the last renewal started, and how far the boot or wall clock may move beyond
    /// the monotonic one since before the term is over ([`clock`]).
    renewed: Option<Renewal>,
    jump_limit: Option<Duration>,
    /// The term before this one: what work pinned to it reports as its fence.
    last_term: LastTerm,
}

/// How the term before the current one ended, kept for the work pinned to it: a thawed
/// process's renew loop may begin a new term before that work looks.
#[derive(Clone, Copy, Debug, Default)]
struct LastTerm {
    /// When it ended (ran out, or its holder ended it).
    end: Option<Instant>,
    /// Its last renewal, to time that end by.
    renewed: Option<Renewal>,
}

/// Which term a tenure follows, of those a [`Term`] knows of.
enum Whose {
    Current,
    Last,
    /// Before the last: nothing is known of it any more.
    Older,
}

/// When a renewal started, by [`now`] and by the three clocks.
#[derive(Clone, Copy, Debug)]
struct Renewal {
    at: Instant,
    clocks: Clocks,
}

impl Term {
    fn held_at(&self, now: Instant) -> bool {
        self.always || (self.until.is_some_and(|u| now < u) && !self.jumped())
    }

    /// Whether the monotonic clock stood still (a frozen machine) for longer than the
    /// lease's margin since the last renewal started: the others have counted that time.
    fn jumped(&self) -> bool {
        match (self.jump_limit, &self.renewed) {
            (Some(limit), Some(at)) => Clocks::read().jumped_since(&at.clocks) > limit,
            _ => false,
        }
    }
}

/// Whether this process may reconcile (or, pinned, may still in one term); cheap to clone.
#[derive(Clone, Debug)]
pub struct Tenure {
    term: watch::Receiver<Term>,
    stopping: watch::Receiver<bool>,
    /// Held only in this term.
    pinned: Option<u64>,
}

impl Tenure {
    /// A tenure without a lease: always held (a single replica).
    pub fn always() -> Tenure {
        let term = Term {
            generation: 0,
            until: None,
            ended: None,
            always: true,
            renewed: None,
            jump_limit: None,
            last_term: LastTerm::default(),
        };
        Tenure {
            term: watch::channel(term).1,
            stopping: watch::channel(false).1,
            pinned: None,
        }
    }

    fn held_in(&self, term: &Term, now: Instant) -> bool {
        matches!(self.whose(term), Whose::Current) && term.held_at(now)
    }

    /// Whether a pinned term is over for good: a later term began, or the holder ended it.
    /// Until then a pinned term past its end may still be renewed — a renewal that started
    /// in time and answered late (a loaded API server or host) extends it — so work that
    /// waits for it must wait for that answer, not give up on the first look.
    fn ended(&self, term: &Term) -> bool {
        self.pinned
            .is_some_and(|g| g != term.generation || term.until.is_none())
    }

    /// When this tenure's term ends as things stand (its end, or when its holder ended
    /// it), as far as `term` still knows it; `None` when held for good or forgotten.
    fn ends_in(&self, term: &Term) -> Option<Instant> {
        match self.whose(term) {
            Whose::Current => term.until.or(term.ended),
            Whose::Last => term.last_term.end,
            Whose::Older => None,
        }
    }

    /// When this (pinned) term ends as things stand: work that finished in it acted no
    /// later, since nothing after its end reaches the API server. `None` when held for
    /// good (no election) or two terms have begun since.
    pub fn ends(&self) -> Option<Instant> {
        self.ends_in(&self.term.borrow())
    }

    /// Which of the terms `term` knows of this tenure follows (unpinned: the current one).
    fn whose(&self, term: &Term) -> Whose {
        match self.pinned {
            Some(g) if g + 1 == term.generation => Whose::Last,
            Some(g) if g != term.generation => Whose::Older,
            _ => Whose::Current,
        }
    }

    /// Held right now.
    pub fn is_held(&self) -> bool {
        self.held_in(&self.term.borrow(), now())
    }

    /// This tenure limited to the current term: once it ends, this is never held again.
    pub fn pin(&self) -> Tenure {
        Tenure {
            pinned: Some(self.term.borrow().generation),
            ..self.clone()
        }
    }

    /// The term this tenure is pinned to (`None`: not pinned), to tell two pinned apart.
    pub fn pinned_to(&self) -> Option<u64> {
        self.pinned
    }

    /// Wait until held (`true`), or until the process is stopping or a pinned term is
    /// over for good (`false`).
    pub async fn acquired(&self) -> bool {
        let (mut term, mut stopping) = (self.term.clone(), self.stopping.clone());
        loop {
            let now = *term.borrow_and_update();
            if self.held_in(&now, self::now()) {
                return true;
            }
            if self.ended(&now) || *stopping.borrow() {
                return false;
            }
            tokio::select! {
                r = term.changed() => if r.is_err() { return false },
                _ = stopping.wait_for(|s| *s) => return false,
            }
        }
    }

    /// Resolves once not held — at the term's end at the latest, whatever its holder
    /// does — with when the term ended (for a pinned tenure: its own term).
    pub async fn lost(&self) -> Instant {
        let mut term = self.term.clone();
        let mut ends = None;
        loop {
            let now = *term.borrow_and_update();
            let at = self::now();
            // The current term's end moves with each renewal; an earlier one's is fixed,
            // and once forgotten (two terms on) the last one seen stands.
            ends = match self.whose(&now) {
                Whose::Current => self.ends_in(&now),
                Whose::Last | Whose::Older => ends.or(self.ends_in(&now)),
            };
            if !self.held_in(&now, at) {
                return ends.map_or(at, |e| e.min(at));
            }
            tokio::select! {
                r = term.changed() => if r.is_err() {
                    // Nobody renews any more: the term runs out on its own.
                    ends_at(now).await;
                    return self::now();
                },
                () = ends_at(now) => {}
            }
        }
    }
}

impl Tenure {
    /// Run `work` within this (pinned) term: its output, or when the term ended. Work
    /// that finishes only after its term ended counts as fenced at the term's end, since
    /// its last step may have crossed it and nothing after reached the API server.
    pub async fn within<T>(&self, work: impl Future<Output = T>) -> Result<T, Instant> {
        // The term is polled first: after a pause (SIGSTOP) work whose term ended
        // meanwhile is dropped before it takes another step, not raced against it.
        let done = tokio::select! {
            biased;
            ended = self.lost() => return Err(ended),
            done = work => done,
        };
        if self.is_held() {
            Ok(done)
        } else {
            Err(self.lost().await)
        }
    }
}

impl Tenure {
    /// The wall-clock time at which this process's clock read `at`, an instant of its
    /// (pinned) term such as its fence: timed from the term's last renewal, since a frozen
    /// machine's clock read `at` from the freeze until the thaw, and its work could act
    /// only at the start of that. Without a renewal to time it from, counted back from now.
    pub fn wall_at(&self, at: Instant) -> std::time::SystemTime {
        let term = self.term.borrow();
        let renewal = match self.whose(&term) {
            Whose::Current => term.renewed,
            Whose::Last => term.last_term.renewed,
            Whose::Older => None,
        };
        match renewal {
            Some(r) if at >= r.at => r.clocks.wall() + (at - r.at),
            _ => std::time::SystemTime::now() - now().saturating_duration_since(at),
        }
    }
}

/// Until `term` ends; forever if it never does.
async fn ends_at(term: Term) {
    match term.until {
        Some(until) if !term.always => clock::sleep_until(until).await,
        _ => std::future::pending().await,
    }
}

/// The holder's side of a [`Tenure`]: renewals extend the term, an ended term is never
/// extended, and dropping the fence ends the term.
#[derive(Debug)]
pub struct Fence {
    term: watch::Sender<Term>,
    stopping: watch::Sender<bool>,
    renew_deadline: Duration,
}

impl Fence {
    /// A fence whose terms last `renew_deadline` past each renewal's start; not held yet.
    pub fn new(renew_deadline: Duration) -> (Fence, Tenure) {
        let (term, rx) = watch::channel(Term {
            generation: 0,
            until: None,
            ended: None,
            always: false,
            renewed: None,
            jump_limit: None,
            last_term: LastTerm::default(),
        });
        let (stopping, stopping_rx) = watch::channel(false);
        let tenure = Tenure {
            term: rx,
            stopping: stopping_rx,
            pinned: None,
        };
        let fence = Fence {
            term,
            stopping,
            renew_deadline,
        };
        (fence, tenure)
    }

    /// A tenure following this fence's terms.
    pub fn tenure(&self) -> Tenure {
        Tenure {
            term: self.term.subscribe(),
            stopping: self.stopping.subscribe(),
            pinned: None,
        }
    }

    /// Whether the term is held at `at`.
    pub fn held_at(&self, at: Instant) -> bool {
        self.term.borrow().held_at(at)
    }

    /// The latest a Lease call started at `attempt` may finish and still count: the
    /// term's end while held, else one renew deadline.
    pub fn deadline(&self, attempt: Instant) -> Instant {
        match self.term.borrow().until {
            Some(until) if attempt < until => until,
            _ => attempt + self.renew_deadline,
        }
    }

    /// End a term once the boot or wall clock moved more than `margin` beyond the
    /// monotonic one since its last renewal started (a frozen machine): the others count
    /// time by their clocks, and take over `margin` after this holder should have stopped.
    pub fn limit_jumps(&self, margin: Duration) {
        self.term.send_modify(|t| t.jump_limit = Some(margin));
    }

    /// A renewal that started at `attempt` succeeded: the term now ends one renew deadline
    /// after `attempt`. Returns `true` when that began a new term (the last one had ended
    /// by `attempt`, or none was held). The clocks are read now, as for an attempt just made.
    #[cfg(test)]
    pub fn renewed(&self, attempt: Instant) -> bool {
        self.renewed_at(attempt, Clocks::read())
    }

    /// [`Fence::renewed`], with the clocks as they were when the renewal started.
    pub fn renewed_at(&self, attempt: Instant, clocks: Clocks) -> bool {
        let until = attempt + self.renew_deadline;
        let mut began = false;
        self.term.send_modify(|t| {
            if !t.held_at(attempt) {
                t.generation += 1;
                t.last_term = LastTerm {
                    end: t.ended.or(t.until),
                    renewed: t.renewed,
                };
                t.ended = None;
                began = true;
            }
            t.until = Some(t.until.filter(|_| !began).map_or(until, |u| u.max(until)));
            t.renewed = Some(Renewal { at: attempt, clocks });
        });
        began
    }

    /// End the term now; `true` if one was held.
    pub fn end(&self) -> bool {
        let now = now();
        let mut was = false;
        self.term.send_if_modified(|t| {
            was = t.held_at(now);
            let until = t.until.take();
            // A term that ran out before its end was noticed ended when it ran out.
            t.ended = until.map(|u| u.min(now)).or(t.ended);
            until.is_some()
        });
        was
    }

    /// Stop [`Tenure::acquired`] waiting (the process is stopping); a held term stays held.
    pub fn stop_waiters(&self) {
        let _ = self.stopping.send(true);
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests;
