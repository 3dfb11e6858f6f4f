//! A node table's persisted id order: the file `optimize` writes for each
//! node table with rows, holding the ids in position order and the
//! positions sorted by id ([`IdOrder`]) for exactly the rows of one table
//! version (its layout, deletions included). A new process finds a key's
//! row by a binary search in the mapped file and reads that one row,
//! instead of opening the id BTREE through a planned scan. It is used only
//! for the rows it was built from, and a lookup is checked, not trusted:
//! the row it finds must hold the id asked for (see `exec::point`).

use std::sync::Arc;

use super::adjacency::Words;
use super::codec::{Decoder, Encoder, framed, put_words, unframe};
use super::coverage::{self, Layout};
use super::id_order::IdOrder;
use crate::error::{OmniError, Result};

const MAGIC: &[u8; 4] = b"OID1";

/// A node table version's record of its id order file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdOrderRef {
    /// Relative to the graph's root.
    pub file: String,
    /// [`coverage::rows_digest`] of the rows it was built from.
    pub rows: String,
}

pub fn encode(order: &IdOrder, layout: &Layout) -> Vec<u8> {
    let mut e = Encoder::new(MAGIC);
    coverage::encode(layout, &mut e);
    for a in order.arrays() {
        e.u64(a.len() as u64);
    }
    e.u64(order.digest());
    let mut out = framed(&e.finish(), order.bytes_held());
    for a in order.arrays() {
        put_words(&mut out, a);
    }
    out
}

/// The id order in `map` (a whole file) and the layout it was built from.
/// Only the header is checked here (its digest, the arrays' lengths against
/// it and the rows); the arrays are read through
/// [`IdOrder::position_guarded`], whose answers the reader checks.
pub fn decode(map: Arc<memmap2::Mmap>, what: &str) -> Result<(IdOrder, Layout)> {
    let bad = |why: &str| OmniError::Storage(format!("id order {what} cannot be read: {why}"));
    if !cfg!(target_endian = "little") {
        return Err(bad("this machine is not little-endian"));
    }
    let (header, mut at) = unframe(&map).ok_or_else(|| bad("shorter than its header"))?;
    let mut d = Decoder::new(header, MAGIC, what)?;
    let layout = coverage::decode(&mut d)?;
    let lens = [d.u64()? as usize, d.u64()? as usize, d.u64()? as usize];
    let digest = d.u64()?;
    d.end()?;
    if at + lens.iter().sum::<usize>() * 4 != map.len() {
        return Err(bad("its arrays are not the length its header says"));
    }
    let mut mapped = |l: usize| {
        let w = Words::mapped(&map, at, l);
        at += l * 4;
        w.ok_or_else(|| bad("its arrays are misaligned"))
    };
    let order = IdOrder::new(
        mapped(lens[0])?,
        mapped(lens[1])?,
        mapped(lens[2])?,
        Some(digest),
    );
    if order.len() != coverage::rows(&layout) || order.offsets.len() != order.len() + 1 {
        return Err(bad("its ids do not fit its rows"));
    }
    Ok((order, layout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::adjacency_file::anonymous;
    use crate::index::coverage::FragmentRows;
    use arrow_array::StringArray;

    fn layout(rows: u32, deleted: Vec<u32>) -> Layout {
        vec![FragmentRows {
            id: 0,
            files: "a.lance".into(),
            physical: rows,
            deleted,
        }]
    }

    #[test]
    fn an_id_order_reads_back_and_finds_every_id() {
        let ids = StringArray::from(vec!["p3", "p10", "p1", "a-long-id-of-many-bytes", "p2"]);
        let l = layout(6, vec![2]);
        let bytes = encode(&IdOrder::build(&ids), &l);
        let (order, back) = decode(anonymous(&bytes).unwrap(), "t").unwrap();
        assert_eq!(back, l);
        assert!(order.sound());
        for (p, id) in ids.iter().enumerate() {
            assert_eq!(order.position_guarded(id.unwrap()), Some(p as u32));
        }
        for absent in ["", "p", "p4", "zzz"] {
            assert_eq!(order.position_guarded(absent), None, "{absent}");
        }
        assert_ne!(
            coverage::rows_digest(&l),
            coverage::rows_digest(&layout(6, vec![3])),
            "a deletion elsewhere moves positions"
        );
    }

    #[test]
    fn a_damaged_id_order_is_refused_or_answers_without_panicking() {
        let ids = StringArray::from((0..300).map(|i| format!("n{i}")).collect::<Vec<_>>());
        let bytes = encode(&IdOrder::build(&ids), &layout(300, vec![]));
        let cut = &bytes[..bytes.len() - 4];
        assert!(decode(anonymous(cut).unwrap(), "t").is_err());
        let mut header = bytes.clone();
        header[12] ^= 0xff;
        assert!(decode(anonymous(&header).unwrap(), "t").is_err());
        // Damage anywhere in the arrays: a lookup may answer wrongly (the
        // reader checks the row) but never panics, and the digest sees it.
        let body = bytes.len() - IdOrder::build(&ids).bytes_held();
        for at in (body..bytes.len()).step_by(7) {
            let mut b = bytes.clone();
            b[at] ^= 0xa5;
            let (order, _) = decode(anonymous(&b).unwrap(), "t").unwrap();
            for i in (0..300).step_by(37) {
                let _ = order.position_guarded(&format!("n{i}"));
            }
            assert!(!order.sound(), "damage at byte {at} went unseen");
        }
    }
}
