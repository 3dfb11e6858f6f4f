//! A dense id index: the ids of one node table in scan order (a node's
//! dense number is its position) and an open-addressing hash table from id
//! to position. The loader checks every edge endpoint against one and the
//! graph index resolves every edge through one, so at 10 M edges lookups
//! are the cost: each slot carries 32 bits of the hash (a probe rarely
//! touches a wrong id's bytes), and [`IdIndex::lookup_all`] walks its input
//! in groups, prefetching each group's slots, offsets and id bytes one stage
//! ahead, so the cache misses of a group overlap instead of queueing.

use std::hash::Hasher;

use arrow_array::{Array, StringArray};

use super::hash::FxHasher;

/// The value of a slot nobody holds, and of a lookup that found nothing.
pub const ABSENT: u32 = u32::MAX;
const EMPTY_SLOT: u64 = u64::MAX;
/// How many lookups are in flight at once.
const GROUP: usize = 32;

#[inline]
fn hash(s: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(s.as_bytes());
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

pub struct IdIndex {
    pub ids: StringArray,
    /// `tag << 32 | position`, where the tag is the hash's high half.
    slots: Vec<u64>,
    mask: usize,
}

impl IdIndex {
    /// Index `ids`; a repeated id resolves to its first position.
    pub fn new(ids: StringArray) -> Self {
        assert!(ids.len() < ABSENT as usize, "an id index holds < 2^32 ids");
        let cap = (ids.len() * 2).next_power_of_two().max(16);
        let mut slots = vec![EMPTY_SLOT; cap];
        let mask = cap - 1;
        for i in 0..ids.len() {
            let h = hash(ids.value(i));
            let mut s = h as usize & mask;
            while slots[s] != EMPTY_SLOT {
                s = (s + 1) & mask;
            }
            slots[s] = (h >> 32) << 32 | i as u64;
        }
        Self { ids, slots, mask }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    #[inline]
    fn find(&self, id: &str, h: u64) -> Option<u32> {
        let tag = h >> 32;
        let mut s = h as usize & self.mask;
        loop {
            let v = self.slots[s];
            if v == EMPTY_SLOT {
                return None;
            }
            let at = v as u32;
            if v >> 32 == tag && self.ids.value(at as usize) == id {
                return Some(at);
            }
            s = (s + 1) & self.mask;
        }
    }

    pub fn get(&self, id: &str) -> Option<u32> {
        self.find(id, hash(id))
    }

    /// The position of every value of `values` (null or unknown: [`ABSENT`]),
    /// appended to `out`.
    pub fn lookup_all(&self, values: &StringArray, out: &mut Vec<u32>) {
        let offsets = self.ids.value_offsets();
        let bytes = self.ids.values().as_ptr();
        let mut hashes = [0u64; GROUP];
        let mut start = 0;
        while start < values.len() {
            let end = (start + GROUP).min(values.len());
            for (k, i) in (start..end).enumerate() {
                let h = hash(values.value(i));
                hashes[k] = h;
                prefetch(&self.slots[h as usize & self.mask]);
            }
            // The first slot of each probe is (nearly) in cache: fetch the
            // offsets of the id it names, then that id's bytes.
            for h in &hashes[..end - start] {
                let v = self.slots[*h as usize & self.mask];
                if v != EMPTY_SLOT && v >> 32 == h >> 32 {
                    prefetch(&offsets[v as u32 as usize]);
                }
            }
            for h in &hashes[..end - start] {
                let v = self.slots[*h as usize & self.mask];
                if v != EMPTY_SLOT && v >> 32 == h >> 32 {
                    let o = offsets[v as u32 as usize];
                    prefetch(bytes.wrapping_add(o as usize));
                }
            }
            for (k, i) in (start..end).enumerate() {
                out.push(if values.is_null(i) {
                    ABSENT
                } else {
                    self.find(values.value(i), hashes[k]).unwrap_or(ABSENT)
                });
            }
            start = end;
        }
    }

    pub fn bytes(&self) -> usize {
        self.ids.get_array_memory_size() + self.slots.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_repeated_id_resolves_to_its_first_position() {
        let index = IdIndex::new(StringArray::from(vec!["a", "b", "a"]));
        assert_eq!(index.get("a"), Some(0));
        assert_eq!(index.len(), 3);
    }
}
