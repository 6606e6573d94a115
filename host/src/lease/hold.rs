//! The one fenced renew loop, for leader election and shard membership alike: every
//! round is bounded by the term's end, a round that succeeds renews the term from the
//! moment it *started*, and a term that runs out is over — whatever the API does, however
//! long a call hangs, whatever the process was doing meanwhile.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::clock::{self, Clocks};
use super::{Fence, Tenure};

/// One holder's side of [`hold`]: how to acquire or renew, and what to do with the term.
pub trait Holder: Send {
    /// What a successful round decided, acted on once the term is renewed.
    type Plan: Send;

    /// Acquire or renew the Lease once: `Ok(Some(plan))` when held after it, `Ok(None)`
    /// when another holds it. `held` says the term still held when the round began; if
    /// not, whatever was held before must be earned again.
    fn round(&mut self, held: bool) -> impl Future<Output = Result<Option<Self::Plan>, kube::Error>> + Send;

    /// A round succeeded and is about to begin a new term: said before any work waiting
    /// for the term can start, so logs and metrics never show work ahead of its term.
    fn beginning(&mut self) {}

    /// Act on `plan` under `tenure`, the term the round renewed (`began`: a new one).
    fn commit(&mut self, plan: Self::Plan, tenure: Tenure, began: bool);

    /// The term is over: stop everything done under it.
    fn lapsed(&mut self);

    /// Wait for the next round, due at `next` at the latest; `held`: holding now.
    fn wait(&mut self, next: Instant, held: bool) -> impl Future<Output = ()> + Send;
}

/// Run `holder`'s rounds every `retry` (sooner when it wakes) until the future is dropped.
pub async fn hold<H: Holder>(fence: &Fence, retry: Duration, holder: &mut H) {
    let mut holding = false;
    loop {
        let (attempt, clocks) = (clock::now(), Clocks::read());
        let held = fence.held_at(attempt);
        if holding && !held {
            lapse(
                fence,
                holder,
                &mut holding,
                "the lease was not renewed within the renew deadline",
            );
        }
        let deadline = clock::real(fence.deadline(attempt));
        let outcome = tokio::time::timeout_at(deadline, holder.round(held)).await;
        match outcome {
            Ok(Ok(Some(plan))) => {
                // Only this loop begins terms, so this is what `renewed` will decide.
                if !fence.held_at(attempt) {
                    holder.beginning();
                }
                let began = fence.renewed_at(attempt, clocks);
                holding = true;
                holder.commit(plan, fence.tenure().pin(), began);
            }
            Ok(Ok(None)) if holding => lapse(fence, holder, &mut holding, "the lease is held by another"),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "lease call failed"),
            Err(_) => tracing::debug!("lease call did not finish within the renew deadline"),
        }
        let now = clock::now();
        if holding && !fence.held_at(now) {
            lapse(
                fence,
                holder,
                &mut holding,
                "the lease was not renewed within the renew deadline",
            );
        }
        let next = (attempt + retry).max(now).min(fence.deadline(now));
        holder.wait(next, holding).await;
    }
}

