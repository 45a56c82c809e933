//! Tables that copies share: ordered maps and sets whose clone is one pointer. The
//! scheduler's, the fleet's and the ledger's large tables are these, so a copy of the
//! scheduler (the forecast's, taken under the endpoint's lock) costs a few dozen pointers
//! whatever the number of claims; a change copies only the tree nodes on its path, and only
//! while a copy still shares them.
//!
//! Built on `imbl`'s B+ trees (16 entries a node). The wrappers keep the standard library's
//! signatures (`insert` on a set answers whether it was new, as `BTreeSet::insert` does),
//! so a table changes type without its users changing meaning.

use std::borrow::Borrow;
use std::fmt;
use std::ops::{Index, IndexMut, RangeBounds};
use std::sync::Arc;

/// An ordered map whose clone shares every entry (`BTreeMap`'s methods, those used here).
#[derive(Clone, PartialEq, Eq)]
pub struct SharedMap<K: Clone + Ord, V: Clone>(imbl::OrdMap<K, V>);

impl<K: Clone + Ord, V: Clone> Default for SharedMap<K, V> {
    fn default() -> Self {
        SharedMap(imbl::OrdMap::new())
    }
}

impl<K: Clone + Ord + fmt::Debug, V: Clone + fmt::Debug> fmt::Debug for SharedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

impl<K: Clone + Ord, V: Clone> SharedMap<K, V> {
    /// An empty map.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.0.get(key)
    }

    /// The value at `key`, to change (the nodes on its path are copied first if shared).
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.0.get_mut(key)
    }

    /// Whether `key` has a value.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.0.contains_key(key)
    }

    /// Sets `key`'s value, answering the one it replaced.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.0.insert(key, value)
    }

    /// Takes `key` out, answering its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        self.0.remove(key)
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        self.0.iter()
    }

    /// Keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> {
        self.0.keys()
    }

    /// Values in key order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> {
        self.0.values()
    }

    /// Entries with keys in `range`, in key order.
    pub fn range<Q: Ord + ?Sized, R: RangeBounds<Q>>(
        &self,
        range: R,
    ) -> impl DoubleEndedIterator<Item = (&K, &V)>
    where
        K: Borrow<Q>,
    {
        self.0.range(range)
    }

    /// Takes every entry out, in key order.
    pub fn drain(&mut self) -> impl Iterator<Item = (K, V)> {
        std::mem::take(&mut self.0).into_iter()
    }
}

impl<K: Clone + Ord, V: Clone> FromIterator<(K, V)> for SharedMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        SharedMap(iter.into_iter().collect())
    }
}

/// The entries of a [`SharedSet`] in a range, in order (either way).
pub type SetRange<'a, T> = imbl::ordset::RangedIter<'a, T, imbl::shared_ptr::DefaultSharedPtr>;

/// An ordered set whose clone shares every entry (`BTreeSet`'s methods, those used here).
#[derive(Clone, PartialEq, Eq)]
pub struct SharedSet<T: Clone + Ord>(imbl::OrdSet<T>);

impl<T: Clone + Ord> Default for SharedSet<T> {
    fn default() -> Self {
        SharedSet(imbl::OrdSet::new())
    }
}

impl<T: Clone + Ord + fmt::Debug> fmt::Debug for SharedSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.iter()).finish()
    }
}

impl<T: Clone + Ord> SharedSet<T> {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `value` is in it.
    pub fn contains<Q: Ord + ?Sized>(&self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.0.contains(value)
    }

    /// Adds `value`, answering whether it was not there yet.
    pub fn insert(&mut self, value: T) -> bool {
        self.0.insert(value).is_none()
    }

    /// Takes `value` out, answering whether it was there.
    pub fn remove<Q: Ord + ?Sized>(&mut self, value: &Q) -> bool
    where
        T: Borrow<Q>,
    {
        self.0.remove(value).is_some()
    }

    /// The smallest entry.
    pub fn first(&self) -> Option<&T> {
        self.0.get_min()
    }

    /// Entries in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.0.iter()
    }

    /// Entries in `range`, in order.
    pub fn range<Q: Ord + ?Sized, R: RangeBounds<Q>>(&self, range: R) -> SetRange<'_, T>
    where
        T: Borrow<Q>,
    {
        self.0.range(range)
    }

    /// Takes every entry out.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

