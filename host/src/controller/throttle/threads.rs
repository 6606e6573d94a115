//! Where a plugin's admitted calls run: on at most one blocking thread per core, each
//! taking the plugin's next waiting call as soon as it is done with one.
//!
//! A plugin's calls are bound by CPU, so more threads than cores run none of them
//! sooner, and a thread per call (tokio's blocking pool, 64 reconciles at once) is a
//! thread woken, switched to and away from per call. Limiting the calls alone (a
//! semaphore in front of the pool) gained nothing: each call still woke a thread. What
//! costs nothing is a thread that goes on to the next call without sleeping; on 2 cores
//! that took the null-server bench's host CPU per parent at 10 000 Echos from
//! 0.33-0.34 ms to 0.26-0.30 ms. The threads are the runtime's blocking ones, given back
//! once the plugin has nothing waiting, so an idle plugin holds none.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// One call waiting for a thread.
type Job = Box<dyn FnOnce() + Send>;

/// A plugin's threads and the calls waiting for them.
#[derive(Clone)]
pub struct Threads {
    inner: Arc<Mutex<Waiting>>,
    most: usize,
}

#[derive(Default)]
struct Waiting {
    jobs: VecDeque<Job>,
    /// Threads taking jobs now.
    running: usize,
}

/// A call that never returned: it panicked on its thread.
#[derive(Debug, thiserror::Error)]
#[error("the call panicked on its thread")]
pub struct Lost;

/// One thread per core the host may use.
pub fn per_core() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Threads {
    /// At most `most` (at least one) of the plugin's calls at once.
    pub fn new(most: usize) -> Threads {
        Threads {
            inner: Arc::default(),
            most: most.max(1),
        }
    }

    /// Run `work` on one of the plugin's threads, after the calls waiting before it. A
    /// caller gone before its turn leaves `work` undone (and dropped on that thread).
    pub async fn run<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T, Lost> {
        let (done, answer) = oneshot::channel();
        let job: Job = Box::new(move || {
            if !done.is_closed() {
                let _ = done.send(work());
            }
        });
        let start = {
            let mut waiting = self.waiting();
            waiting.jobs.push_back(job);
            let start = waiting.running < self.most;
            waiting.running += usize::from(start);
            start
        };
        if start {
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || take_jobs(&inner));
        }
        answer.await.map_err(|_| Lost)
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        lock(&self.inner)
    }
}

/// Run jobs until none waits, then give the thread back.
fn take_jobs(inner: &Mutex<Waiting>) {
    loop {
        let job = {
            let mut waiting = lock(inner);
            match waiting.jobs.pop_front() {
                Some(job) => job,
                None => {
                    waiting.running -= 1;
                    return;
                }
            }
        };
        // A panic loses its own call (its caller hears `Lost`), not the thread's turn.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
    }
}

fn lock(inner: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    inner.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Eight calls that each take a while run two at a time, every one answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_run_no_more_at_once_than_the_threads() {
        let threads = Threads::new(2);
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let calls = (0..8).map(|i| {
            let (now, most) = (now.clone(), most.clone());
            threads.run(move || {
                let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(at_once, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
                now.fetch_sub(1, Ordering::SeqCst);
                i
            })
        });
        let answers: Vec<_> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(Result::ok)
            .collect();
        assert_eq!(answers, (0..8).map(Some).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(lock(&threads.inner).running, 0, "the threads are given back");
    }

    /// A call that panics is lost to its caller alone; the next runs.
    #[tokio::test]
    async fn a_panicking_call_loses_only_itself() {
        let threads = Threads::new(1);
        let lost = threads.run(|| -> u8 { panic!("a bug") }).await;
        assert!(lost.is_err());
        assert_eq!(threads.run(|| 7).await.ok(), Some(7));
    }

    /// A caller gone before its turn: its call is never made.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_whose_caller_left_is_not_made() {
        let threads = Threads::new(1);
        let made = Arc::new(AtomicUsize::new(0));
        let queue = threads.clone();
        let first =
            tokio::spawn(async move { queue.run(|| std::thread::sleep(Duration::from_millis(100))).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let counted = made.clone();
        let second = threads.run(move || counted.fetch_add(1, Ordering::SeqCst));
        let mut second = Box::pin(second);
        // Queued behind the first, then given up.
        assert!(
            tokio::time::timeout(Duration::from_millis(10), &mut second)
                .await
                .is_err()
        );
        drop(second);
        first.await.ok();
        assert_eq!(threads.run(|| 0).await.ok(), Some(0));
        assert_eq!(made.load(Ordering::SeqCst), 0);
    }
}
