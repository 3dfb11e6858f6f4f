//! ULIDs for commit and operation ids: 48 bits of milliseconds since the Unix
//! epoch and 80 random bits, in Crockford base32 (26 characters), so ids sort
//! by creation time.

use rand::Rng;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Milliseconds since the Unix epoch, now (0 on a clock set before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub fn new_ulid() -> String {
    let ms = now_ms() as u128 & ((1u128 << 48) - 1);
    let random: u128 = rand::rng().random::<u128>() & ((1u128 << 80) - 1);
    encode((ms << 80) | random)
}

/// Consecutive ULIDs from one random start: cheap ids for bulk rows.
pub struct Monotonic {
    next: u128,
}

impl Default for Monotonic {
    fn default() -> Self {
        Self::new()
    }
}

impl Monotonic {
    pub fn new() -> Self {
        Self {
            next: decode(&new_ulid()),
        }
    }

    /// The next id, spelt on the stack (bulk loads make millions).
    pub fn next_id(&mut self) -> Spelt {
        self.next = self.next.wrapping_add(1);
        Spelt(spell(self.next))
    }
}

/// A ULID's 26 characters, without a heap allocation.
pub struct Spelt([u8; 26]);

impl std::ops::Deref for Spelt {
    type Target = str;
    fn deref(&self) -> &str {
        std::str::from_utf8(&self.0).expect("the alphabet is ascii")
    }
}

fn decode(s: &str) -> u128 {
    s.bytes().fold(0u128, |acc, b| {
        let v = ALPHABET.iter().position(|a| *a == b).unwrap_or(0) as u128;
        (acc << 5) | v
    })
}

/// When a ULID was made (milliseconds since the Unix epoch), or `None` for
/// anything that is not one.
pub fn millis(ulid: &str) -> Option<u64> {
    let valid = ulid.len() == 26 && ulid.bytes().all(|b| ALPHABET.contains(&b));
    // 26 characters hold 130 bits: the top one must leave room for 128.
    (valid && ulid.as_bytes()[0] <= b'7').then(|| (decode(ulid) >> 80) as u64)
}

fn spell(mut v: u128) -> [u8; 26] {
    let mut out = [0u8; 26];
    for slot in out.iter_mut().rev() {
        *slot = ALPHABET[(v & 31) as usize];
        v >>= 5;
    }
    out
}

fn encode(v: u128) -> String {
    String::from_utf8(spell(v).to_vec()).expect("ascii")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ulid_tells_when_it_was_made() {
        let before = now_ms();
        let made = millis(&new_ulid()).expect("a fresh ulid reads back");
        assert!(
            (before..before + 60_000).contains(&made),
            "{made} vs {before}"
        );
        assert_eq!(millis("00000000010000000000000000"), Some(1 << 0));
        assert_eq!(millis("0000000001000000000000000"), None, "25 characters");
        assert_eq!(
            millis("0000000001000000000000000U"),
            None,
            "not in the alphabet"
        );
        assert_eq!(millis("80000000000000000000000000"), None, "past 128 bits");
    }

    #[test]
    fn ulids_are_26_crockford_chars_and_distinct() {
        let a = new_ulid();
        let b = new_ulid();
        assert_eq!(a.len(), 26);
        assert!(a.bytes().all(|c| ALPHABET.contains(&c)));
        assert_ne!(a, b);
        assert_eq!(encode(0), "00000000000000000000000000");
        assert_eq!(encode(u128::MAX), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
        assert_eq!(decode("00000000000000000000000001"), 1);
        assert_eq!(decode("0000000000000000000000000Z"), 31);
        assert_eq!(decode("00000000000000000000000010"), 32);
        assert_eq!(encode(decode(&a)), a);
        let mut m = Monotonic::new();
        let (x, y) = (m.next_id().to_string(), m.next_id().to_string());
        assert!(x < y && x.len() == 26);
    }
}
