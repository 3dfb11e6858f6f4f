//! A dense id index: the ids of one node table in scan order (a node's
//! dense number is its position) and an open-addressing hash table from id
//! to position. The loader checks every edge endpoint against one and the
//! graph index resolves every edge through one, so at 10 M edges lookups
//! are the cost: each slot carries 32 bits of the hash (a probe rarely
//! touches a wrong id's bytes) and the id itself when it is short, else
//! where its bytes are, and [`IdIndex::lookup_all`] walks its input in
//! groups, prefetching each group's slots and then the bytes of its long
//! ids a stage ahead, so the cache misses of a group overlap instead of
//! queueing. A short id's hash and slot key come from one load of its
//! bytes: at these sizes the lookups are bound by the work per id, not
//! by the misses.

use std::hash::Hasher;

use arrow_array::cast::AsArray;
use arrow_array::{Array, StringArray};

use super::hash::FxHasher;
use crate::error::Result;

/// The value of a lookup that found nothing.
pub const ABSENT: u32 = u32::MAX;
const EMPTY_TAG: u64 = u64::MAX;
/// Lookups per pipeline stage; three stages are in flight at once.
const GROUP: usize = 16;

#[inline]
fn hash_bytes(s: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(s);
    h.finish()
}

#[inline]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults or reads into Rust's view
    // of memory, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ids of at most this many bytes live in their slot, so a probe for one
/// touches the slot alone.
const INLINE_MAX: usize = 7;
/// The bit of [`Slot::key`] that marks an id kept in the slot.
const INLINE: u64 = 1 << 63;

/// One slot names an id's position and the id (or where its bytes are), so
/// checking a candidate touches the slot and at most the bytes.
#[derive(Clone, Copy)]
struct Slot {
    /// `tag << 32 | position`, where the tag is the hash's high half.
    tag_pos: u64,
    /// A short id: [`INLINE`], its length in bits 56..59 and its bytes in
    /// the low seven bytes. A long one: `len << 32 | offset` (an Arrow
    /// string array's bytes stay under 2 GiB, so bit 63 is clear).
    key: u64,
}

const EMPTY: Slot = Slot {
    tag_pos: EMPTY_TAG,
    key: 0,
};

/// What a short id's slot holds as its key.
#[inline]
fn inline_key(id: &[u8]) -> Option<u64> {
    (id.len() <= INLINE_MAX).then(|| {
        let mut b = [0u8; 8];
        b[..id.len()].copy_from_slice(id);
        u64::from_le_bytes(b) | (id.len() as u64) << 56 | INLINE
    })
}

/// The hash and (when short) the inline key of the id at `start..start +
/// len` of `bytes` (a string array's bytes). A short id whose eight bytes
/// from its start lie inside `bytes` is read with one load, masked: the
/// copies of a few bytes each that `hash` and `inline_key` make cost more
/// than a probe of a table in cache.
#[inline]
fn hash_key(bytes: &[u8], start: usize, len: usize) -> (u64, Option<u64>) {
    if (1..=INLINE_MAX).contains(&len)
        && let Some(w) = bytes.get(start..start + 8)
    {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes")) & (u64::MAX >> (64 - 8 * len));
        return (FxHasher::of_word(w), Some(w | (len as u64) << 56 | INLINE));
    }
    let id = &bytes[start..start + len];
    (hash_bytes(id), inline_key(id))
}

/// The hash and inline key of value `i` of `a`.
#[inline]
fn hash_key_at(a: &StringArray, i: usize) -> (u64, Option<u64>) {
    let offsets = a.value_offsets();
    let start = offsets[i] as usize;
    hash_key(a.values(), start, offsets[i + 1] as usize - start)
}

/// Does the slot hold `id` (whose inline key, if short, is `short`)?
#[inline]
fn holds(slot: Slot, bytes: &[u8], id: &[u8], short: Option<u64>) -> bool {
    match short {
        Some(k) => slot.key == k,
        None => {
            let (offset, len) = (slot.key as u32 as usize, (slot.key >> 32) as usize);
            slot.key & INLINE == 0 && len == id.len() && &bytes[offset..][..len] == id
        }
    }
}

pub struct IdIndex {
    pub ids: StringArray,
    slots: Vec<Slot>,
    mask: usize,
}

impl IdIndex {
    /// Index `ids`; a repeated id resolves to its first position.
    pub fn new(ids: StringArray) -> Self {
        match Self::index(ids, false) {
            Ok(index) => index,
            Err(_) => unreachable!("only a unique index refuses repeats"),
        }
    }

    /// Index `ids`, each of which must be unique: else the positions of
    /// the first id repeated (its first and its second occurrence), found
    /// by the same pass that builds the index.
    pub fn unique(ids: StringArray) -> std::result::Result<Self, (u32, u32)> {
        Self::index(ids, true)
    }

