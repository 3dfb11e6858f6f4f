//! The file format of a persisted index: a magic naming the kind, a format
//! version, little-endian fields (ascending lists as varint deltas, small
//! counts as varints), and a 64-bit XXH3 of everything before it, so a torn
//! or foreign file is refused with a typed error instead of being searched.

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{OmniError, Result};

/// Bumped whenever an index's encoding changes; older files are refused
/// (and rebuilt by the next optimize).
pub const FORMAT_VERSION: u32 = 2;

const DIGEST_LEN: usize = 8;

pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    pub fn new(magic: &[u8; 4]) -> Self {
        let mut e = Self { buf: Vec::new() };
        e.buf.extend_from_slice(magic);
        e.u32(FORMAT_VERSION);
        e
    }

    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.buf.extend_from_slice(s.as_bytes());
    }

    pub fn u32s(&mut self, v: &[u32]) {
        self.words(v.len(), v.iter().map(|x| x.to_le_bytes()));
    }

    pub fn f32s(&mut self, v: &[f32]) {
        self.words(v.len(), v.iter().map(|x| x.to_le_bytes()));
    }

    /// A list of `n` four-byte values.
    fn words(&mut self, n: usize, v: impl Iterator<Item = [u8; 4]>) {
        self.u64(n as u64);
        self.buf.reserve(n * 4);
        for x in v {
            self.buf.extend_from_slice(&x);
        }
    }

    fn varint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// Small numbers, one to five bytes each.
    pub fn varints(&mut self, v: &[u32]) {
        self.u64(v.len() as u64);
        for &x in v {
            self.varint(x);
        }
    }

    /// An ascending list, as the gaps between its values.
    pub fn ascending(&mut self, v: &[u32]) {
        debug_assert!(v.is_sorted());
        self.u64(v.len() as u64);
        let mut prev = 0;
        for &x in v {
            self.varint(x - prev);
            prev = x;
        }
    }

    pub fn finish(mut self) -> Vec<u8> {
        let digest = xxh3_64(&self.buf);
        self.buf.extend_from_slice(&digest.to_le_bytes());
        self.buf
    }
}

/// A file of mapped arrays: its header's length (8 bytes), the header (an
/// [`Encoder`]'s bytes), zeros to a multiple of 8 bytes, then the arrays'
/// words, which [`put_words`] appends. So each array maps aligned.
pub fn framed(header: &[u8], body_len: usize) -> Vec<u8> {
    let start = (8 + header.len()).div_ceil(8) * 8;
    let mut out = Vec::with_capacity(start + body_len);
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header);
    out.resize(start, 0);
    out
}

/// Words as a file holds them, little-endian.
pub fn put_words(out: &mut Vec<u8>, words: &[u32]) {
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// The header of a [`framed`] file and where its arrays start; `None` when
/// the file is shorter than its header says.
pub fn unframe(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let len = u64::from_le_bytes(bytes.get(..8)?.try_into().expect("8")) as usize;
    let header = bytes.get(8..8usize.checked_add(len)?)?;
    Some((header, (8 + len).div_ceil(8) * 8))
}

pub struct Decoder<'a> {
    buf: &'a [u8],
    at: usize,
    what: &'a str,
}

impl<'a> Decoder<'a> {
    /// Check the digest, the magic and the format version; `what` names the
    /// file in errors.
    pub fn new(bytes: &'a [u8], magic: &[u8; 4], what: &'a str) -> Result<Self> {
        if bytes.len() < 8 + DIGEST_LEN {
            return Err(corrupt(what, "shorter than its header"));
        }
        let (body, digest) = bytes.split_at(bytes.len() - DIGEST_LEN);
        if xxh3_64(body).to_le_bytes() != digest {
            return Err(corrupt(what, "its checksum does not match"));
        }
        let mut d = Self {
            buf: body,
            at: 0,
            what,
        };
        if d.take(4)? != magic {
            return Err(corrupt(what, "it is not an index of this kind"));
        }
        let version = d.u32()?;
        if version != FORMAT_VERSION {
            return Err(corrupt(
                what,
                &format!("format {version}, this build reads {FORMAT_VERSION}"),
            ));
        }
        Ok(d)
    }

    /// Carry on reading a file already checked by [`Self::new`] at `at`.
    pub fn resume(bytes: &'a [u8], at: usize, what: &'a str) -> Self {
        Self {
            buf: &bytes[..bytes.len().saturating_sub(DIGEST_LEN)],
            at,
            what,
        }
    }

    pub fn position(&self) -> usize {
        self.at
    }

