//! Which plugin version a reconcile runs, as a number. Hot reload and new settings send a
//! new `Arc` down the controller's channel; what the controller remembers per parent (its
//! quiet answer, its related queries) names the version it came from. An address would
//! not do: after v1 → v2 → v3, v3 may be allocated where v1 was, and the memory of v1
//! would pass for v3's. The number only grows, and the version it was given for is kept
//! alive here until the next one replaces it, so two live versions never share one.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::engine::Reconcile;

/// A plugin version and its number.
#[derive(Clone)]
pub(super) struct Current {
    pub plugin: Arc<dyn Reconcile>,
    pub number: u64,
}

/// A candidate version for the parents a label selector picks (a canary); the rest keep
/// the stable version the channel delivers.
#[derive(Clone)]
pub struct Canary {
    /// The candidate, loaded with the stable version's name and settings.
    pub plugin: Arc<dyn Reconcile>,
    /// Which parents it reconciles.
    pub selector: kube::core::Selector,
}

impl std::fmt::Debug for Canary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canary")
            .field("version", &self.plugin.metadata().version)
            .field("selector", &self.selector.to_string())
            .finish()
    }
}

/// The first number a canary's candidate runs as: above any count of stable versions.
const CANARY: u64 = 1 << 63;

/// Numbers the versions a controller's channel delivers, in the order they are seen.
pub(super) struct Versions {
    channel: watch::Receiver<Arc<dyn Reconcile>>,
    last: Mutex<Current>,
    /// The canary the supervisor sends (reloaded, or dropped when kinds change).
    canary: watch::Receiver<Option<Canary>>,
    /// The last canary seen and its number, counted up from [`CANARY`].
    last_canary: Mutex<Option<Current>>,
}

impl Versions {
    /// Start numbering at the channel's current version.
    pub fn new(
        channel: watch::Receiver<Arc<dyn Reconcile>>,
        canary: watch::Receiver<Option<Canary>>,
    ) -> Versions {
        let plugin = channel.borrow().clone();
        Versions {
            channel,
            last: Mutex::new(Current { plugin, number: 0 }),
            canary,
            last_canary: Mutex::new(None),
        }
    }

    /// The version a reconcile of a parent with `labels` uses: the canary's candidate
    /// where its selector matches, else the current stable one.
    pub fn for_parent(&self, labels: &super::compact::Pairs) -> Current {
        use kube::core::SelectorExt;
        let candidate = match &*self.canary.borrow() {
            // kube's selector reads a map: built only while a canary runs.
            Some(c) if c.selector.matches(&labels.to_map()) => c.plugin.clone(),
            _ => return self.current(),
        };
        let mut last = self.last_canary.lock().unwrap_or_else(|e| e.into_inner());
        let number = match &*last {
            Some(seen) if Arc::ptr_eq(&seen.plugin, &candidate) => return seen.clone(),
            Some(seen) => seen.number + 1,
            None => CANARY,
        };
        last.insert(Current {
            plugin: candidate,
            number,
        })
        .clone()
    }

    /// The version new reconciles use.
    pub fn current(&self) -> Current {
        let plugin = self.channel.borrow().clone();
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if !Arc::ptr_eq(&last.plugin, &plugin) {
            *last = Current {
                plugin,
                number: last.number + 1,
            };
        }
        last.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{DispatchError, Metadata, Request, Response};

    struct Fake(Metadata);

    impl Reconcile for Fake {
        fn metadata(&self) -> &Metadata {
            &self.0
        }
        fn reconcile(&self, _: &Request) -> Result<Response, DispatchError> {
            Ok(Response::default())
        }
    }

    fn version() -> Arc<dyn Reconcile> {
        let kind = crate::engine::Kind {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
            namespaced: true,
        };
        Arc::new(Fake(Metadata {
            name: "p".into(),
            version: "1".into(),
            parent: kind,
            children: vec![],
            related: vec![],
            settings_schema: None,
            finalizer: None,
        }))
    }

    #[test]
    fn a_version_at_a_reused_address_still_gets_a_new_number() {
        let (tx, rx) = watch::channel(version());
        let versions = Versions::new(rx, watch::channel(None).1);
        assert_eq!(versions.current().number, 0);
        assert_eq!(versions.current().number, 0, "the same version, the same number");
        let mut numbers = vec![];
        // Reloads that free each version as the next arrives: whatever addresses the
        // allocator hands out again, every version is new.
        for _ in 0..50 {
            tx.send_replace(version());
            numbers.push(versions.current().number);
        }
        assert_eq!(numbers, (1..=50).collect::<Vec<u64>>());
    }

    #[test]
    fn a_canary_takes_the_parents_its_selector_picks_under_a_number_of_its_own() {
        let (_tx, rx) = watch::channel(version());
        let candidate = version();
        let selector = kube::core::Selector::from_iter([("canary", "true")]);
        let canary = Canary {
            plugin: candidate.clone(),
            selector,
        };
        let (_canary, canaries) = watch::channel(Some(canary));
        let versions = Versions::new(rx, canaries);
        let labels = |v: &str| super::super::compact::Pairs::from_entries(vec![("canary", v)]);
        let picked = versions.for_parent(&labels("true"));
        assert!(Arc::ptr_eq(&picked.plugin, &candidate));
        assert_eq!(picked.number, CANARY);
        let stable = versions.for_parent(&labels("false"));
        assert!(!Arc::ptr_eq(&stable.plugin, &candidate));
        assert_eq!(stable.number, 0);
        assert_eq!(versions.for_parent(&Default::default()).number, 0);
    }

    #[test]
    fn a_canary_sent_anew_gets_a_new_number_and_one_dropped_leaves_every_parent_to_the_stable() {
        let (_tx, rx) = watch::channel(version());
        let selector = kube::core::Selector::from_iter([("canary", "true")]);
        let canary = |plugin: Arc<dyn Reconcile>| Canary {
            plugin,
            selector: selector.clone(),
        };
        let first = version();
        let (canaries, seen) = watch::channel(Some(canary(first.clone())));
        let versions = Versions::new(rx, seen);
        let picked = super::super::compact::Pairs::from_entries(vec![("canary", "true")]);
        assert_eq!(versions.for_parent(&picked).number, CANARY);
        // A rebuilt canary: what was remembered of the first must not pass for it.
        let second = version();
        canaries.send_replace(Some(canary(second.clone())));
        let now = versions.for_parent(&picked);
        assert!(Arc::ptr_eq(&now.plugin, &second));
        assert_eq!(now.number, CANARY + 1);
        // Dropped (the stable version's kinds changed): the stable one takes the parent.
        canaries.send_replace(None);
        let stable = versions.for_parent(&picked);
        assert_eq!(stable.number, 0);
        assert!(!Arc::ptr_eq(&stable.plugin, &second));
    }
}
