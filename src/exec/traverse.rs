//! Traversals: one hop or variable length over an edge type's adjacency
//! (see `graph` for which one), and edge bindings (one row per edge).

use std::collections::HashMap;

use super::run::{Ctx, Frame, var_type};
use crate::compiler::query::ir::{Dir, Op, Plan};
use crate::error::Result;
use crate::index::adjacency::{Graph, Side};

impl Ctx<'_> {
    /// `$a edge{min,max} $b`: each row to every node reached.
    pub(super) async fn expand(&self, plan: &Plan, op: &Op, frame: Frame) -> Result<Frame> {
        let Op::Expand {
            from,
            edge,
            dir,
            to,
            to_bound,
            min,
            max,
            to_filters,
        } = op
        else {
            unreachable!("expand runs Op::Expand")
        };
        let froms = frame.cols[*from].clone().expect("from is bound");
        let g = if (*min, *max) == (1, Some(1)) {
            self.one_hop_graph(edge, *dir, &froms).await?
        } else {
            self.graph(edge).await?
        };
        let to_type = var_type(plan, *to).to_string();
        let n = self
            .node_count(&to_type)
            .await?
            .max(self.node_count(var_type(plan, *from)).await?);
        let mut keep_rows = Vec::new();
        let mut new_to = Vec::new();
        let mut bfs = Bfs::new(n);
        let mut reached = Vec::new();
        let mut by_source: HashMap<u32, Vec<u32>> = HashMap::new();
        if (*min, *max) == (1, Some(1)) && !*to_bound && to_filters.is_empty() {
            // One hop, nothing to check: read the adjacency directly.
            let same_type = var_type(plan, *from) == to_type;
            let (keep_rows, new_to) = one_hop(&g, *dir, &froms, same_type);
            let mut out = frame.take_rows(&keep_rows);
            out.cols[*to] = Some(new_to);
            return Ok(out);
        }
        for (r, &src) in froms.iter().enumerate() {
            let targets = match by_source.get(&src) {
                Some(t) => t.clone(),
                None => {
                    reached.clear();
                    if var_type(plan, *from) == to_type {
                        bfs.reach(&g, *dir, src, *min, *max, &mut reached);
                    } else if *min <= 1 && max.is_none_or(|m| m >= 1) {
                        // Between two node types only one hop exists,
                        // and the ends live in different id spaces.
                        let side = if *dir == Dir::In { g.inn() } else { g.out() };
                        reached.extend(side.targets(src));
                        reached.sort_unstable();
                        reached.dedup();
                    }
                    let t = self
                        .filter_candidates(&to_type, to_filters, reached.clone())
                        .await?;
                    if froms.len() > 1 {
                        by_source.insert(src, t.clone());
                    }
                    t
                }
            };
            if *to_bound {
                let want = frame.cols[*to].as_ref().expect("bound")[r];
                if targets.contains(&want) {
                    keep_rows.push(r);
                }
            } else {
                for t in targets {
                    keep_rows.push(r);
                    new_to.push(t);
                }
            }
        }
        let mut out = frame.take_rows(&keep_rows);
        if !*to_bound {
            out.cols[*to] = Some(new_to);
        }
        Ok(out)
    }

    /// `$a $e:edge $b`: each row to every matching edge, one row per edge.
    pub(super) async fn expand_edge(&self, plan: &Plan, op: &Op, frame: Frame) -> Result<Frame> {
        let Op::ExpandEdge {
            from,
            edge_var,
            edge,
            dir,
            to,
            to_bound,
            to_filters,
        } = op
        else {
            unreachable!("expand_edge runs Op::ExpandEdge")
        };
        let g = self.graph_with_edge_rows(edge).await?;
        let to_type = var_type(plan, *to).to_string();
        let froms = frame.cols[*from].clone().expect("from is bound");
        let mut keep_rows = Vec::new();
        let mut new_to = Vec::new();
        let mut new_edge = Vec::new();
        for (r, &src) in froms.iter().enumerate() {
            let mut hits: Vec<(u32, u32)> = Vec::new();
            if matches!(dir, Dir::Out | Dir::Both) {
                hits.extend(g.out().entries(src));
            }
            if matches!(dir, Dir::In | Dir::Both) {
                hits.extend(g.inn().entries(src));
            }
            hits.sort_unstable();
            hits.dedup();
            let ok: crate::util::hash::FxHashSet<u32> = self
                .filter_candidates(&to_type, to_filters, hits.iter().map(|h| h.1).collect())
                .await?
                .into_iter()
                .collect();
            for (e, t) in hits {
                if !ok.contains(&t) {
                    continue;
                }
                if *to_bound && frame.cols[*to].as_ref().expect("bound")[r] != t {
                    continue;
                }
                keep_rows.push(r);
                new_edge.push(e);
                new_to.push(t);
            }
        }
        let mut out = frame.take_rows(&keep_rows);
        out.cols[*edge_var] = Some(new_edge);
        if !*to_bound {
            out.cols[*to] = Some(new_to);
        }
        Ok(out)
    }
}

