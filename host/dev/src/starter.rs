//! Starting a plane's processes one at a time, each waited for before the next, and
//! undoing all of it if the start fails half-way.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::components::{Layout, wait_until};
use crate::process::{self, Lifetime, Proc};

/// Kills what was started so far if boot fails or its future is dropped half-way, and
/// runs the undo steps registered meanwhile (a real node's teardown), last first.
#[derive(Default)]
pub(crate) struct Started {
    procs: Vec<Proc>,
    undo: Vec<Box<dyn FnOnce() + Send>>,
}

impl Started {
    /// Runs `f` if the start fails from here on.
    pub fn on_failure(&mut self, f: impl FnOnce() + Send + 'static) {
        self.undo.push(Box::new(f));
    }

    /// The start succeeded: nothing is to be undone any more.
    pub fn keep(&mut self) {
        self.undo.clear();
    }

    /// The processes, now owned by the caller (they are no longer killed on drop).
    pub fn take(&mut self) -> Vec<Proc> {
        std::mem::take(&mut self.procs)
    }

    pub fn last_mut(&mut self) -> Option<&mut Proc> {
        self.procs.last_mut()
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().rev() {
            p.kill(Duration::ZERO);
        }
        while let Some(undo) = self.undo.pop() {
            undo();
        }
    }
}

/// Starts components one at a time, each waited for before the next.
pub(crate) struct Starter<'a> {
    pub layout: &'a Layout<'a>,
    pub lifetime: Lifetime,
    pub timeout: Duration,
    pub started: Started,
}

impl Starter<'_> {
    /// Spawn `name` and wait until `ready` (described by `what`) holds.
    pub async fn start<F, Fut>(
        &mut self,
        name: &'static str,
        program: &Path,
        args: Vec<String>,
        what: &str,
        ready: F,
    ) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let log = self.layout.log(name);
        let proc = process::spawn(name, program, args, self.layout.dir, log, self.lifetime)?;
        self.started.procs.push(proc);
        let proc = self.started.procs.last_mut().expect("just pushed");
        wait_until(proc, self.timeout, what, ready).await
    }
}
