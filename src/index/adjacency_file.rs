//! The persisted form of an edge type's adjacency, opened without parsing:
//! an 8-byte header length, a header (the three table versions it was built
//! from and their row layouts, the counts, the arrays' lengths and their
//! XXH3; checked like any index file), then the six `u32` arrays raw and
//! little-endian at 8-byte alignment, so a mapping of the file is the index:
//! first the endpoint tables' ids at those versions ([`IdOrder`]: one when
//! both ends are one table), then the adjacency's six. Each array has its
//! own XXH3. On open the header, the offsets and the targets are verified
//! (a file whose bytes or shape are wrong is refused); the edge rows, which
//! only edge bindings and merges read, are verified the first time one is
//! needed ([`GraphIndex::edge_rows_sound`]), the ids likewise
//! ([`IdOrder::sound`]).

use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use super::adjacency::{Adjacency, GraphIndex, Words};
use super::codec::{Decoder, Encoder, framed, put_words, unframe};
use super::coverage::{self, Layout};
use super::id_order::IdOrder;
use crate::error::{OmniError, Result};

const MAGIC: &[u8; 4] = b"OAD2";

/// What an adjacency was built from: the edge table and its two endpoint
/// tables (in that order), each as storage names its version (a JSON
/// `TableRef`), with the rows of that version ([`Layout`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Basis {
    pub tables: [String; 3],
    pub layouts: [Layout; 3],
}

/// An edge table version's record of its persisted graph index (in the
/// table's metadata, so forks and later versions find it): the file, and a
/// name for the rows it was built from ([`digest`]). Later versions reuse
/// it for the rows they still share with it (see `index::adjacency`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphIndexRef {
    /// Relative to the graph's root.
    pub file: String,
    pub basis: String,
}

/// A name for the rows of a basis: every row of its three layouts,
/// deletions included. Versions that change no row (an index build, a
/// record) keep the name, so an optimize after one builds nothing again.
pub fn digest(basis: &Basis) -> String {
    let mut e = Encoder::new(MAGIC);
    for l in &basis.layouts {
        coverage::encode(l, &mut e);
    }
    crate::util::hash::sha256_hex(&e.finish(), 16)
}

fn arrays(g: &GraphIndex) -> [&[u32]; 6] {
    [
        &g.out.offsets,
        &g.out.targets,
        &g.out.edges,
        &g.inn.offsets,
        &g.inn.targets,
        &g.inn.edges,
    ]
}

/// How many id orders a file of a basis' `tables` holds: one per endpoint
/// table.
fn orders(tables: &[String; 3]) -> usize {
    if tables[1] == tables[2] { 1 } else { 2 }
}

/// `ids`: the source table's ids, then the destination's when it is
/// another table (see [`orders`]).
pub fn encode(g: &GraphIndex, basis: &Basis, ids: &[&IdOrder]) -> Vec<u8> {
    assert_eq!(
        ids.len(),
        orders(&basis.tables),
        "one id order per endpoint table"
    );
    let id_arrays: Vec<&Words> = ids.iter().flat_map(|o| o.arrays()).collect();
    let body_len = g.bytes() + ids.iter().map(|o| o.bytes_held()).sum::<usize>();
    let mut body = Vec::with_capacity(body_len);
    for a in id_arrays {
        put_words(&mut body, a);
    }
    let mut digests = Vec::new();
    for a in arrays(g) {
        let start = body.len();
        put_words(&mut body, a);
        digests.push(xxh3_64(&body[start..]));
    }
    let mut e = Encoder::new(MAGIC);
    for (t, l) in basis.tables.iter().zip(&basis.layouts) {
        e.str(t);
        coverage::encode(l, &mut e);
    }
    e.u64(g.skipped as u64);
    e.u64(g.edges as u64);
    for (a, d) in arrays(g).iter().zip(&digests) {
        e.u64(a.len() as u64);
        e.u64(*d);
    }
    for o in ids {
        for a in o.arrays() {
            e.u64(a.len() as u64);
        }
        e.u64(o.digest());
    }
    let mut out = framed(&e.finish(), body.len());
    out.extend_from_slice(&body);
    out
}

