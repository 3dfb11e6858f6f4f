//! Traversals: one hop or variable length over an edge type's cached
//! CSR/CSC index (a small one-hop adjacency when only a few sources need
//! it), and edge bindings (one row per edge).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::time::Instant;

use super::cache::Key;
use super::graph::GraphIndex;
use super::run::{Ctx, Frame, var_type};
use crate::compiler::query::ir::{Dir, Op, Plan};
use crate::error::{OmniError, Result};
use crate::storage::stage;

/// A traversal from at most this many distinct sources may probe the edge
/// table instead of building its index (see [`Ctx::one_hop_graph`]).
const PROBE_SOURCES_MAX: usize = 64;

impl Ctx<'_> {
    pub(super) fn graph_key(&self, edge: &str) -> Result<Key> {
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        Ok(Key::Graph {
            edge: self.phys(e)?,
            from: self.phys(self.def(from))?,
            to: self.phys(self.def(to))?,
        })
    }

    /// The adjacency one hop from `sources` needs. Until an edge type has
    /// an index, a first traversal from a few sources reads only the edges
    /// that touch them (a filtered scan), which is far cheaper than building
    /// the whole index in a one-shot process; the result is exact for those
    /// sources in `dir` and is not cached.
    pub(super) async fn one_hop_graph(
        &self,
        edge: &str,
        dir: Dir,
        sources: &[u32],
    ) -> Result<Arc<GraphIndex>> {
        let key = self.graph_key(edge)?;
        if let Some(g) = self.cached_graph(edge, &key) {
            return Ok(g);
        }
        let probe = Key::Probed(self.phys(self.def(edge))?);
        let mut distinct = sources.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() > PROBE_SOURCES_MAX || self.cache.get::<()>(&probe).is_some() {
            return self.graph(edge).await;
        }
        self.cache.put(probe, Arc::new(()), 64);
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        let from_ids = self.node_ids(from).await?;
        let to_ids = self.node_ids(to).await?;
        let (by_src, by_dst) = match dir {
            Dir::Out => (true, false),
            Dir::In => (false, true),
            Dir::Both => (true, true),
        };
        let mut names: Vec<&str> = Vec::new();
        if by_src {
            names.extend(distinct.iter().map(|&n| from_ids.ids.value(n as usize)));
        }
        if by_dst {
            names.extend(distinct.iter().map(|&n| to_ids.ids.value(n as usize)));
        }
        names.sort_unstable();
        names.dedup();
        let ds = self.g.read_table(self.snap, e).await?;
        let (src, dst) = stage::edges_touching(&ds, &names, by_src, by_dst).await?;
        self.cache
            .stats
            .edge_probes
            .fetch_add(1, AtomicOrdering::Relaxed);
        tracing::debug!(
            edge,
            sources = distinct.len(),
            "edges read by probing sources"
        );
        Ok(Arc::new(GraphIndex::build(&src, &dst, &from_ids, &to_ids)))
    }

    /// The edge type's index if the runtime cache holds it (counted as a hit).
    pub(super) fn cached_graph(&self, edge: &str, key: &Key) -> Option<Arc<GraphIndex>> {
        let g = self.cache.get::<GraphIndex>(key)?;
        self.cache
            .stats
            .graph_hits
            .fetch_add(1, AtomicOrdering::Relaxed);
        tracing::debug!(edge, "graph index reused from the runtime cache");
        Some(g)
    }

    pub(super) async fn graph(&self, edge: &str) -> Result<Arc<GraphIndex>> {
        let e = self.def(edge);
        let (from, to) = e.endpoints().expect("edge");
        let key = self.graph_key(edge)?;
        if let Some(g) = self.cached_graph(edge, &key) {
            return Ok(g);
        }
        let from_ids = self.node_ids(from).await?;
        let to_ids = self.node_ids(to).await?;
        let t0 = Instant::now();
        let src = self.scan_strings(e, "src").await?;
        let dst = self.scan_strings(e, "dst").await?;
        let g =
            tokio::task::spawn_blocking(move || GraphIndex::build(&src, &dst, &from_ids, &to_ids))
                .await
                .map_err(|e| OmniError::Storage(format!("graph index build failed: {e}")))?;
        let micros = t0.elapsed().as_micros() as u64;
        let s = &self.cache.stats;
        s.graph_builds.fetch_add(1, AtomicOrdering::Relaxed);
        s.graph_build_edges
            .fetch_add(g.edges as u64, AtomicOrdering::Relaxed);
        s.graph_build_micros
            .fetch_add(micros, AtomicOrdering::Relaxed);
        tracing::info!(
            edge,
            edges = g.edges,
            ms = micros / 1000,
            "graph index built"
        );
        let g = Arc::new(g);
        self.cache.put(key, g.clone(), g.bytes());
        Ok(g)
    }

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
            .node_ids(&to_type)
            .await?
            .len()
            .max(self.node_ids(var_type(plan, *from)).await?.len());
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
                        let adj = if *dir == Dir::In { &g.inn } else { &g.out };
                        reached.extend(adj.range(src).map(|i| adj.targets[i]));
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
        let g = self.graph(edge).await?;
        let to_type = var_type(plan, *to).to_string();
        let froms = frame.cols[*from].clone().expect("from is bound");
        let mut keep_rows = Vec::new();
        let mut new_to = Vec::new();
        let mut new_edge = Vec::new();
        for (r, &src) in froms.iter().enumerate() {
            let mut hits: Vec<(u32, u32)> = Vec::new();
            if matches!(dir, Dir::Out | Dir::Both) {
                hits.extend(g.out.range(src).map(|i| (g.out.edges[i], g.out.targets[i])));
            }
            if matches!(dir, Dir::In | Dir::Both) {
                hits.extend(g.inn.range(src).map(|i| (g.inn.edges[i], g.inn.targets[i])));
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
        g: &GraphIndex,
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
                let mut visit = |adj: &super::graph::Adjacency| {
                    for i in adj.range(n) {
                        let t = adj.targets[i];
                        if self.seen[t as usize] != stamp {
                            self.seen[t as usize] = stamp;
                            next.push(t);
                            if hop >= min {
                                out.push(t);
                            }
                        }
                    }
                };
                match dir {
                    Dir::Out => visit(&g.out),
                    Dir::In => visit(&g.inn),
                    Dir::Both => {
                        visit(&g.out);
                        visit(&g.inn);
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
fn one_hop(g: &GraphIndex, dir: Dir, froms: &[u32], same_type: bool) -> (Vec<usize>, Vec<u32>) {
    let adj = if dir == Dir::In { &g.inn } else { &g.out };
    let (mut keep_rows, mut new_to) = (Vec::new(), Vec::new());
    let mut scratch = Vec::new();
    for (r, &src) in froms.iter().enumerate() {
        scratch.clear();
        scratch.extend(adj.range(src).map(|i| adj.targets[i]));
        if dir == Dir::Both {
            scratch.extend(g.inn.range(src).map(|i| g.inn.targets[i]));
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
