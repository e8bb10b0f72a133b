//! A small ordered set kept as a sorted vector.
//!
//! A pass builds its capacity indexes once, from lists it makes in order,
//! and changes a few entries per job it places: a sorted vector costs one
//! allocation where a B-tree set costs a node per few entries, to build and
//! to drop, every pass.

/// Distinct values in ascending order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SortedSet<T>(Vec<T>);

impl<T> Default for SortedSet<T> {
    fn default() -> SortedSet<T> {
        SortedSet(Vec::new())
    }
}

impl<T: Ord> SortedSet<T> {
    /// The set of `values`, which must be ascending and distinct.
    pub(crate) fn from_sorted(values: Vec<T>) -> SortedSet<T> {
        debug_assert!(values.windows(2).all(|w| w[0] < w[1]), "not ascending and distinct");
        SortedSet(values)
    }

    pub(crate) fn insert(&mut self, value: T) {
        if let Err(at) = self.0.binary_search(&value) {
            self.0.insert(at, value);
        }
    }

    pub(crate) fn remove(&mut self, value: &T) {
        if let Ok(at) = self.0.binary_search(value) {
            self.0.remove(at);
        }
    }

    /// The values from `from` on, ascending.
    pub(crate) fn range_from(&self, from: &T) -> &[T] {
        &self.0[self.0.partition_point(|v| v < from)..]
    }
}

impl<T> std::ops::Deref for SortedSet<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<'a, T> IntoIterator for &'a SortedSet<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Inserts and removes agree with a B-tree set's, and so do ranges.
    #[test]
    fn behaves_as_a_btree_set() {
        let mut s = SortedSet::from_sorted(vec![(1u32, 4u32), (2, 0), (2, 7)]);
        let mut b: BTreeSet<(u32, u32)> = s.iter().copied().collect();
        let ops = [(true, (2, 3)), (true, (2, 3)), (false, (1, 4)), (false, (9, 9)), (true, (0, 1)), (true, (5, 2))];
        for (insert, v) in ops {
            if insert {
                s.insert(v);
                b.insert(v);
            } else {
                s.remove(&v);
                b.remove(&v);
            }
            assert_eq!(s.to_vec(), b.iter().copied().collect::<Vec<_>>());
            for from in [(0, 0), (2, 0), (2, 4), (6, 0)] {
                assert_eq!(s.range_from(&from).to_vec(), b.range(from..).copied().collect::<Vec<_>>());
            }
        }
        assert_eq!(s.last(), b.last());
    }
}