impl<T: Clone + Ord> FromIterator<T> for SharedSet<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        SharedSet(iter.into_iter().collect())
    }
}

/// Entries a [`SharedVec`] chunk holds.
const CHUNK: usize = 64;

/// A vector kept in chunks of 64 entries, each behind an `Arc`: its clone copies one
/// pointer per chunk, and a change copies the one chunk it touches while a copy shares it.
/// Indexing reads through two pointers instead of one.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedVec<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Default for SharedVec<T> {
    fn default() -> Self {
        SharedVec {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for SharedVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: Clone> SharedVec<T> {
    /// Adds `value` at the end.
    pub fn push(&mut self, value: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => Arc::make_mut(last).push(value),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(value);
                self.chunks.push(Arc::new(chunk));
            }
        }
        self.len += 1;
    }

    /// The entry at `i`, to change (its chunk is copied first if shared).
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let chunk = self.chunks.get_mut(i / CHUNK)?;
        Arc::make_mut(chunk).get_mut(i % CHUNK)
    }
}

impl<T> SharedVec<T> {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry at `i`.
    pub fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T> Index<usize> for SharedVec<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<T: Clone> IndexMut<usize> for SharedVec<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut Arc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK]
    }
}

impl<'a, T> IntoIterator for &'a SharedVec<T> {
    type Item = &'a T;
    type IntoIter = std::iter::FlatMap<
        std::slice::Iter<'a, Arc<Vec<T>>>,
        std::slice::Iter<'a, T>,
        fn(&'a Arc<Vec<T>>) -> std::slice::Iter<'a, T>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.chunks.iter().flat_map(chunk_iter as fn(_) -> _)
    }
}

/// A chunk's entries (a function, so that the iterator's type can be named).
fn chunk_iter<T>(chunk: &Arc<Vec<T>>) -> std::slice::Iter<'_, T> {
    chunk.iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_does_not_see_later_changes_on_either_side() {
        let mut a: SharedMap<u64, u64> = (0..1_000).map(|k| (k, k * 2)).collect();
        let mut b = a.clone();
        assert_eq!(a.insert(5, 0), Some(10));
        assert_eq!(b.remove(&6), Some(12));
        if let Some(v) = b.get_mut(&7) {
            *v = 1;
        }
        assert_eq!(a.get(&5), Some(&0));
        assert_eq!(b.get(&5), Some(&10));
        assert_eq!(a.get(&6), Some(&12));
        assert!(!b.contains_key(&6));
        assert_eq!(a.get(&7), Some(&14));
        assert_eq!(b.get(&7), Some(&1));
        assert_eq!((a.len(), b.len()), (1_000, 999));
    }

    #[test]
    fn sets_answer_as_the_standard_library_does() {
        let mut s = SharedSet::new();
        assert!(s.insert((3, 1)));
        assert!(!s.insert((3, 1)));
        assert!(s.insert((1, 9)));
        let copy = s.clone();
        assert!(s.remove(&(3, 1)));
        assert!(!s.remove(&(3, 1)));
        assert_eq!(s.first(), Some(&(1, 9)));
        assert_eq!(copy.range((2, 0)..).collect::<Vec<_>>(), vec![&(3, 1)]);
        assert_eq!(copy.len(), 2);
    }

    #[test]
    fn a_vector_clone_shares_chunks_until_one_changes() {
        let mut a = SharedVec::default();
        for i in 0..200_u32 {
            a.push(i);
        }
        let mut b = a.clone();
        b[70] = 0;
        if let Some(v) = a.get_mut(199) {
            *v = 1;
        }
        b.push(7);
        assert_eq!((a[70], b[70], a[199], b[199]), (70, 0, 1, 199));
        assert_eq!((a.len(), b.len(), b.get(200)), (200, 201, Some(&7)));
        assert_eq!(a.get(200), None);
        assert_eq!(a.iter().copied().sum::<u32>(), (0..199).sum::<u32>() + 1);
        assert!(
            Arc::ptr_eq(&a.chunks[0], &b.chunks[0]),
            "untouched chunks stay shared"
        );
        assert!(!a.is_empty() && SharedVec::<u8>::default().is_empty());
    }
}
