use super::*;

const DEADLINE: Duration = Duration::from_secs(10);

#[tokio::test(start_paused = true)]
async fn a_term_ends_by_itself_at_the_renew_deadline() {
    let (fence, tenure) = Fence::new(DEADLINE);
    assert!(!tenure.is_held());
    let attempt = Instant::now();
    tokio::time::advance(Duration::from_secs(3)).await;
    assert!(fence.renewed(attempt), "the first renewal begins a term");
    assert!(tenure.is_held());
    // Nobody renews: lost() resolves at attempt + deadline, not later.
    tokio::time::timeout(DEADLINE, tenure.lost()).await.expect("lost");
    assert_eq!(Instant::now(), attempt + DEADLINE);
    assert!(!tenure.is_held() && !fence.held_at(Instant::now()));
}

#[tokio::test(start_paused = true)]
async fn a_renewal_after_the_term_ended_begins_another_and_pinned_work_stays_fenced() {
    let (fence, tenure) = Fence::new(DEADLINE);
    fence.renewed(Instant::now());
    let first = tenure.pin();
    tokio::time::advance(Duration::from_secs(4)).await;
    assert!(
        !fence.renewed(Instant::now()),
        "a renewal in time extends the term"
    );
    assert!(first.is_held());
    // A pause longer than the deadline (SIGSTOP): the renewal that follows starts late.
    tokio::time::advance(DEADLINE + Duration::from_secs(1)).await;
    assert!(!first.is_held());
    assert!(fence.renewed(Instant::now()), "a new term");
    assert!(tenure.is_held(), "the unpinned tenure follows the new term");
    assert!(!first.is_held(), "work pinned to the old term stays fenced");
    assert!(!first.acquired().await, "a pinned term never comes back");
    tokio::time::timeout(Duration::from_millis(1), first.lost())
        .await
        .expect("lost at once");
}

#[tokio::test(start_paused = true)]
async fn pinned_work_waits_out_a_renewal_that_answers_after_the_term_end() {
    let (fence, tenure) = Fence::new(DEADLINE);
    fence.renewed(Instant::now());
    let pinned = tenure.pin();
    // A renewal starts in time; the API (or a loaded host) answers after the term's end.
    tokio::time::advance(Duration::from_secs(9)).await;
    let attempt = Instant::now();
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(!pinned.is_held(), "past the term's end, not yet renewed");
    let waiting = tokio::spawn({
        let pinned = pinned.clone();
        async move { pinned.acquired().await }
    });
    tokio::task::yield_now().await;
    assert!(
        !waiting.is_finished(),
        "the term may still be renewed: wait, do not give up"
    );
    assert!(
        !fence.renewed(attempt),
        "started in time: the same term, extended"
    );
    assert!(waiting.await.expect("joined"), "held again in its own term");
    // The same wait ends with `false` once the holder ends the term for good.
    tokio::time::advance(DEADLINE).await;
    let waiting = tokio::spawn(async move { pinned.acquired().await });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    fence.end();
    assert!(!waiting.await.expect("joined"), "ended: never held again");
}

#[tokio::test(start_paused = true)]
async fn a_call_gets_the_term_end_as_its_deadline() {
    let (fence, _tenure) = Fence::new(DEADLINE);
    let t0 = Instant::now();
    assert_eq!(fence.deadline(t0), t0 + DEADLINE, "not held: one deadline");
    fence.renewed(t0);
    tokio::time::advance(Duration::from_secs(7)).await;
    assert_eq!(
        fence.deadline(Instant::now()),
        t0 + DEADLINE,
        "held: the term's end"
    );
}

#[tokio::test(start_paused = true)]
async fn ending_or_dropping_the_fence_fences_at_once() {
    let (fence, tenure) = Fence::new(DEADLINE);
    fence.renewed(Instant::now());
    assert!(fence.end());
    assert!(!tenure.is_held());
    fence.renewed(Instant::now());
    assert!(tenure.is_held());
    drop(fence);
    assert!(!tenure.is_held());
    assert!(!tenure.acquired().await, "nobody renews any more");
}

#[tokio::test(start_paused = true)]
async fn work_within_a_term_is_fenced_at_its_end_whoever_finishes_first() {
    let (fence, tenure) = Fence::new(DEADLINE);
    let start = Instant::now();
    fence.renewed(start);
    let term = tenure.pin();
    assert_eq!(term.within(async { 7 }).await, Ok(7));
    // Work still running when the term ends is dropped at the end.
    let slow = term.within(tokio::time::sleep(DEADLINE * 2)).await;
    assert_eq!(slow, Err(start + DEADLINE));
    // Work ready only after the term ended (a thawed process): fenced, not finished.
    let late = term.within(std::future::ready(())).await;
    assert_eq!(late, Err(start + DEADLINE));
    // Work whose last step crosses the end: fenced at the end.
    fence.renewed(Instant::now());
    let term = tenure.pin();
    let until = Instant::now() + DEADLINE;
    let crossing = term
        .within(async {
            tokio::time::sleep(DEADLINE / 2).await;
            tokio::time::advance(DEADLINE).await;
        })
        .await;
    assert_eq!(crossing, Err(until));
}

