//! A node table's ids at one version, kept beside an edge type's persisted
//! adjacency: the ids in position order and the positions sorted by id. A
//! later process finds where a node was by a binary search in the mapping,
//! and which id a position held, without reading that version of the table
//! or hashing its ids; a traversal after a small write resolves the new
//! edges' ends this way. The arrays are checked the first time they are
//! used (only traversals after a write read them).

use std::cmp::Ordering;
use std::sync::{Arc, OnceLock};

use arrow_array::{Array, StringArray};
use xxhash_rust::xxh3::Xxh3;

use super::adjacency::Words;
use crate::util::idindex::IdIndex;

pub struct IdOrder {
    /// `n + 1` byte offsets into `bytes`.
    pub offsets: Words,
    /// The ids' UTF-8, back to back, padded to whole words.
    pub bytes: Words,
    /// Positions `0..n`, ascending by id.
    pub sorted: Words,
    /// The digest of the three arrays a file holds, not yet checked.
    pub unchecked: Option<u64>,
    sound: OnceLock<bool>,
}

impl IdOrder {
    pub fn new(offsets: Words, bytes: Words, sorted: Words, unchecked: Option<u64>) -> Self {
        Self {
            offsets,
            bytes,
            sorted,
            unchecked,
            sound: OnceLock::new(),
        }
    }

    /// The order of `ids` (a table's id column in scan order).
    pub fn build(ids: &StringArray) -> Self {
        let n = ids.len();
        let base = ids.value_offsets()[0];
        let offsets: Vec<u32> = ids
            .value_offsets()
            .iter()
            .map(|o| (o - base) as u32)
            .collect();
        let raw = &ids.values()[base as usize..ids.value_offsets()[n] as usize];
        let mut bytes = vec![0u32; raw.len().div_ceil(4)];
        for (w, chunk) in bytes.iter_mut().zip(raw.chunks(4)) {
            let mut b = [0u8; 4];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u32::from_le_bytes(b);
        }
        let mut sorted: Vec<u32> = (0..n as u32).collect();
        sorted.sort_unstable_by(|&a, &b| ids.value(a as usize).cmp(ids.value(b as usize)));
        Self::new(offsets.into(), bytes.into(), sorted.into(), None)
    }

    /// The arrays as a file holds them, in order.
    pub fn arrays(&self) -> [&Words; 3] {
        [&self.offsets, &self.bytes, &self.sorted]
    }

    /// The digest a file records of the arrays.
    pub fn digest(&self) -> u64 {
        let mut h = Xxh3::new();
        for a in self.arrays() {
            h.update(a.as_bytes());
        }
        h.digest()
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    pub fn bytes_held(&self) -> usize {
        self.arrays().iter().map(|a| a.len() * 4).sum()
    }

    /// The id bytes of position `p` (`p < len`, offsets checked sound).
    #[inline]
    fn at(&self, p: u32) -> &[u8] {
        let (a, b) = (self.offsets[p as usize], self.offsets[p as usize + 1]);
        &self.bytes.as_bytes()[a as usize..b as usize]
    }

    /// Can it be read? Built ones can; a file's are checked once against
    /// its digest and for the shape every lookup relies on (offsets
    /// ascending inside the bytes, positions in range), in sequential
    /// passes. That `sorted` is in id order is the writer's promise
    /// ([`IdOrder::build`]), sealed by the digest: checking it would cost a
    /// random read per id, more than the traversal after a small write
    /// that uses it.
    pub fn sound(&self) -> bool {
        *self.sound.get_or_init(|| {
            if self.unchecked.is_some_and(|d| d != self.digest()) {
                return false;
            }
            let n = self.sorted.len();
            let o = &self.offsets;
            o.len() == n + 1
                && o[0] == 0
                && o.windows(2).all(|w| w[0] <= w[1])
                && o[n] as usize <= self.bytes.len() * 4
                && self.sorted.iter().all(|&p| (p as usize) < n)
        })
    }

    /// The position of `id` ([`IdOrder::sound`] first).
    pub fn position(&self, id: &str) -> Option<u32> {
        self.search(id.as_bytes(), |p| Some(self.at(p)))
    }

    /// As [`IdOrder::position`], on arrays nobody checked: every read is
    /// bounds-checked, so a damaged file gives a wrong position or none,
    /// never a panic. Whoever uses the answer checks it.
    pub fn position_guarded(&self, id: &str) -> Option<u32> {
        let n = self.offsets.len().checked_sub(1)?;
        let bytes = self.bytes.as_bytes();
        self.search(id.as_bytes(), |p| {
            let p = p as usize;
            if p >= n {
                return None;
            }
            bytes.get(self.offsets[p] as usize..self.offsets[p + 1] as usize)
        })
    }

    /// The binary search over `sorted`, reading each position's id with
    /// `at` (`None`: stop, nothing found).
    fn search<'s>(&'s self, id: &[u8], at: impl Fn(u32) -> Option<&'s [u8]>) -> Option<u32> {
        let (mut lo, mut hi) = (0usize, self.sorted.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let p = self.sorted[mid];
            match at(p)?.cmp(id) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(p),
            }
        }
        None
    }

    /// The id at position `p`, if there is one.
    pub fn id(&self, p: u32) -> Option<&str> {
        ((p as usize) < self.len())
            .then(|| std::str::from_utf8(self.at(p)).ok())
            .flatten()
    }
}