fn lapse<H: Holder>(fence: &Fence, holder: &mut H, holding: &mut bool, why: &str) {
    fence.end();
    *holding = false;
    tracing::warn!(why, "lease term over; its work is fenced");
    holder.lapsed();
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// What a scripted round does.
    enum Step {
        /// Answers after this long: held, or held by another.
        Answer(Duration, bool),
        Fail,
        Hang,
    }

    #[derive(Default)]
    struct Script {
        steps: VecDeque<Step>,
        commits: Vec<(Instant, bool, Tenure)>,
        lapses: Vec<Instant>,
        rounds: Vec<(Instant, bool)>,
        /// At each `beginning`: whether the fence's tenure was already held.
        beginnings: Vec<bool>,
        tenure: Option<Tenure>,
    }

    impl Holder for Script {
        type Plan = ();

        async fn round(&mut self, held: bool) -> Result<Option<()>, kube::Error> {
            self.rounds.push((Instant::now(), held));
            match self.steps.pop_front() {
                Some(Step::Answer(after, ours)) => {
                    tokio::time::sleep(after).await;
                    Ok(ours.then_some(()))
                }
                Some(Step::Fail) => Err(kube::Error::LinesCodecMaxLineLengthExceeded),
                Some(Step::Hang) | None => std::future::pending().await,
            }
        }

        fn beginning(&mut self) {
            let held = self.tenure.as_ref().is_some_and(Tenure::is_held);
            self.beginnings.push(held);
        }

        fn commit(&mut self, (): (), tenure: Tenure, began: bool) {
            self.commits.push((Instant::now(), began, tenure));
        }

        fn lapsed(&mut self) {
            self.lapses.push(Instant::now());
        }

        async fn wait(&mut self, next: Instant, _: bool) {
            tokio::time::sleep_until(next).await;
        }
    }

    const RENEW: Duration = Duration::from_secs(10);
    const RETRY: Duration = Duration::from_secs(2);

    async fn run(steps: Vec<Step>, for_: Duration) -> (Script, Fence) {
        let (fence, tenure) = Fence::new(RENEW);
        let mut script = Script {
            steps: steps.into(),
            tenure: Some(tenure),
            ..Script::default()
        };
        let _ = tokio::time::timeout(for_, hold(&fence, RETRY, &mut script)).await;
        (script, fence)
    }

    #[tokio::test(start_paused = true)]
    async fn a_hanging_call_fences_at_the_attempt_plus_the_renew_deadline() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let (script, fence) = run(
            vec![
                Step::Answer(ms(300), true),
                Step::Answer(ms(500), true),
                Step::Hang,
            ],
            ms(30_000),
        )
        .await;
        // Renewed from the start of the second round (t0 + 2 s), not from its answer.
        assert_eq!(script.commits.len(), 2);
        assert_eq!(script.lapses, vec![t0 + RETRY + RENEW]);
        assert!(!script.commits[1].2.is_held());
        assert!(!fence.held_at(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn errors_keep_the_term_until_it_runs_out_and_a_recovery_in_time_keeps_it() {
        let fast = |ours| Step::Answer(Duration::from_millis(10), ours);
        let steps = vec![fast(true), Step::Fail, Step::Fail, fast(true), Step::Fail];
        let (script, _fence) = run(steps, Duration::from_secs(9)).await;
        assert!(
            script.lapses.is_empty(),
            "errors within the deadline do not fence"
        );
        assert_eq!(script.commits.len(), 2);
        assert!(!script.commits[1].1, "the same term");
        assert!(
            script.commits[0].2.is_held(),
            "the first pin still holds: one term"
        );
        // Errors until the term runs out: fenced then, at the first attempt + the deadline.
        let t1 = Instant::now();
        let failing = std::iter::once(fast(true)).chain(std::iter::repeat_with(|| Step::Fail).take(8));
        let (script, _fence) = run(failing.collect(), Duration::from_secs(20)).await;
        assert_eq!(script.lapses, vec![t1 + RENEW]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_does_not_count_and_the_next_success_begins_a_new_term() {
        let ms = Duration::from_millis;
        // Held; then an answer that arrives 12 s after its round began (a stalled
        // connection): past the term, so it is not a renewal; then a prompt one.
        let steps = vec![
            Step::Answer(ms(10), true),
            Step::Answer(ms(12_000), true),
            Step::Answer(ms(10), true),
        ];
        let (script, _fence) = run(steps, ms(14_000)).await;
        assert_eq!(script.lapses.len(), 1);
        assert_eq!(script.commits.len(), 2);
        assert!(
            script.commits[0].1 && script.commits[1].1,
            "each success began a term"
        );
        assert!(
            !script.commits[0].2.is_held(),
            "the first term's work stays fenced"
        );
        assert!(script.commits[1].2.is_held());
        assert_eq!(
            script.beginnings,
            vec![false, false],
            "each term is announced before work waiting for it can see it"
        );
        assert!(
            !script.rounds[2].1,
            "the round after the lapse knew the term had ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn losing_the_lease_to_another_fences_at_once() {
        let fast = |ours| Step::Answer(Duration::from_millis(10), ours);
        let (script, _fence) = run(vec![fast(true), fast(false), Step::Hang], Duration::from_secs(5)).await;
        assert_eq!(script.lapses.len(), 1);
        assert!(script.lapses[0] < Instant::now() - Duration::from_secs(2));
        assert!(!script.commits[0].2.is_held());
    }
}