    fn index(ids: StringArray, unique: bool) -> std::result::Result<Self, (u32, u32)> {
        assert!(ids.len() < ABSENT as usize, "an id index holds < 2^32 ids");
        assert!(
            ids.values().len() <= u32::MAX as usize,
            "an id index holds < 4 GiB of ids"
        );
        let cap = (ids.len() * 2).next_power_of_two().max(16);
        let mut slots = vec![EMPTY; cap];
        let mask = cap - 1;
        let offsets = ids.value_offsets();
        let bytes = ids.values().as_slice();
        // The slot of the id GROUP places ahead is fetched while this one
        // is placed: at a million ids the table is out of cache.
        let n = ids.len();
        let mut ahead = [(0u64, None); GROUP];
        for (i, a) in ahead.iter_mut().enumerate().take(n) {
            *a = hash_key_at(&ids, i);
            prefetch(&slots[a.0 as usize & mask]);
        }
        for i in 0..n {
            let id = ids.value(i);
            let (h, short) = ahead[i % GROUP];
            if i + GROUP < n {
                let next = hash_key_at(&ids, i + GROUP);
                ahead[i % GROUP] = next;
                prefetch(&slots[next.0 as usize & mask]);
            }
            let mut s = h as usize & mask;
            while slots[s].tag_pos != EMPTY_TAG {
                let slot = slots[s];
                if unique
                    && slot.tag_pos >> 32 == h >> 32
                    && holds(slot, bytes, id.as_bytes(), short)
                {
                    return Err((slot.tag_pos as u32, i as u32));
                }
                s = (s + 1) & mask;
            }
            let long = || ((offsets[i + 1] - offsets[i]) as u64) << 32 | offsets[i] as u64;
            slots[s] = Slot {
                tag_pos: (h >> 32) << 32 | i as u64,
                key: short.unwrap_or_else(long),
            };
        }
        Ok(Self { ids, slots, mask })
    }

    /// Index the ids of several arrays, numbered in order across them (a
    /// table's id column as its scan or a parse returns it, batch by batch).
    pub fn from_parts(parts: &[StringArray]) -> Result<Self> {
        Ok(Self::new(Self::concat(parts)?))
    }