/// A base's node ids, as this process built them (hashed) or as a file
/// holds them (ordered): a node's position at the base's version by id, and
/// the id at a position.
#[derive(Clone)]
pub enum NodeIds {
    Hashed(Arc<IdIndex>),
    Ordered(Arc<IdOrder>),
}

impl NodeIds {
    pub fn position(&self, id: &str) -> Option<u32> {
        match self {
            Self::Hashed(h) => h.get(id),
            Self::Ordered(o) => o.position(id),
        }
    }

    pub fn id(&self, p: u32) -> Option<&str> {
        match self {
            Self::Hashed(h) => ((p as usize) < h.len()).then(|| h.ids.value(p as usize)),
            Self::Ordered(o) => o.id(p),
        }
    }

    /// See [`IdOrder::sound`].
    pub fn sound(&self) -> bool {
        match self {
            Self::Hashed(_) => true,
            Self::Ordered(o) => o.sound(),
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            Self::Hashed(h) => h.bytes(),
            Self::Ordered(o) => o.bytes_held(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_id_and_no_other() {
        let ids: Vec<String> = (0..500)
            .map(|i| format!("n{}", (i * 7919) % 1000))
            .collect();
        let order = IdOrder::build(&StringArray::from(ids.clone()));
        assert!(order.sound());
        for (p, id) in ids.iter().enumerate() {
            assert_eq!(order.position(id), Some(p as u32), "{id}");
            assert_eq!(order.id(p as u32), Some(id.as_str()));
        }
        for absent in ["", "n", "n1000", "zz", "n00"] {
            assert_eq!(order.position(absent), None, "{absent}");
        }
        assert_eq!(order.id(500), None);
    }

    #[test]
    fn a_sliced_column_and_multibyte_ids() {
        let all = StringArray::from(vec!["skip", "β", "a", "ü-1", ""]);
        let order = IdOrder::build(&all.slice(1, 4));
        assert!(order.sound());
        assert_eq!(order.position("a"), Some(1));
        assert_eq!(order.position(""), Some(3));
        assert_eq!(order.position("skip"), None);
        assert_eq!(order.id(2), Some("ü-1"));
    }

    #[test]
    fn a_damaged_file_is_not_sound() {
        let built = IdOrder::build(&StringArray::from(vec!["b", "a", "c"]));
        let digest = built.digest();
        let copy = |w: &Words| Words::from(w.to_vec());
        let reread = |sorted: Vec<u32>, d| {
            IdOrder::new(
                copy(&built.offsets),
                copy(&built.bytes),
                sorted.into(),
                Some(d),
            )
        };
        assert!(reread(built.sorted.to_vec(), digest).sound());
        assert!(!reread(built.sorted.to_vec(), digest ^ 1).sound(), "digest");
        // A position out of range, with a digest that matches it.
        let wild = vec![built.sorted[0], built.sorted[1], 3];
        let d = IdOrder::new(
            copy(&built.offsets),
            copy(&built.bytes),
            wild.clone().into(),
            None,
        )
        .digest();
        assert!(!reread(wild, d).sound(), "shape");
    }
}
