//! What a pass derives from the snapshot and leaves for the next pass (the
//! victim pool, `victim_pool.rs`; the free-capacity indexes,
//! `capacity/base.rs`), and the change logs that tell the next pass what no
//! longer holds.

use std::any::Any;
use std::sync::{Mutex, PoisonError};

/// A slot a pass leaves a derived value in. Its type is erased so that the
/// snapshot's modules need not know the pass's types. A lock, since a
/// snapshot may be read by several threads, held only to take or put; a
/// copy of the snapshot starts empty.
#[derive(Default)]
pub(crate) struct Kept(Mutex<Option<Box<dyn Any + Send>>>);

impl Clone for Kept {
    fn clone(&self) -> Kept {
        Kept::default()
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kept")
    }
}

impl Kept {
    /// Keeps `value`; it replaces what was kept.
    pub(crate) fn put<T: Any + Send>(&self, value: T) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(value));
    }

    /// Takes what was kept, if it is a `T`.
    pub(crate) fn take<T: Any>(&self) -> Option<T> {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        kept?.downcast::<T>().ok().map(|v| *v)
    }
}

/// What changed, in order. It keeps its newest part; whoever followed it to
/// an older point than that starts over.
#[derive(Clone, Debug)]
pub(crate) struct ChangeLog<T> {
    changes: Vec<T>,
    /// How many were dropped from the front.
    start: u64,
}

impl<T> Default for ChangeLog<T> {
    fn default() -> ChangeLog<T> {
        ChangeLog { changes: Vec::new(), start: 0 }
    }
}

impl<T> ChangeLog<T> {
    /// Records a change. Once the log is longer than twice `keep` plus
    /// 1,024, its older half is dropped.
    pub(crate) fn push(&mut self, change: T, keep: usize) {
        self.changes.push(change);
        if self.changes.len() > 2 * keep + 1024 {
            let drop = self.changes.len() / 2;
            self.changes.drain(..drop);
            self.start += drop as u64;
        }
    }

    /// The end of the log: what a follower has seen once it has read it all.
    pub(crate) fn end(&self) -> u64 {
        self.start + self.changes.len() as u64
    }

    /// The changes since the log stood at `seen` (an [`ChangeLog::end`]);
    /// `None` when that part was dropped (or `seen` is not of this log).
    pub(crate) fn since(&self, seen: u64) -> Option<&[T]> {
        let from = usize::try_from(seen.checked_sub(self.start)?).ok()?;
        self.changes.get(from..)
    }

    /// How many changes it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.changes.len()
    }
}
