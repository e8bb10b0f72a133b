//! Interning: equal values (queue names, job shapes) share one small id,
//! counted by reference so that ids of values no longer used are reused.

use std::collections::HashMap;

/// Reference-counted interning: equal values share one small id.
#[derive(Clone, Debug)]
pub(crate) struct Interner<T> {
    ids: HashMap<T, u32>,
    list: Vec<Option<T>>,
    refs: Vec<u32>,
    free: Vec<u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner { ids: HashMap::new(), list: Vec::new(), refs: Vec::new(), free: Vec::new() }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Interner<T> {
    /// How many holders an id has.
    pub(crate) fn refs(&self, id: u32) -> u32 {
        self.refs.get(id as usize).copied().unwrap_or(0)
    }

    pub(crate) fn acquire(&mut self, value: T) -> u32 {
        if let Some(&id) = self.ids.get(&value) {
            self.refs[id as usize] += 1;
            return id;
        }
        let id = match self.free.pop() {
            Some(id) => {
                self.list[id as usize] = Some(value.clone());
                self.refs[id as usize] = 1;
                id
            }
            None => {
                self.list.push(Some(value.clone()));
                self.refs.push(1);
                (self.list.len() - 1) as u32
            }
        };
        self.ids.insert(value, id);
        id
    }

    /// Drops one reference; returns the value when it was the last.
    pub(crate) fn release(&mut self, id: u32) -> Option<T> {
        let i = id as usize;
        let r = self.refs.get_mut(i)?;
        *r = r.saturating_sub(1);
        if *r > 0 {
            return None;
        }
        let value = self.list[i].take()?;
        self.ids.remove(&value);
        self.free.push(id);
        Some(value)
    }

    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        self.list.get(id as usize).and_then(Option::as_ref)
    }

    /// The id of a value in use.
    pub(crate) fn id_of<Q: ?Sized + Eq + std::hash::Hash>(&self, value: &Q) -> Option<u32>
    where
        T: std::borrow::Borrow<Q>,
    {
        self.ids.get(value).copied()
    }

    /// One past the largest id in use.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }
}