/// The CI failure of stop 63: after a SIGSTOP the renew loop ran first and ended the term;
/// the reconcile pinned to it then said it was fenced at the thaw, 20 s after its term
/// really ended, and so seemed to run beside the successor.
#[tokio::test(start_paused = true)]
async fn work_thawed_after_its_holder_ended_the_term_is_fenced_at_the_term_end() {
    let (fence, tenure) = Fence::new(DEADLINE);
    let (done, start, _) = thawed(&fence, &tenure, |fence| {
        assert!(!fence.end(), "the term had run out by itself");
    })
    .await;
    assert_eq!(done, Err(start + DEADLINE));
    // A term its holder ends early (the lease lost to another) ends then.
    fence.renewed(Instant::now());
    let term = tenure.pin();
    tokio::time::advance(Duration::from_secs(3)).await;
    let ended_at = Instant::now();
    fence.end();
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(term.lost().await, ended_at);
}

#[tokio::test]
async fn always_is_held_and_never_lost() {
    let tenure = Tenure::always();
    assert!(tenure.is_held() && tenure.pin().is_held());
    assert!(tenure.acquired().await);
    let lost = tokio::time::timeout(Duration::from_millis(50), tenure.lost()).await;
    assert!(lost.is_err());
}

/// The CI failure of stop 73: a reconcile in flight when its machine froze was found
/// fenced at the thaw, and said so with the thaw's wall time — 20 s after it could last
/// have acted — so it seemed to run beside the replica that took over. Its fence is timed
/// from its own term's last renewal, even once another term began.
#[tokio::test(start_paused = true)]
async fn a_fence_is_timed_from_its_own_terms_last_renewal() {
    let (fence, tenure) = Fence::new(DEADLINE);
    let renewal = Clocks::read();
    fence.renewed_at(Instant::now(), renewal);
    let term = tenure.pin();
    tokio::time::advance(Duration::from_secs(3)).await;
    fence.end();
    let ended = term.lost().await;
    assert_eq!(term.wall_at(ended), renewal.wall() + Duration::from_secs(3));
    // Much later (by this clock) a new term begins: the old one's fence stays where it was.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(fence.renewed_at(Instant::now(), Clocks::read()));
    assert_eq!(term.wall_at(ended), renewal.wall() + Duration::from_secs(3));
    assert_eq!(
        tenure.pin().wall_at(Instant::now() + Duration::from_secs(1)),
        tenure.pin().wall_at(Instant::now()) + Duration::from_secs(1),
    );
}

/// After a SIGSTOP the renew loop may run first and begin a new term before a reconcile
/// pinned to the old one looks: that reconcile is fenced at its own term's end, not at the
/// thaw.
#[tokio::test(start_paused = true)]
async fn work_thawed_after_a_new_term_began_is_fenced_at_its_own_terms_end() {
    let (fence, tenure) = Fence::new(DEADLINE);
    let (done, start, term) = thawed(&fence, &tenure, |fence| {
        assert!(
            fence.renewed(Instant::now()),
            "the renew loop began a new term first"
        );
    })
    .await;
    assert_eq!(done, Err(start + DEADLINE));
    assert_eq!(term.lost().await, start + DEADLINE);
}

/// A term its holder ended (the lease lost after a thaw) keeps that end for the work
/// pinned to it once the process holds a new term; it was lost with the new term's start,
/// and the work then looked fenced at whenever it looked.
#[tokio::test(start_paused = true)]
async fn a_term_its_holder_ended_keeps_its_end_once_the_next_begins() {
    let (fence, tenure) = Fence::new(DEADLINE);
    fence.renewed(Instant::now());
    let term = tenure.pin();
    tokio::time::advance(Duration::from_secs(3)).await;
    let ended_at = Instant::now();
    assert!(fence.end());
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(fence.renewed(Instant::now()), "a new term began");
    assert_eq!(term.lost().await, ended_at);
    assert_eq!(term.ends(), Some(ended_at));
}

/// What a finished reconcile reports as the latest it can have acted: its term's end as
/// it stands — moved by renewals, fixed once the term is over — and nothing once two terms
/// have begun since, or without an election.
#[tokio::test(start_paused = true)]
async fn a_terms_end_as_it_stands_bounds_the_work_in_it() {
    let (fence, tenure) = Fence::new(DEADLINE);
    let start = Instant::now();
    fence.renewed(start);
    let term = tenure.pin();
    assert_eq!(term.ends(), Some(start + DEADLINE));
    tokio::time::advance(Duration::from_secs(1)).await;
    fence.renewed(Instant::now());
    assert_eq!(term.ends(), Some(start + DEADLINE + Duration::from_secs(1)));
    tokio::time::advance(DEADLINE * 2).await;
    assert!(fence.renewed(Instant::now()), "the term ran out; a new one began");
    assert_eq!(term.ends(), Some(start + DEADLINE + Duration::from_secs(1)));
    tokio::time::advance(DEADLINE * 2).await;
    assert!(fence.renewed(Instant::now()), "and another");
    assert_eq!(term.ends(), None);
    assert_eq!(Tenure::always().pin().ends(), None);
}

/// Work pinned to a term that began now, frozen past the term's end (not polled) while
/// the renew loop wakes first and does `first`; what the work reports once thawed, when
/// its term began, and the term.
async fn thawed(
    fence: &Fence,
    tenure: &Tenure,
    first: impl FnOnce(&Fence),
) -> (Result<(), Instant>, Instant, Tenure) {
    let start = Instant::now();
    fence.renewed(start);
    let term = tenure.pin();
    let done = {
        let (thawed, thaw) = tokio::sync::oneshot::channel::<()>();
        let work = term.within(thaw);
        tokio::pin!(work);
        assert!(futures::poll!(&mut work).is_pending());
        tokio::time::advance(DEADLINE * 2).await;
        first(fence);
        thawed.send(()).expect("work waiting");
        work.await.map(|_| ())
    };
    (done, start, term)
}
