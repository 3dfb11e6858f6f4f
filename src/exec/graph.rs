//! An edge type's adjacency in both directions ([`GraphIndex`]: CSR out, CSC
//! in, with the edge row of every entry), over the dense numbering of its
//! endpoint tables ([`IdIndex`]). Built from one table version; never changes.

use std::sync::Arc;

use arrow_array::{Array, StringArray};

use crate::util::idindex::{ABSENT, IdIndex};

/// One direction of adjacency: for node `n`, entries `offsets[n]..offsets[n+1]`
/// of `targets` (dense node index) and `edges` (edge row).
pub struct Adjacency {
    pub offsets: Vec<u32>,
    pub targets: Vec<u32>,
    pub edges: Vec<u32>,
}

impl Adjacency {
    /// From `(source, destination)` per edge row, over `nodes` nodes;
    /// `reverse` indexes by destination instead. A dangling edge (an
    /// [`ABSENT`] end) goes into one extra bucket past the last node, which
    /// no lookup reads, so it can never be followed.
    fn build(nodes: usize, pairs: &[(u32, u32)], reverse: bool) -> Self {
        let aim = |&(a, b): &(u32, u32)| match (a == ABSENT || b == ABSENT, reverse) {
            (true, _) => (nodes as u32, 0),
            (false, false) => (a, b),
            (false, true) => (b, a),
        };
        let n = nodes + 1;
        let mut offsets = vec![0u32; n + 1];
        for p in pairs {
            offsets[aim(p).0 as usize + 1] += 1;
        }
        for i in 0..n {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; pairs.len()];
        let mut edges = vec![0u32; pairs.len()];
        // `pairs` is indexed by edge row, so entries stay in edge-row order.
        for (row, p) in pairs.iter().enumerate() {
            let (from, to) = aim(p);
            let at = fill[from as usize] as usize;
            targets[at] = to;
            edges[at] = row as u32;
            fill[from as usize] += 1;
        }
        Self {
            offsets,
            targets,
            edges,
        }
    }

    #[inline]
    pub fn range(&self, n: u32) -> std::ops::Range<usize> {
        self.offsets[n as usize] as usize..self.offsets[n as usize + 1] as usize
    }

    #[inline]
    pub fn degree(&self, n: u32) -> usize {
        self.range(n).len()
    }

    fn bytes(&self) -> usize {
        (self.offsets.len() + self.targets.len() + self.edges.len()) * 4
    }
}

/// CSR (out) and CSC (in) adjacency of one edge type.
pub struct GraphIndex {
    pub out: Adjacency,
    pub inn: Adjacency,
    /// Edge rows whose endpoint is missing from the node tables (dangling).
    pub skipped: usize,
    pub edges: usize,
}

impl GraphIndex {
    /// Build from the edge table's `src`/`dst` columns (in scan order) and
    /// the endpoint node tables. Lookups run on two cores.
    pub fn build(
        src: &[StringArray],
        dst: &[StringArray],
        from: &Arc<IdIndex>,
        to: &Arc<IdIndex>,
    ) -> Self {
        let total: usize = src.iter().map(|a| a.len()).sum();
        let mut starts = Vec::with_capacity(src.len());
        let mut acc = 0;
        for a in src {
            starts.push(acc);
            acc += a.len();
        }
        let mut pairs = vec![(ABSENT, ABSENT); total];
        let work = |range: std::ops::Range<usize>, out: &mut [(u32, u32)], base: usize| {
            let (mut s_at, mut d_at) = (Vec::new(), Vec::new());
            for b in range {
                s_at.clear();
                d_at.clear();
                from.lookup_all(&src[b], &mut s_at);
                to.lookup_all(&dst[b], &mut d_at);
                let at = starts[b] - base;
                for (i, pair) in s_at.iter().zip(&d_at).enumerate() {
                    out[at + i] = (*pair.0, *pair.1);
                }
            }
        };
        let nb = src.len();
        if nb > 1 {
            let half = nb / 2;
            let split = starts[half];
            let (left, right) = pairs.split_at_mut(split);
            std::thread::scope(|s| {
                s.spawn(|| work(0..half, left, 0));
                work(half..nb, right, split);
            });
        } else {
            work(0..nb, &mut pairs, 0);
        }
        let skipped = pairs
            .iter()
            .filter(|(a, b)| *a == ABSENT || *b == ABSENT)
            .count();
        Self {
            out: Adjacency::build(from.len(), &pairs, false),
            inn: Adjacency::build(to.len(), &pairs, true),
            skipped,
            edges: total,
        }
    }

    pub fn bytes(&self) -> usize {
        self.out.bytes() + self.inn.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_adjacency() {
        let nodes = Arc::new(IdIndex::new(StringArray::from(vec!["a", "b", "c"])));
        assert_eq!(nodes.get("c"), Some(2));
        assert_eq!(nodes.get("z"), None);
        let src = vec![
            StringArray::from(vec!["a", "a"]),
            StringArray::from(vec!["b", "x"]),
        ];
        let dst = vec![
            StringArray::from(vec!["b", "c"]),
            StringArray::from(vec!["c", "a"]),
        ];
        let g = GraphIndex::build(&src, &dst, &nodes, &nodes);
        assert_eq!(g.skipped, 1);
        let out: Vec<u32> = g.out.range(0).map(|i| g.out.targets[i]).collect();
        assert_eq!(out, vec![1, 2]);
        let into_c: Vec<u32> = g.inn.range(2).map(|i| g.inn.targets[i]).collect();
        assert_eq!(into_c, vec![0, 1]);
        let edge_rows: Vec<u32> = g.inn.range(2).map(|i| g.inn.edges[i]).collect();
        assert_eq!(edge_rows, vec![1, 2]);
    }
}
