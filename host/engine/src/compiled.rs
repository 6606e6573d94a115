//! Compiled code shared by every plugin loaded from the same bytes: a second copy of a
//! file (the same plugin under another name or settings, or a reload to identical bytes)
//! costs no new code mapping nor linking, only what its own state needs. Entries live as
//! long as a plugin holds them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use sha2::{Digest, Sha256};

use super::versions::Pre;

/// Linked plugins by the SHA-256 of their bytes.
#[derive(Default)]
pub(crate) struct Compiled {
    by_digest: Mutex<HashMap<[u8; 32], Weak<Pre>>>,
}

impl Compiled {
    /// The linked plugin for `bytes`: one a live plugin already holds, or `link`'s.
    pub fn get_or_link<E>(&self, bytes: &[u8], link: impl FnOnce() -> Result<Pre, E>) -> Result<Arc<Pre>, E> {
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(pre) = self.lock().get(&digest).and_then(Weak::upgrade) {
            return Ok(pre);
        }
        // Linked outside the lock: a compile can take seconds; two racing loads of one
        // file both link, and the later one's entry stands.
        let pre = Arc::new(link()?);
        let mut map = self.lock();
        map.retain(|_, held| held.strong_count() > 0);
        map.insert(digest, Arc::downgrade(&pre));
        Ok(pre)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Weak<Pre>>> {
        self.by_digest.lock().unwrap_or_else(|e| e.into_inner())
    }
}
