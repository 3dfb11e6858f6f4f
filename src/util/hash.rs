//! A fast non-cryptographic hasher for in-memory id sets (the multiply-rotate
//! scheme of rustc's FxHash). Ids in a graph are not attacker-chosen keys of a
//! long-lived table, and the loader checks tens of millions of them.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;

#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(K);
    }

    /// The hash of bytes that fit in one word, given as that word (the
    /// bytes little-endian, zero above them): what `write` then `finish`
    /// give for 1 to 8 bytes, without copying them.
    #[inline]
    pub fn of_word(word: u64) -> u64 {
        let mut h = Self::default();
        h.add(word);
        h.finish()
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    /// The multiply leaves the low bits weak (they depend only on the low
    /// bits of the input); tables index by low bits, so mix the high bits
    /// down (MurmurHash3's finaliser).
    #[inline]
    fn finish(&self) -> u64 {
        let mut h = self.hash;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// The first `bytes` bytes of the SHA-256 of `data`, in hex: a short,
/// stable name for content (a schema, a set of fragments).
pub fn sha256_hex(data: &[u8], bytes: usize) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(data)
        .iter()
        .take(bytes)
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxHashSet<T> = HashSet<T, FxBuild>;
pub type FxHashMap<K, V> = HashMap<K, V, FxBuild>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_bits_spread_for_similar_keys() {
        // Keys like "p0".."p9999" must not pile into few low-bit buckets.
        let mut buckets = [0u32; 256];
        for i in 0..10_000 {
            let mut h = FxHasher::default();
            h.write(format!("p{i}").as_bytes());
            buckets[(h.finish() & 255) as usize] += 1;
        }
        let max = *buckets.iter().max().unwrap();
        assert!(
            max < 80,
            "a bucket got {max} of 10000 keys (expected about 39)"
        );
    }

    #[test]
    fn distinct_strings_hash_apart() {
        let mut s = FxHashSet::default();
        for i in 0..10_000 {
            assert!(s.insert(format!("p{i}")));
        }
        assert!(s.contains("p9999"));
        assert!(!s.contains("p10000"));
    }
}