/// What a file holds: the adjacency, what it was built from, and the ids
/// of its source and destination tables (one shared when they are one).
pub struct Persisted {
    pub graph: GraphIndex,
    pub basis: Basis,
    pub ids: [Arc<IdOrder>; 2],
}

/// The adjacency in `map` (a whole file), and what it was built from.
/// `what` names the file in errors.
pub fn decode(map: Arc<memmap2::Mmap>, what: &str) -> Result<Persisted> {
    let bad = |why: &str| OmniError::Storage(format!("graph index {what} cannot be read: {why}"));
    if !cfg!(target_endian = "little") {
        return Err(bad("this machine is not little-endian"));
    }
    let (header, start) = unframe(&map).ok_or_else(|| bad("shorter than its header"))?;
    let mut d = Decoder::new(header, MAGIC, what)?;
    let mut tables: [String; 3] = Default::default();
    let mut layouts: [Layout; 3] = Default::default();
    for i in 0..3 {
        tables[i] = d.str()?.to_string();
        layouts[i] = coverage::decode(&mut d)?;
    }
    let skipped = d.u64()? as usize;
    let edges = d.u64()? as usize;
    let mut lens = [0usize; 6];
    let mut digests = [0u64; 6];
    for (l, h) in lens.iter_mut().zip(&mut digests) {
        *l = d.u64()? as usize;
        *h = d.u64()?;
    }
    let mut id_lens = Vec::new();
    for _ in 0..orders(&tables) {
        id_lens.push((
            [d.u64()? as usize, d.u64()? as usize, d.u64()? as usize],
            d.u64()?,
        ));
    }
    d.end()?;
    let body = map
        .get(start..)
        .ok_or_else(|| bad("its arrays are missing"))?;
    let id_words: usize = id_lens.iter().flat_map(|(l, _)| l).sum();
    if (lens.iter().sum::<usize>() + id_words) * 4 != body.len() {
        return Err(bad("its arrays are not the length its header says"));
    }
    let mut at = start;
    let mut mapped = |l: usize| {
        let w = Words::mapped(&map, at, l);
        at += l * 4;
        w.ok_or_else(|| bad("its arrays are misaligned"))
    };
    let mut ids = Vec::new();
    for (k, ([o, b, s], digest)) in id_lens.into_iter().enumerate() {
        let order = IdOrder::new(mapped(o)?, mapped(b)?, mapped(s)?, Some(digest));
        if order.len() != coverage::rows(&layouts[1 + k]) {
            return Err(bad("its ids do not fit its tables"));
        }
        ids.push(Arc::new(order));
    }
    let mut words = lens.map(|l| mapped(l).ok());
    for i in [0, 1, 3, 4] {
        let w = words[i]
            .as_ref()
            .ok_or_else(|| bad("its arrays are misaligned"))?;
        if xxh3_64(w.as_bytes()) != digests[i] {
            return Err(bad("its checksum does not match"));
        }
    }
    let mut take = |i: usize| {
        words[i]
            .take()
            .ok_or_else(|| bad("its arrays are misaligned"))
    };
    let side = |offsets: Words, targets: Words, edges_w: Words, nodes: usize| {
        let ok = offsets.len() == nodes + 2
            && offsets[0] == 0
            && offsets.windows(2).all(|w| w[0] <= w[1])
            && offsets[nodes + 1] as usize == edges
            && targets.len() == edges
            && edges_w.len() == edges;
        ok.then_some(Adjacency {
            offsets,
            targets,
            edges: edges_w,
        })
        .ok_or_else(|| bad("its arrays do not fit its tables"))
    };
    let rows = |l: &Layout| coverage::rows(l);
    let out = side(take(0)?, take(1)?, take(2)?, rows(&layouts[1]))?;
    let inn = side(take(3)?, take(4)?, take(5)?, rows(&layouts[2]))?;
    if edges != rows(&layouts[0]) {
        return Err(bad("its edge count is not its edge table's"));
    }
    let mut graph = GraphIndex::new(out, inn, skipped, edges);
    graph.unchecked = Some([digests[2], digests[5]]);
    let to = ids.last().expect("one id order at least").clone();
    Ok(Persisted {
        graph,
        basis: Basis { tables, layouts },
        ids: [ids[0].clone(), to],
    })
}