    /// The ids of several arrays as one, in order.
    pub fn concat(parts: &[StringArray]) -> Result<StringArray> {
        Ok(match parts {
            [] => StringArray::from(Vec::<&str>::new()),
            [one] => one.clone(),
            many => {
                let refs: Vec<&dyn Array> = many.iter().map(|a| a as &dyn Array).collect();
                arrow::compute::concat(&refs)?.as_string::<i32>().clone()
            }
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    #[inline]
    fn find(&self, id: &[u8], (h, short): (u64, Option<u64>)) -> Option<u32> {
        let tag = h >> 32;
        let bytes = self.ids.values().as_slice();
        let mut s = h as usize & self.mask;
        loop {
            let slot = self.slots[s];
            if slot.tag_pos == EMPTY_TAG {
                return None;
            }
            if slot.tag_pos >> 32 == tag && holds(slot, bytes, id, short) {
                return Some(slot.tag_pos as u32);
            }
            s = (s + 1) & self.mask;
        }
    }

    pub fn get(&self, id: &str) -> Option<u32> {
        let id = id.as_bytes();
        self.find(id, hash_key(id, 0, id.len()))
    }

    /// The position of every value of `values` (null or unknown: [`ABSENT`]),
    /// appended to `out`. A software pipeline over groups of lookups: while
    /// one group is checked, the next one's long ids' bytes and the one
    /// after's slots are being fetched.
    pub fn lookup_all(&self, values: &StringArray, out: &mut Vec<u32>) {
        let bytes = self.ids.values().as_ptr();
        let n = values.len();
        let groups = n.div_ceil(GROUP);
        let mut keys = [[(0u64, None); GROUP]; 3];
        let range = |g: usize| g * GROUP..((g + 1) * GROUP).min(n);
        out.reserve(n);
        for step in 0..groups + 2 {
            if step < groups {
                let ring = &mut keys[step % 3];
                for (k, i) in range(step).enumerate() {
                    ring[k] = hash_key_at(values, i);
                    prefetch(&self.slots[ring[k].0 as usize & self.mask]);
                }
            }
            if (1..=groups).contains(&step) {
                let g = step - 1;
                // A short id is checked in its slot alone.
                for (h, _) in keys[g % 3][..range(g).len()]
                    .iter()
                    .filter(|k| k.1.is_none())
                {
                    let slot = self.slots[*h as usize & self.mask];
                    if slot.tag_pos != EMPTY_TAG
                        && slot.tag_pos >> 32 == h >> 32
                        && slot.key & INLINE == 0
                    {
                        prefetch(bytes.wrapping_add(slot.key as u32 as usize));
                    }
                }
            }
            if step >= 2 {
                let g = step - 2;
                for (k, i) in range(g).enumerate() {
                    out.push(if values.is_null(i) {
                        ABSENT
                    } else {
                        let id = values.value(i).as_bytes();
                        self.find(id, keys[g % 3][k]).unwrap_or(ABSENT)
                    });
                }
            }
        }
    }

    pub fn bytes(&self) -> usize {
        self.ids.get_array_memory_size() + self.slots.len() * std::mem::size_of::<Slot>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unique_index_names_the_first_repeat() {
        let ids = StringArray::from(vec!["a", "b", "c", "b", "a", "c"]);
        assert_eq!(IdIndex::unique(ids.clone()).err(), Some((1, 3)));
        let index = IdIndex::new(ids);
        assert_eq!((index.get("a"), index.get("c")), (Some(0), Some(2)));
        let fine = IdIndex::unique(StringArray::from(vec!["a", "ab", "b"])).unwrap();
        assert_eq!(fine.get("ab"), Some(1));
    }

    #[test]
    fn single_and_batched_lookups_agree() {
        let ids: Vec<String> = (0..5000).map(|i| format!("n{i}")).collect();
        let index = IdIndex::new(StringArray::from(ids.clone()));
        assert_eq!(index.get("n4999"), Some(4999));
        assert_eq!(index.get("n5000"), None);
        let mut probe: Vec<Option<String>> = (0..7000).map(|i| Some(format!("n{i}"))).collect();
        probe[3] = None;
        let values = StringArray::from(probe.clone());
        let mut out = Vec::new();
        index.lookup_all(&values, &mut out);
        for (i, p) in probe.iter().enumerate() {
            let want = p.as_deref().and_then(|s| index.get(s)).unwrap_or(ABSENT);
            assert_eq!(out[i], want, "value {i}");
        }
        assert_eq!(out[3], ABSENT);
        assert_eq!(out[6999], ABSENT);
        assert_eq!(out[10], 10);
    }

    /// Ids kept in their slots and ids kept as offsets never match each
    /// other: a short id that is a prefix of a long one, ids that differ
    /// in length only by NUL bytes, and ids of exactly the inline length.
    #[test]
    fn short_and_long_ids_are_told_apart() {
        let ids = [
            "",
            "\0",
            "\0\0",
            "a",
            "a\0",
            "abcdefg",
            "abcdefgh",
            "abcdefg\0",
            "p1234567",
            "p123456",
        ];
        let index = IdIndex::unique(StringArray::from(ids.to_vec()))
            .ok()
            .unwrap();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(index.get(id), Some(i as u32), "{id:?}");
        }
        for absent in ["b", "abcdef", "abcdefgi", "p12345", "\0\0\0", "p1234568"] {
            assert_eq!(index.get(absent), None, "{absent:?}");
        }
        let values = StringArray::from(vec!["abcdefgh", "abcdefg", "zz", "\0"]);
        let mut out = Vec::new();
        index.lookup_all(&values, &mut out);
        assert_eq!(out, [6, 5, ABSENT, 1]);
        let repeats = StringArray::from(vec!["abcdefgh", "x", "abcdefgh"]);
        assert_eq!(IdIndex::unique(repeats).err(), Some((0, 2)));
    }

    /// The one-load hash and key of an id are those of its bytes, wherever
    /// it lies in its array (its last bytes near the end of the buffer are
    /// read byte by byte).
    #[test]
    fn an_id_read_in_one_load_hashes_as_its_bytes() {
        let words = [
            "", "a", "p1", "p99999", "p999999", "p9999999", "é", "ab\u{0}c", "x",
        ];
        let ids = StringArray::from(words.to_vec());
        for (i, w) in words.iter().enumerate() {
            let want = (hash_bytes(w.as_bytes()), inline_key(w.as_bytes()));
            assert_eq!(hash_key_at(&ids, i), want, "{w:?}");
        }
        // Every id of an index of them is found, by one lookup or many.
        let index = IdIndex::unique(ids.clone()).unwrap();
        let mut at = Vec::new();
        index.lookup_all(&ids, &mut at);
        assert_eq!(at, (0..words.len() as u32).collect::<Vec<_>>());
        for (i, w) in words.iter().enumerate() {
            assert_eq!(index.get(w), Some(i as u32), "{w:?}");
        }
    }

    #[test]
    fn a_repeated_id_resolves_to_its_first_position() {
        let index = IdIndex::new(StringArray::from(vec!["a", "b", "a"]));
        assert_eq!(index.get("a"), Some(0));
        assert_eq!(index.len(), 3);
    }
}
