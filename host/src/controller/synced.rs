//! Knowing when a plugin's caches are complete: every watch stream's first list is
//! counted, and reconciles wait until all are in.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tokio::sync::watch;

/// Counts the watch streams that have not finished their first list.
pub(super) struct SyncCount {
    remaining: AtomicUsize,
    done: watch::Sender<bool>,
}

impl SyncCount {
    /// A counter of `streams` first lists, and what turns true once all are done.
    pub(super) fn new(streams: usize) -> (Arc<Self>, watch::Receiver<bool>) {
        let (done, synced) = watch::channel(false);
        let count = SyncCount {
            remaining: AtomicUsize::new(streams),
            done,
        };
        (Arc::new(count), synced)
    }

    /// A callback for one stream's `InitDone`; only its first call counts (relists repeat it).
    pub(super) fn mark(self: &Arc<Self>) -> impl Fn() + Send + Sync + 'static {
        let (sync, seen) = (self.clone(), AtomicBool::new(false));
        move || {
            if !seen.swap(true, Ordering::SeqCst) && sync.remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
                let _ = sync.done.send(true);
            }
        }
    }
}

/// Fire `synced` once every watch has listed. kube-runtime's Store::wait_until_ready
/// wakes only its most recent waiter, and the controller waits on the parent store
/// itself: the first lists are counted from the streams instead.
pub(super) fn tell(mut listed: watch::Receiver<bool>, synced: tokio::sync::oneshot::Sender<()>) {
    tokio::spawn(async move {
        if listed.wait_for(|s| *s).await.is_ok() {
            let _ = synced.send(());
        }
    });
}
