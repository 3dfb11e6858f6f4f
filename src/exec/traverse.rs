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
pub(super) struct Bfs {
    seen: Vec<u32>,
    stamp: u32,
}

impl Bfs {
    fn new(n: usize) -> Self {
        Self {
            seen: vec![0; n + 1],
            stamp: 0,
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
        self.stamp += 1;
        if self.stamp == u32::MAX {
            self.seen.iter_mut().for_each(|s| *s = 0);
            self.stamp = 1;
        }
        let stamp = self.stamp;
        self.seen[start as usize] = stamp;
        if min == 0 {
            out.push(start);
        }
        let mut frontier = vec![start];
        let mut hop = 0;
        while !frontier.is_empty() && max.is_none_or(|m| hop < m) {
            hop += 1;
            let mut next = Vec::new();
            for &n in &frontier {
                let mut visit = |side: Side<'_>| {
                    // `for_each`, not `for`: it folds over the plain
                    // slice without a branch on the kind per entry.
                    side.targets(n).for_each(|t| {
                        if self.seen[t as usize] != stamp {
                            self.seen[t as usize] = stamp;
                            next.push(t);
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
            frontier = next;
        }
    }
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