/// Breadth-first reachability from `start` over `dir`, reporting each node
/// first reached at a hop in `min..=max` (the start is visited at hop 0).
/// What it has seen is one bit per node (at s1m 125 KiB, which stays in
/// cache, where a word per node did not), cleared after each search by
/// the nodes it visited, or whole when that is cheaper.
pub(super) struct Bfs {
    /// Nodes in the id space searched.
    nodes: usize,
    seen: Vec<u64>,
    /// Every node visited below the last hop, in visit order; hop `h`'s
    /// frontier is one range of it.
    queue: Vec<u32>,
}

impl Bfs {
    fn new(n: usize) -> Self {
        Self {
            nodes: n,
            seen: vec![0; n / 64 + 1],
            queue: Vec::new(),
        }
    }

    fn reach(
        &mut self,
        g: &Graph,
        dir: Dir,
        start: u32,
        min: u32,
        max: Option<u32>,
        out: &mut Vec<u32>,
    ) {
        let (seen, queue) = (&mut self.seen, &mut self.queue);
        let first_out = out.len();
        queue.clear();
        seen[start as usize / 64] |= 1 << (start % 64);
        queue.push(start);
        if min == 0 {
            out.push(start);
        }
        let (mut lo, mut hop) = (0, 0);
        while lo < queue.len() && max.is_none_or(|m| hop < m) {
            hop += 1;
            // Nodes first reached at the last hop are never expanded: they
            // go to `out` only (every such hop is at least `min`).
            let last = max == Some(hop);
            let hi = queue.len();
            if last && bottom_up_pays(g, dir, &queue[lo..hi], self.nodes - hi, self.nodes) {
                // The last hop reaches exactly the unseen nodes with a seen
                // neighbour against `dir` (one seen at an earlier hop would
                // have reached them already), so each unseen node asks its
                // own edges until one answers instead of the frontier
                // walking all of its: on a hub's third hop most nodes are
                // reached, and each answers at its first edge or so.
                let bit = |seen: &[u64], t: u32| seen[t as usize / 64] & (1 << (t % 64)) != 0;
                let first = out.len();
                for v in 0..self.nodes as u32 {
                    if bit(seen, v) {
                        continue;
                    }
                    let reached = |side: Side<'_>| side.targets(v).any(|u| bit(seen, u));
                    let hit = match dir {
                        Dir::Out => reached(g.inn()),
                        Dir::In => reached(g.out()),
                        Dir::Both => reached(g.out()) || reached(g.inn()),
                    };
                    if hit {
                        out.push(v);
                    }
                }
                // Marked after the scan: a node reached at this hop is no
                // one's way in at it.
                for &v in &out[first..] {
                    seen[v as usize / 64] |= 1 << (v % 64);
                }
                break;
            }
            for i in lo..hi {
                let n = queue[i];
                let mut visit = |side: Side<'_>| {
                    // `for_each`, not `for`: it folds over the plain
                    // slice without a branch on the kind per entry.
                    side.targets(n).for_each(|t| {
                        let (w, bit) = (t as usize / 64, 1u64 << (t % 64));
                        if seen[w] & bit == 0 {
                            seen[w] |= bit;
                            if !last {
                                queue.push(t);
                            }
                            if hop >= min {
                                out.push(t);
                            }
                        }
                    });
                };
                match dir {
                    Dir::Out => visit(g.out()),
                    Dir::In => visit(g.inn()),
                    Dir::Both => {
                        visit(g.out());
                        visit(g.inn());
                    }
                }
            }
            lo = hi;
        }
        // Every node seen is in the queue or, reached at the last hop, in
        // what this search added to `out`.
        let visited = queue.len() + out.len() - first_out;
        if visited > seen.len() {
            seen.fill(0);
        } else {
            for &t in queue.iter().chain(&out[first_out..]) {
                seen[t as usize / 64] &= !(1 << (t % 64));
            }
        }
    }
}

/// Is asking every unseen node for a seen neighbour cheaper than walking
/// the frontier's edges? Only on plain sides, whose degrees are free. The
/// frontier's walk costs its edges, `m`. Asking costs each unseen node a
/// probe or so when it is reached and all its edges when it is not; with
/// `m` edges landing at random among `nodes`, a node is reached with
/// chance `1 - e^(-m/nodes)`. (A hub's second hop reaches half the graph,
/// and asking there was twice as slow; its third hop reaches nearly all.)
fn bottom_up_pays(g: &Graph, dir: Dir, frontier: &[u32], unseen: usize, nodes: usize) -> bool {
    if !(g.out().plain() && g.inn().plain()) || nodes == 0 {
        return false;
    }
    let sides = match dir {
        Dir::Out => [Some(g.out()), None],
        Dir::In => [Some(g.inn()), None],
        Dir::Both => [Some(g.out()), Some(g.inn())],
    };
    let m: usize = sides
        .into_iter()
        .flatten()
        .map(|s| frontier.iter().map(|&n| s.plain_degree(n)).sum::<usize>())
        .sum();
    let degree = sides
        .into_iter()
        .flatten()
        .map(|s| s.plain_entries())
        .sum::<usize>() as f64
        / nodes as f64;
    let missed = (-(m as f64) / nodes as f64).exp();
    m as f64 > unseen as f64 * (degree * missed + 1.0)
}

