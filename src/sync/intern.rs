//! Interned names: one `&'static str` per distinct string, for values copied into every
//! record (a consumer record's topic name), where an `Arc<str>` would cost two atomic
//! read-modify-writes per record (the clone and the drop).
//!
//! Each distinct name is leaked once, so memory is bounded by the number of distinct names
//! the process ever uses (a topic recreated under the same name reuses its entry). The lock
//! is std's, also under loom: it guards a cache, is never held across another
//! synchronisation, and orders nothing a model checks.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The interned copy of `name`.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        // A panic while holding the lock cannot leave the set half-updated (one insert).
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(interned) = names.get(name) {
        return interned;
    }
    let interned: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(interned);
    interned
}

#[cfg(all(test, not(logbus_loom)))]
mod tests {
    use super::intern;

    #[test]
    fn equal_names_share_one_copy() {
        let a = intern("orders");
        let b = intern(&String::from("orders"));
        assert!(std::ptr::eq(a, b));
        assert_eq!(intern("other"), "other");
    }
}