    /// Step over a list of varints (or an ascending list); its length.
    pub fn skip_varints(&mut self) -> Result<usize> {
        let n = self.count(1)?;
        let mut left = n;
        while left > 0 {
            let b = *self
                .buf
                .get(self.at)
                .ok_or_else(|| corrupt(self.what, "it ends early"))?;
            self.at += 1;
            left -= usize::from(b & 0x80 == 0);
        }
        Ok(n)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| corrupt(self.what, "it ends early"))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    pub fn str(&mut self) -> Result<&'a str> {
        let n = self.u32()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| corrupt(self.what, "a name is not UTF-8"))
    }

    /// A count of items of at least `width` bytes each.
    fn count(&mut self, width: usize) -> Result<usize> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|n| n.saturating_mul(width) <= self.buf.len() - self.at)
            .ok_or_else(|| corrupt(self.what, "a length runs past its end"))
    }

    fn varint(&mut self) -> Result<u32> {
        // Most numbers here are below 128: one byte.
        if let Some(&b) = self.buf.get(self.at)
            && b < 0x80
        {
            self.at += 1;
            return Ok(u32::from(b));
        }
        let mut v = 0u32;
        for shift in (0..35).step_by(7) {
            let b = *self
                .buf
                .get(self.at)
                .ok_or_else(|| corrupt(self.what, "it ends early"))?;
            self.at += 1;
            v |= u32::from(b & 0x7f)
                .checked_shl(shift)
                .filter(|_| shift < 28 || b & 0x7f < 16)
                .ok_or_else(|| corrupt(self.what, "a number is too large"))?;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(corrupt(self.what, "a number is too long"))
    }

    pub fn varints(&mut self) -> Result<Vec<u32>> {
        let n = self.count(1)?;
        (0..n).map(|_| self.varint()).collect()
    }

    pub fn ascending(&mut self) -> Result<Vec<u32>> {
        let n = self.count(1)?;
        let mut prev = 0u32;
        (0..n)
            .map(|_| {
                prev = prev
                    .checked_add(self.varint()?)
                    .ok_or_else(|| corrupt(self.what, "a list overflows"))?;
                Ok(prev)
            })
            .collect()
    }

    pub fn u32s(&mut self) -> Result<Vec<u32>> {
        self.words(u32::from_le_bytes)
    }

    pub fn f32s(&mut self) -> Result<Vec<f32>> {
        self.words(f32::from_le_bytes)
    }

    /// A list of four-byte values.
    fn words<T>(&mut self, from: fn([u8; 4]) -> T) -> Result<Vec<T>> {
        let n = self.count(4)?;
        Ok(self
            .take(n * 4)?
            .chunks_exact(4)
            .map(|c| from(c.try_into().expect("4")))
            .collect())
    }

    /// The file must end here.
    pub fn end(self) -> Result<()> {
        if self.at != self.buf.len() {
            return Err(corrupt(self.what, "bytes follow its end"));
        }
        Ok(())
    }
}

fn corrupt(what: &str, why: &str) -> OmniError {
    OmniError::Storage(format!("index file {what} cannot be read: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let mut e = Encoder::new(b"TEST");
        e.u32(7);
        e.str("body");
        e.u32s(&[1, 2, 3]);
        e.f32s(&[0.5]);
        e.varints(&[0, 127, 128, u32::MAX]);
        e.ascending(&[3, 3, 200, 70_000, u32::MAX]);
        let bytes = e.finish();
        let mut d = Decoder::new(&bytes, b"TEST", "t").unwrap();
        assert_eq!(d.u32().unwrap(), 7);
        assert_eq!(d.str().unwrap(), "body");
        assert_eq!(d.u32s().unwrap(), [1, 2, 3]);
        assert_eq!(d.f32s().unwrap(), [0.5]);
        assert_eq!(d.varints().unwrap(), [0, 127, 128, u32::MAX]);
        assert_eq!(d.ascending().unwrap(), [3, 3, 200, 70_000, u32::MAX]);
        d.end().unwrap();

        let mut flipped = bytes.clone();
        flipped[9] ^= 1;
        let err = Decoder::new(&flipped, b"TEST", "t").err().unwrap();
        assert!(err.to_string().contains("checksum"), "{err}");
        let err = Decoder::new(&bytes, b"ELSE", "t").err().unwrap();
        assert!(
            err.to_string().contains("not an index of this kind"),
            "{err}"
        );
        let err = Decoder::new(&bytes[..10], b"TEST", "t").err().unwrap();
        assert!(err.to_string().contains("shorter"), "{err}");
    }
}
