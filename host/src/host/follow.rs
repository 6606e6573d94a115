//! The config file followed with hot reload: when its text changes it is read again, its
//! references pulled where they changed, and the supervisor told the entries it now
//! names — new ones start, removed ones stop, and an entry whose rules changed (settings,
//! limits, grants, mode, canary, signature policy) is admitted again under them. A config
//! that does not read, or names what the host cannot run under its flags, is said in one
//! line and changes nothing.

use std::path::PathBuf;
use std::time::Duration;

use super::plugins;
use super::references::{self, References};
use crate::config;
use crate::controller::Options;
use crate::supervisor::{Commands, Configured};

/// A config file, as last applied.
pub(crate) struct Followed {
    path: PathBuf,
    text: String,
    defaults: Options,
    pull_dir: Option<PathBuf>,
    references: Option<References>,
}

impl Followed {
    /// Follow `path` from its text now (which the host started from).
    pub fn new(
        path: PathBuf,
        defaults: Options,
        pull_dir: Option<PathBuf>,
        references: Option<References>,
    ) -> Self {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        Followed {
            path,
            text,
            defaults,
            pull_dir,
            references,
        }
    }

    /// The config's entries when its text changed since the last look and it reads.
    async fn changed(&mut self) -> Option<Configured> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        if text == self.text {
            return None;
        }
        self.text = text;
        match self.read().await {
            Ok(configured) => Some(configured),
            Err(e) => {
                tracing::warn!(config = %self.path.display(), error = %format!("{e:#}"), "config not applied; plugins keep running as they are");
                None
            }
        }
    }

    async fn read(&mut self) -> anyhow::Result<Configured> {
        let mut config = config::load(&self.path)?;
        let pulled = plugins::pulled(&config);
        let pull_dir = self.pull_dir.as_deref();
        let failed = references::repull(&mut self.references, &mut config, pull_dir).await?;
        let policy = config.verify.is_some();
        let entries = plugins::rules(config, &pulled, &self.defaults)?;
        Ok(Configured {
            entries,
            failed,
            policy,
        })
    }
}

/// Look at the config every `every` and tell the supervisor what it names when it
/// changed (it looks at the plugin files then, and sees links a pull flipped).
pub(crate) async fn follow(mut followed: Followed, every: Duration, supervisor: Commands) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Some(configured) = followed.changed().await {
            tracing::info!(config = %followed.path.display(), entries = configured.entries.len(), "config changed; applying it");
            supervisor.configure(configured).await;
        }
    }
}
