//! The supervisor as a task driven by commands: the host's main loop only sends (reload,
//! stop), the membership's assignments arrive on their own channel, and nothing the
//! supervisor awaits — a compile, discovery of new kinds, units finishing in-flight
//! reconciles — holds up a signal, fencing, or the next heartbeat. Stopping cancels every
//! unit at once, whatever the supervisor is in the middle of.

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{Configured, Supervisor};
use crate::shard::members::Assignment;
use crate::shard::{Filter, Range, ShardKey};

/// What a sharded supervisor is told to run and tells back.
pub struct Shards {
    /// The membership's assignments.
    pub target: watch::Receiver<Assignment>,
    /// The ranges any controller may be running on.
    pub running: watch::Sender<Vec<Range>>,
    /// What is hashed.
    pub key: ShardKey,
    /// Whether the API server filters watches.
    pub server_side: bool,
}

impl Shards {
    /// The filter of `ranges` on this host's key.
    pub fn filter(&self, ranges: Vec<Range>) -> Filter {
        Filter {
            key: self.key,
            ranges,
            server_side: self.server_side,
        }
    }
}

/// What the supervisor is told while it runs.
enum Command {
    /// Look at the plugin files.
    Reload,
    /// Run what the config file now names.
    Configure(Configured),
}

/// Tells a running supervisor what to do; cloned into the tasks that follow files.
#[derive(Clone)]
pub struct Commands(mpsc::Sender<Command>);

impl Commands {
    /// Look at the plugin files soon (a command already pending covers this one).
    pub fn reload(&self) {
        let _ = self.0.try_send(Command::Reload);
    }

    /// Run what the config file now names: waits for room, never dropped.
    pub async fn configure(&self, configured: Configured) {
        let _ = self.0.send(Command::Configure(configured)).await;
    }
}

/// A running supervisor.
pub struct Handle {
    commands: Commands,
    stopping: CancellationToken,
    task: JoinHandle<()>,
}

impl Handle {
    /// Look at the plugin files soon (a command already pending covers this one).
    pub fn reload(&self) {
        self.commands.reload();
    }

    /// What tells this supervisor what to do, for a task of its own.
    pub fn commands(&self) -> Commands {
        self.commands.clone()
    }

    /// Stop every unit (in-flight reconciles may finish within the grace period) and wait
    /// at most `grace` plus a second for the supervisor to end.
    pub async fn stop(mut self, grace: Duration) {
        self.stopping.cancel();
        if tokio::time::timeout(grace + Duration::from_secs(1), &mut self.task)
            .await
            .is_err()
        {
            tracing::warn!("the supervisor did not stop within the grace period; aborted");
            self.task.abort();
        }
    }
}

impl Supervisor {
    /// Run in a task of its own, on `shards`' assignments if sharded.
    pub fn into_task(self, shards: Option<Shards>) -> Handle {
        let (commands, received) = mpsc::channel(1);
        let stopping = self.stopping.clone();
        let task = tokio::spawn(self.serve(received, shards));
        Handle {
            commands: Commands(commands),
            stopping,
            task,
        }
    }

    async fn serve(mut self, mut commands: mpsc::Receiver<Command>, mut shards: Option<Shards>) {
        let stopping = self.stopping.clone();
        let mut beat = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                biased;
                () = stopping.cancelled() => break,
                _ = beat.tick() => self.health.beat_supervisor(),
                Some(assignment) = assigned(shards.as_mut()) => {
                    let Some(s) = shards.as_ref() else { continue };
                    // `held` must name a range before any controller starts on it
                    // (`shard/members.rs`), also when the group moves on while the old
                    // units stop: until they have, what runs is the old and the new.
                    s.running.send_modify(|running| {
                        *running = crate::shard::range::normalize(&[running.as_slice(), &assignment.ranges].concat());
                    });
                    self.reshard(s.filter(assignment.ranges.clone()), assignment.tenure).await;
                    let _ = s.running.send(assignment.ranges);
                }
                Some(command) = commands.recv() => match command {
                    Command::Reload => self.reload().await,
                    Command::Configure(configured) => self.configure(configured).await,
                },
            }
        }
        self.stop().await;
        if let Some(s) = shards {
            let _ = s.running.send(Vec::new());
        }
    }
}

/// The next assignment; pending forever without sharding.
async fn assigned(shards: Option<&mut Shards>) -> Option<Assignment> {
    let Some(shards) = shards else {
        return std::future::pending().await;
    };
    shards.target.changed().await.ok()?;
    Some(shards.target.borrow_and_update().clone())
}