/// Each row's one-hop neighbours in `g` (deduplicated, the start itself
/// left out when both ends have one type): the rows to keep, each with the
/// neighbour it reaches.
fn one_hop(g: &Graph, dir: Dir, froms: &[u32], same_type: bool) -> (Vec<usize>, Vec<u32>) {
    let side = if dir == Dir::In { g.inn() } else { g.out() };
    let (mut keep_rows, mut new_to) = (Vec::new(), Vec::new());
    let mut scratch = Vec::new();
    for (r, &src) in froms.iter().enumerate() {
        scratch.clear();
        scratch.extend(side.targets(src));
        if dir == Dir::Both {
            scratch.extend(g.inn().targets(src));
        }
        if scratch.len() > 1 {
            scratch.sort_unstable();
            scratch.dedup();
        }
        for &t in &scratch {
            if same_type && t == src {
                continue; // the start is visited at hop 0
            }
            keep_rows.push(r);
            new_to.push(t);
        }
    }
    (keep_rows, new_to)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::index::adjacency::GraphIndex;

    /// The nodes first reached at hops `min..=max`, by sets of hops.
    /// One reused `Bfs` from each start (repeats included, so state left by
    /// one search is met by the next), in every direction and hop range,
    /// against the pairs counted by hand.
    fn reaches_as_by_hops(
        g: &Graph,
        pairs: &[(u32, u32)],
        n: u32,
        starts: &[u32],
        ranges: &[(u32, u32)],
    ) {
        let mut bfs = Bfs::new(n as usize);
        for dir in [Dir::Out, Dir::In, Dir::Both] {
            for &start in starts {
                for &(min, max) in ranges {
                    let mut got = Vec::new();
                    bfs.reach(g, dir, start, min, Some(max), &mut got);
                    got.sort_unstable();
                    assert_eq!(
                        got,
                        by_hops(pairs, start, min, max, dir),
                        "{dir:?} from {start}, hops {min}..={max}"
                    );
                }
            }
        }
    }

    fn by_hops(pairs: &[(u32, u32)], start: u32, min: u32, max: u32, dir: Dir) -> Vec<u32> {
        let step = |from: &BTreeSet<u32>| -> BTreeSet<u32> {
            let mut to = BTreeSet::new();
            for &(a, b) in pairs {
                if matches!(dir, Dir::Out | Dir::Both) && from.contains(&a) {
                    to.insert(b);
                }
                if matches!(dir, Dir::In | Dir::Both) && from.contains(&b) {
                    to.insert(a);
                }
            }
            to
        };
        let mut seen = BTreeSet::from([start]);
        let mut frontier = seen.clone();
        let mut out = if min == 0 { vec![start] } else { vec![] };
        for hop in 1..=max {
            frontier = step(&frontier).difference(&seen).copied().collect();
            seen.extend(&frontier);
            if hop >= min {
                out.extend(&frontier);
            }
        }
        out.sort_unstable();
        out
    }

    #[test]
    fn repeated_searches_from_many_starts_each_see_only_their_own_visits() {
        // 300 nodes (several words of bits), a ring with chords and a hub,
        // so that some searches visit most nodes (cleared whole) and some
        // a few (cleared node by node).
        let n = 300u32;
        let mut pairs: Vec<(u32, u32)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
        pairs.extend((0..n).step_by(7).map(|i| (i, (i * 13 + 5) % n)));
        pairs.extend((1..n).step_by(3).map(|i| (0, i)));
        let g = Graph::whole(Arc::new(GraphIndex::from_pairs(
            n as usize, n as usize, &pairs, 0,
        )));
        reaches_as_by_hops(
            &g,
            &pairs,
            n,
            &[0, 5, 299, 0, 150, 7, 7],
            &[(0, 1), (1, 1), (2, 2), (1, 3), (3, 5), (1, 300)],
        );
    }

    #[test]
    fn a_dense_last_hop_asked_from_the_unseen_side_reaches_the_same_nodes() {
        // 200 nodes, 2,000 edges from a fixed generator (self-loops and
        // repeats included): by the second hop the frontier has more edges
        // than there are unseen nodes, so the last hop is answered from
        // the unseen side.
        let n = 200u32;
        let mut x = 12345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u32 % n
        };
        let pairs: Vec<(u32, u32)> = (0..2000).map(|_| (next(), next())).collect();
        let g = Graph::whole(Arc::new(GraphIndex::from_pairs(
            n as usize, n as usize, &pairs, 0,
        )));
        assert!(bottom_up_pays(
            &g,
            Dir::Out,
            &(0..40).collect::<Vec<_>>(),
            150,
            200
        ));
        reaches_as_by_hops(
            &g,
            &pairs,
            n,
            &[0, 3, 199, 0],
            &[(2, 2), (1, 2), (1, 3), (3, 3), (0, 2)],
        );
    }
}