/// Bytes as a read-only mapping (a file read from object storage).
pub fn anonymous(bytes: &[u8]) -> Result<Arc<memmap2::Mmap>> {
    let mut m = memmap2::MmapMut::map_anon(bytes.len().max(1))
        .map_err(|e| OmniError::Storage(format!("cannot map a graph index: {e}")))?;
    m[..bytes.len()].copy_from_slice(bytes);
    let m = m
        .make_read_only()
        .map_err(|e| OmniError::Storage(format!("cannot map a graph index: {e}")))?;
    Ok(Arc::new(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::coverage::FragmentRows;

    fn sample() -> (GraphIndex, Basis, IdOrder) {
        let g = GraphIndex::from_pairs(3, 3, &[(0, 1), (1, 2), (2, u32::MAX)], 0);
        let frag = |n| FragmentRows {
            id: 1,
            files: "f".into(),
            physical: n,
            deleted: vec![],
        };
        let basis = Basis {
            tables: ["e".into(), "n".into(), "n".into()],
            layouts: [vec![frag(3)], vec![frag(3)], vec![frag(3)]],
        };
        let ids = IdOrder::build(&arrow_array::StringArray::from(vec!["c", "a", "b"]));
        (g, basis, ids)
    }

    #[test]
    fn round_trips_through_a_mapping_and_refuses_damage() {
        let (g, basis, ids) = sample();
        let bytes = encode(&g, &basis, &[&ids]);
        let Persisted {
            graph: back,
            basis: b,
            ids: [from, to],
        } = decode(anonymous(&bytes).unwrap(), "t").unwrap();
        assert_eq!(b, basis);
        assert!(Arc::ptr_eq(&from, &to), "one table, one order");
        assert!(from.sound());
        assert_eq!((from.position("b"), from.id(0)), (Some(2), Some("c")));
        assert_eq!(back.skipped, 1);
        assert_eq!(&*back.out.targets, &*g.out.targets);
        assert_eq!(&*back.inn.edges, &*g.inn.edges);
        assert_eq!(&*back.inn.offsets, &*g.inn.offsets);
        assert!(back.edge_rows_sound());
        // One flipped bit in a target is refused on open; in an edge row,
        // the first time edge rows are needed.
        let target_at = bytes.len() - 4 * (g.inn.edges.len() + g.inn.targets.len());
        let mut flipped = bytes.clone();
        flipped[target_at] ^= 1;
        let err = decode(anonymous(&flipped).unwrap(), "t").err().unwrap();
        assert!(err.to_string().contains("checksum"), "{err}");
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let back = decode(anonymous(&flipped).unwrap(), "t").unwrap();
        assert!(!back.graph.edge_rows_sound());
        assert!(back.ids[0].sound());
        // A flipped id byte (the ids come first): the file opens; its ids
        // are not used.
        let ids_at = bytes.len() - g.bytes() - ids.bytes_held();
        let mut flipped = bytes.clone();
        flipped[ids_at + 4 * ids.offsets.len()] ^= 1;
        let back = decode(anonymous(&flipped).unwrap(), "t").unwrap();
        assert!(back.graph.edge_rows_sound());
        assert!(!back.ids[0].sound());
        let short = &bytes[..bytes.len() - 1];
        let err = decode(anonymous(short).unwrap(), "t").err().unwrap();
        assert!(err.to_string().contains("not the length"), "{err}");
        // A header naming another row count than the arrays hold.
        let mut other = basis.clone();
        other.layouts[1][0].physical = 4;
        let err = decode(anonymous(&encode(&g, &other, &[&ids])).unwrap(), "t")
            .err()
            .unwrap();
        assert!(err.to_string().contains("do not fit"), "{err}");
    }
}
