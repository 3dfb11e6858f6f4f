//! Runs a [`Plan`] over one snapshot. The frame holds one column of row
//! positions per variable (a node's dense index in its table, or an edge's
//! row); properties are read from cached whole columns by position.
//! NodeScan pushes typed filters into Lance; traversal uses the cached
//! CSR/CSC graph index of each traversed edge type.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;
use std::time::Instant;

use arrow::compute::{SortColumn, SortOptions, concat, lexsort_to_indices, take};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use futures::TryStreamExt;

use super::cache::{Key, Phys, RuntimeCache};
use super::graph::GraphIndex;
use super::scalar::{S, cmp_s, holds, s_at, s_of};
use crate::compiler::catalog::{ID, PropType, TypeDef};
use crate::compiler::query::ast::CmpOp;
use crate::compiler::query::ir::{AggFunc, Dir, Op, Plan, Pred, RetExpr, ValExpr, Value, VarKind};
use crate::error::{OmniError, Result};
use crate::storage::scan::{self, Filter};
use crate::storage::{GraphStorage, Snapshot, stage};
use crate::util::idindex::IdIndex;

/// What a query returned, with the snapshot it read.
#[derive(Debug)]
pub struct QueryResult {
    pub query: String,
    pub branch: String,
    pub graph_commit_id: String,
    pub manifest_version: u64,
    pub columns: Vec<String>,
    pub batches: Vec<RecordBatch>,
}

impl QueryResult {
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(|b| b.num_rows()).sum()
    }
}

pub struct Ctx<'a> {
    pub g: &'a GraphStorage,
    pub snap: &'a Snapshot,
    pub cache: &'a RuntimeCache,
    /// Parameter values; an absent optional parameter is missing here.
    pub params: &'a BTreeMap<String, Value>,
    pub now_ms: i64,
}

#[derive(Clone)]
struct Frame {
    /// Per variable: row positions (dense node index or edge row).
    cols: Vec<Option<Vec<u32>>>,
    rows: usize,
}

impl Frame {
    fn take_rows(&self, keep: &[usize]) -> Frame {
        Frame {
            cols: self
                .cols
                .iter()
                .map(|c| c.as_ref().map(|v| keep.iter().map(|&r| v[r]).collect()))
                .collect(),
            rows: keep.len(),
        }
    }
}

/// A value source prepared for per-row reads.
enum Acc<'f> {
    Col {
        arr: ArrayRef,
        idx: &'f [u32],
    },
    /// The single row a NodeScan/Expand candidate is (index given at read).
    Cand {
        arr: ArrayRef,
    },
    Const(Value),
}

impl Acc<'_> {
    fn at(&self, row: usize, cand: u32) -> S<'_> {
        match self {
            Acc::Col { arr, idx } => s_at(arr, idx[row] as usize),
            Acc::Cand { arr } => s_at(arr, cand as usize),
            Acc::Const(v) => s_of(v),
        }
    }
}

impl Ctx<'_> {
    fn def(&self, name: &str) -> &TypeDef {
        self.g.catalog.get(name).expect("checked types exist")
    }

    fn phys(&self, t: &TypeDef) -> Result<Phys> {
        Ok(Phys::of(self.g.store.uri(), self.snap.table(t)?))
    }

    pub async fn node_ids(&self, type_name: &str) -> Result<Arc<IdIndex>> {
        let t = self.def(type_name);
        let key = Key::Ids(self.phys(t)?);
        if let Some(v) = self.cache.get::<IdIndex>(&key) {
            return Ok(v);
        }
        let v = Arc::new(IdIndex::from_parts(&self.scan_strings(t, ID).await?)?);
        self.cache.put(key, v.clone(), v.bytes());
        Ok(v)
    }

    async fn scan_strings(&self, t: &TypeDef, column: &str) -> Result<Vec<StringArray>> {
        let ds = self.g.read_table(self.snap, t).await?;
        stage::scan_strings(&ds, column).await
    }

    /// A whole column of a type's table at this snapshot, in scan order.
    pub async fn column(&self, type_name: &str, column: &str) -> Result<ArrayRef> {
        let t = self.def(type_name);
        let key = Key::Column(self.phys(t)?, column.to_string());
        if let Some(v) = self.cache.get::<ArrayRef>(&key) {
            return Ok((*v).clone());
        }
        let ds = self.g.read_table(self.snap, t).await?;
        let arr = scan::column(&ds, column).await?;
        self.cache
            .stats
            .column_loads
            .fetch_add(1, AtomicOrdering::Relaxed);
        let bytes = arr.get_array_memory_size();
        self.cache.put(key, Arc::new(arr.clone()), bytes);
        Ok(arr)
    }

    fn graph_key(&self, edge: &str) -> Result<Key> {
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
    async fn one_hop_graph(
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
    fn cached_graph(&self, edge: &str, key: &Key) -> Option<Arc<GraphIndex>> {
        let g = self.cache.get::<GraphIndex>(key)?;
        self.cache
            .stats
            .graph_hits
            .fetch_add(1, AtomicOrdering::Relaxed);
        tracing::debug!(edge, "graph index reused from the runtime cache");
        Some(g)
    }

    pub async fn graph(&self, edge: &str) -> Result<Arc<GraphIndex>> {
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

    fn param(&self, name: &str) -> Option<&Value> {
        self.params.get(name)
    }

    /// A predicate that reads an absent optional parameter is dropped.
    fn active(&self, p: &Pred) -> bool {
        [&p.left, &p.right].iter().all(|e| match e {
            ValExpr::Param { name } => self.param(name).is_some(),
            _ => true,
        })
    }

    fn const_of(&self, e: &ValExpr) -> Option<Value> {
        match e {
            ValExpr::Const(v) => Some(v.clone()),
            ValExpr::Param { name } => self.param(name).cloned(),
            ValExpr::Now => Some(Value::DateTime(self.now_ms)),
            _ => None,
        }
    }

    /// The property source of one side for rows of `var`'s type.
    async fn var_source(&self, type_name: &str, e: &ValExpr) -> Result<Option<ArrayRef>> {
        Ok(match e {
            ValExpr::Prop { prop, .. } => Some(self.column(type_name, prop).await?),
            ValExpr::Id { .. } => {
                Some(Arc::new(self.node_or_edge_ids(type_name).await?) as ArrayRef)
            }
            _ => None,
        })
    }

    async fn node_or_edge_ids(&self, type_name: &str) -> Result<StringArray> {
        if self.def(type_name).is_edge() {
            let a = self.column(type_name, ID).await?;
            Ok(a.as_string::<i32>().clone())
        } else {
            Ok(self.node_ids(type_name).await?.ids.clone())
        }
    }

    /// Evaluate single-variable predicates on candidate rows of one type.
    async fn filter_candidates(
        &self,
        type_name: &str,
        preds: &[Pred],
        mut cands: Vec<u32>,
    ) -> Result<Vec<u32>> {
        for p in preds.iter().filter(|p| self.active(p)) {
            let l = self.side(type_name, &p.left).await?;
            let r = self.side(type_name, &p.right).await?;
            cands.retain(|&c| holds(p.op, &l.at(0, c), &r.at(0, c)));
        }
        Ok(cands)
    }

    async fn side(&self, type_name: &str, e: &ValExpr) -> Result<Acc<'static>> {
        Ok(match self.var_source(type_name, e).await? {
            Some(arr) => Acc::Cand { arr },
            None => Acc::Const(self.const_of(e).unwrap_or(Value::Null)),
        })
    }

    async fn acc<'f>(&self, plan: &Plan, frame: &'f Frame, e: &ValExpr) -> Result<Acc<'f>> {
        Ok(match e {
            ValExpr::Prop { var, prop, .. } => Acc::Col {
                arr: self.column(var_type(plan, *var), prop).await?,
                idx: frame.cols[*var].as_deref().expect("bound"),
            },
            ValExpr::Id { var } => Acc::Col {
                arr: Arc::new(self.node_or_edge_ids(var_type(plan, *var)).await?),
                idx: frame.cols[*var].as_deref().expect("bound"),
            },
            other => Acc::Const(self.const_of(other).unwrap_or(Value::Null)),
        })
    }
}

/// A traversal from at most this many distinct sources may probe the edge
/// table instead of building its index (see [`Ctx::one_hop_graph`]).
const PROBE_SOURCES_MAX: usize = 64;

fn var_type(plan: &Plan, var: usize) -> &str {
    match &plan.vars[var].kind {
        VarKind::Node(t) | VarKind::Edge(t) => t,
    }
}

/// A predicate as a typed Lance filter, when it is a property compared with
/// a constant.
fn pushdown(ctx: &Ctx, p: &Pred) -> Option<Filter> {
    let (prop, ty, value, op) = match (&p.left, &p.right) {
        (ValExpr::Prop { prop, ty, .. }, other) => (prop, ty, ctx.const_of(other)?, p.op),
        (other, ValExpr::Prop { prop, ty, .. }) => {
            let flipped = match p.op {
                CmpOp::Lt => CmpOp::Gt,
                CmpOp::Le => CmpOp::Ge,
                CmpOp::Gt => CmpOp::Lt,
                CmpOp::Ge => CmpOp::Le,
                CmpOp::Eq | CmpOp::Ne => p.op,
                _ => return None,
            };
            (prop, ty, ctx.const_of(other)?, flipped)
        }
        _ => return None,
    };
    Filter::compare(prop, ty, op, &value)
}

/// Breadth-first reachability from `start` over `dir`, reporting each node
/// first reached at a hop in `min..=max` (the start is visited at hop 0).
struct Bfs {
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

impl Ctx<'_> {
    fn run_ops<'b>(
        &'b self,
        plan: &'b Plan,
        ops: &'b [Op],
        frame: Frame,
    ) -> futures::future::BoxFuture<'b, Result<Frame>> {
        Box::pin(async move {
            let mut frame = frame;
            for op in ops {
                if frame.rows == 0 {
                    break;
                }
                frame = self.run_op(plan, op, frame).await?;
            }
            Ok(frame)
        })
    }

    async fn scan_candidates(&self, type_name: &str, filters: &[Pred]) -> Result<Vec<u32>> {
        let t = self.def(type_name);
        let ids = self.node_ids(type_name).await?;
        let active: Vec<&Pred> = filters.iter().filter(|p| self.active(p)).collect();
        // A key (or id) equality is a lookup, not a scan.
        let key_eq = active.iter().position(|p| {
            p.op == CmpOp::Eq
                && match (&p.left, &p.right) {
                    (ValExpr::Prop { prop, .. }, other) | (other, ValExpr::Prop { prop, .. }) => {
                        t.key.len() == 1 && t.key[0] == *prop && self.const_of(other).is_some()
                    }
                    (ValExpr::Id { .. }, other) | (other, ValExpr::Id { .. }) => {
                        self.const_of(other).is_some()
                    }
                    _ => false,
                }
        });
        let (mut cands, rest): (Vec<u32>, Vec<Pred>) = if let Some(i) = key_eq {
            let p = active[i];
            let c = match (&p.left, &p.right) {
                (ValExpr::Prop { .. } | ValExpr::Id { .. }, o) => self.const_of(o),
                (o, _) => self.const_of(o),
            };
            let key = match c {
                Some(Value::Str(s)) => Some(s),
                Some(Value::Int(i)) => Some(i.to_string()),
                Some(Value::UInt(u)) => Some(u.to_string()),
                Some(Value::Bool(b)) => Some(b.to_string()),
                Some(Value::Date(d)) => Some(d.to_string()),
                Some(Value::DateTime(d)) => Some(d.to_string()),
                _ => None,
            };
            let found = key.and_then(|k| ids.get(&k)).into_iter().collect();
            let rest = active
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| (*p).clone())
                .collect();
            (found, rest)
        } else {
            let pushed: Vec<Filter> = active.iter().filter_map(|p| pushdown(self, p)).collect();
            if let Some(filter) = Filter::all(pushed) {
                let rest = active
                    .iter()
                    .filter(|p| pushdown(self, p).is_none())
                    .map(|p| (*p).clone())
                    .collect();
                let ds = self.g.read_table(self.snap, t).await?;
                let mut found = Vec::new();
                let mut stream = scan::stream(&ds, &[ID], Some(&filter), None, false).await?;
                while let Some(b) = stream.try_next().await? {
                    let a = stage::string_column(&b, ID)?;
                    for i in 0..a.len() {
                        if let Some(d) = ids.get(a.value(i)) {
                            found.push(d);
                        }
                    }
                }
                found.sort_unstable();
                (found, rest)
            } else {
                (
                    (0..ids.len() as u32).collect(),
                    active.into_iter().cloned().collect(),
                )
            }
        };
        cands = self.filter_candidates(type_name, &rest, cands).await?;
        Ok(cands)
    }

    async fn run_op(&self, plan: &Plan, op: &Op, frame: Frame) -> Result<Frame> {
        match op {
            Op::NodeScan {
                var,
                type_name,
                filters,
            } => {
                let cands = self.scan_candidates(type_name, filters).await?;
                // Cross product with the rows so far.
                let mut out = Frame {
                    cols: vec![None; plan.vars.len()],
                    rows: frame.rows * cands.len(),
                };
                for (i, c) in frame.cols.iter().enumerate() {
                    if let Some(v) = c {
                        out.cols[i] = Some(
                            v.iter()
                                .flat_map(|x| std::iter::repeat_n(*x, cands.len()))
                                .collect(),
                        );
                    }
                }
                out.cols[*var] = Some(
                    (0..frame.rows)
                        .flat_map(|_| cands.iter().copied())
                        .collect(),
                );
                Ok(out)
            }
            Op::Expand {
                from,
                edge,
                dir,
                to,
                to_bound,
                min,
                max,
                to_filters,
            } => {
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
                    let adj = if *dir == Dir::In { &g.inn } else { &g.out };
                    let mut scratch = Vec::new();
                    for (r, &src) in froms.iter().enumerate() {
                        scratch.clear();
                        scratch.extend(adj.range(src).map(|i| adj.targets[i]));
                        if *dir == Dir::Both {
                            scratch.extend(g.inn.range(src).map(|i| g.inn.targets[i]));
                        }
                        if scratch.len() > 1 {
                            scratch.sort_unstable();
                            scratch.dedup();
                        }
                        let same_type = var_type(plan, *from) == to_type;
                        for &t in &scratch {
                            if same_type && t == src {
                                continue; // the start is visited at hop 0
                            }
                            keep_rows.push(r);
                            new_to.push(t);
                        }
                    }
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
            Op::ExpandEdge {
                from,
                edge_var,
                edge,
                dir,
                to,
                to_bound,
                to_filters,
            } => {
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
            Op::Filter(p) => {
                if !self.active(p) {
                    return Ok(frame);
                }
                let l = self.acc(plan, &frame, &p.left).await?;
                let r = self.acc(plan, &frame, &p.right).await?;
                let keep: Vec<usize> = (0..frame.rows)
                    .filter(|&i| holds(p.op, &l.at(i, 0), &r.at(i, 0)))
                    .collect();
                drop((l, r));
                Ok(frame.take_rows(&keep))
            }
            Op::AntiJoin(inner) if anti_degree_test(inner).is_some() => {
                // `not { $p edge $_ }`: a row survives iff $p has no neighbour.
                let (from, edge, dir, min) = anti_degree_test(inner).expect("checked");
                let g = self.graph(edge).await?;
                let froms = frame.cols[from].as_ref().expect("bound");
                let e = self.def(edge);
                let (ef, et) = e.endpoints().expect("edge");
                let same = ef == et;
                let keep: Vec<usize> = (0..frame.rows)
                    .filter(|&r| {
                        let n = froms[r];
                        min > 0
                            && match dir {
                                Dir::Out => !has_neighbour(&g.out, n, same),
                                Dir::In => !has_neighbour(&g.inn, n, same),
                                Dir::Both => {
                                    !has_neighbour(&g.out, n, same)
                                        && !has_neighbour(&g.inn, n, same)
                                }
                            }
                    })
                    .collect();
                Ok(frame.take_rows(&keep))
            }
            Op::AntiJoin(inner) => {
                // Run the inner pattern on all rows at once, remembering each
                // row's origin; keep the rows that produced nothing.
                let origin = plan.vars.len();
                let mut probe = frame.clone();
                probe.cols.push(Some((0..frame.rows as u32).collect()));
                let mut extended = plan.clone();
                extended.vars.push(crate::compiler::query::ir::VarInfo {
                    name: "__origin".into(),
                    kind: VarKind::Node(String::new()),
                    interface: None,
                });
                let matched = self.run_ops(&extended, inner, probe).await?;
                let mut hit = vec![false; frame.rows];
                if let Some(o) = &matched.cols[origin] {
                    for &r in o {
                        hit[r as usize] = true;
                    }
                }
                let keep: Vec<usize> = (0..frame.rows).filter(|&r| !hit[r]).collect();
                Ok(frame.take_rows(&keep))
            }
        }
    }

    /// One output column for the frame's rows.
    async fn project(&self, plan: &Plan, frame: &Frame, e: &RetExpr) -> Result<ArrayRef> {
        let idx = |var: usize| UInt32Array::from(frame.cols[var].clone().expect("bound"));
        Ok(match e {
            RetExpr::Val(ValExpr::Prop { var, prop, .. }) => {
                let arr = self.column(var_type(plan, *var), prop).await?;
                take(arr.as_ref(), &idx(*var), None)?
            }
            RetExpr::Val(ValExpr::Id { var }) => {
                let arr: ArrayRef = Arc::new(self.node_or_edge_ids(var_type(plan, *var)).await?);
                take(arr.as_ref(), &idx(*var), None)?
            }
            RetExpr::Val(other) => repeat(&self.const_of(other).unwrap_or(Value::Null), frame.rows),
            RetExpr::Node { var } => {
                let t = self.def(var_type(plan, *var));
                let indices = idx(*var);
                let mut fields = vec![Field::new(ID, DataType::Utf8, false)];
                let ids: ArrayRef = Arc::new(self.node_ids(&t.name).await?.ids.clone());
                let mut arrays = vec![take(ids.as_ref(), &indices, None)?];
                // Through an interface, the node shows the interface's
                // properties, in its order: every arm then has one shape.
                let props: Vec<&crate::compiler::catalog::PropDef> =
                    match &plan.vars[*var].interface {
                        Some(i) => self
                            .g
                            .catalog
                            .interfaces
                            .iter()
                            .find(|d| &d.name == i)
                            .map(|d| d.properties.iter().collect())
                            .unwrap_or_default(),
                        None => t.properties.iter().collect(),
                    };
                for p in props.into_iter().filter(|p| p.ty != PropType::Blob) {
                    let arr = self.column(&t.name, &p.name).await?;
                    fields.push(Field::new(&p.name, arr.data_type().clone(), true));
                    arrays.push(take(arr.as_ref(), &indices, None)?);
                }
                Arc::new(arrow_array::StructArray::try_new(
                    fields.into(),
                    arrays,
                    None,
                )?)
            }
            RetExpr::Agg { .. } => unreachable!("aggregates are computed per group"),
        })
    }
}

/// An anti-join whose inner pattern is one step to a fresh, unfiltered
/// variable only asks whether the source has a neighbour.
fn anti_degree_test(inner: &[Op]) -> Option<(usize, &str, Dir, u32)> {
    match inner {
        [
            Op::Expand {
                from,
                edge,
                dir,
                to_bound: false,
                min,
                to_filters,
                ..
            },
        ] if to_filters.is_empty() && *min <= 1 => Some((*from, edge.as_str(), *dir, *min)),
        _ => None,
    }
}

/// Has `n` a neighbour (other than itself, when both ends share a type)?
fn has_neighbour(adj: &super::graph::Adjacency, n: u32, same_type: bool) -> bool {
    adj.range(n).any(|i| !same_type || adj.targets[i] != n)
}

/// A constant repeated `n` times.
fn repeat(v: &Value, n: usize) -> ArrayRef {
    use arrow_array::*;
    match v {
        Value::Null => new_null_array(&DataType::Utf8, n),
        Value::Bool(b) => Arc::new(BooleanArray::from(vec![*b; n])),
        Value::Int(i) => Arc::new(Int64Array::from(vec![*i; n])),
        Value::UInt(u) => Arc::new(UInt64Array::from(vec![*u; n])),
        Value::Float(f) => Arc::new(Float64Array::from(vec![*f; n])),
        Value::Str(s) => Arc::new(StringArray::from(vec![s.as_str(); n])),
        Value::Date(d) => Arc::new(Date32Array::from(vec![*d; n])),
        Value::DateTime(ms) => Arc::new(Date64Array::from(vec![*ms; n])),
        Value::List(_) | Value::Vector(_) => new_null_array(&DataType::Utf8, n),
    }
}

/// Aggregate state of one group for one aggregate column.
#[derive(Clone)]
enum Acc2 {
    Count(i64),
    Sum {
        int: i128,
        float: f64,
        any: bool,
        is_float: bool,
    },
    Avg {
        sum: f64,
        n: i64,
    },
    MinMax {
        best: Option<(ArrayRef, usize)>,
        max: bool,
    },
}

fn new_acc(f: AggFunc, float: bool) -> Acc2 {
    match f {
        AggFunc::Count => Acc2::Count(0),
        AggFunc::Sum => Acc2::Sum {
            int: 0,
            float: 0.0,
            any: false,
            is_float: float,
        },
        AggFunc::Avg => Acc2::Avg { sum: 0.0, n: 0 },
        AggFunc::Min => Acc2::MinMax {
            best: None,
            max: false,
        },
        AggFunc::Max => Acc2::MinMax {
            best: None,
            max: true,
        },
    }
}

fn is_float(a: &ArrayRef) -> bool {
    matches!(a.data_type(), DataType::Float32 | DataType::Float64)
}

fn update(acc: &mut Acc2, arr: Option<&ArrayRef>, row: usize) {
    let Some(arr) = arr else {
        if let Acc2::Count(c) = acc {
            *c += 1;
        }
        return;
    };
    if arr.is_null(row) {
        return;
    }
    match acc {
        Acc2::Count(c) => *c += 1,
        Acc2::Sum {
            int, float, any, ..
        } => {
            *any = true;
            match s_at(arr, row) {
                S::I(i) => *int += i,
                S::F(f) => *float += f,
                _ => {}
            }
        }
        Acc2::Avg { sum, n } => {
            match s_at(arr, row) {
                S::I(i) => *sum += i as f64,
                S::F(f) => *sum += f,
                _ => return,
            }
            *n += 1;
        }
        Acc2::MinMax { best, max } => {
            let better = match best {
                None => true,
                Some((a, i)) => {
                    let o = cmp_s(&s_at(arr, row), &s_at(a, *i));
                    if *max {
                        o == Some(Ordering::Greater)
                    } else {
                        o == Some(Ordering::Less)
                    }
                }
            };
            if better {
                *best = Some((arr.clone(), row));
            }
        }
    }
}

fn finish_accs(accs: &[Acc2], template: Option<&ArrayRef>) -> Result<ArrayRef> {
    use arrow_array::*;
    let Some(first) = accs.first() else {
        return Ok(new_null_array(&DataType::Int64, 0));
    };
    Ok(match first {
        Acc2::Count(_) => Arc::new(Int64Array::from_iter_values(accs.iter().map(|a| match a {
            Acc2::Count(c) => *c,
            _ => 0,
        }))),
        Acc2::Sum { is_float, .. } => {
            if *is_float {
                Arc::new(Float64Array::from_iter(accs.iter().map(|a| match a {
                    Acc2::Sum {
                        float,
                        int,
                        any: true,
                        ..
                    } => Some(*float + *int as f64),
                    _ => None,
                })))
            } else {
                Arc::new(Int64Array::from_iter(accs.iter().map(|a| match a {
                    Acc2::Sum { int, any: true, .. } => i64::try_from(*int).ok(),
                    _ => None,
                })))
            }
        }
        Acc2::Avg { .. } => Arc::new(Float64Array::from_iter(accs.iter().map(|a| match a {
            Acc2::Avg { sum, n } if *n > 0 => Some(*sum / *n as f64),
            _ => None,
        }))),
        Acc2::MinMax { .. } => {
            let dt = template
                .map(|t| t.data_type().clone())
                .unwrap_or(DataType::Utf8);
            let parts: Vec<ArrayRef> = accs
                .iter()
                .map(|a| match a {
                    Acc2::MinMax {
                        best: Some((arr, i)),
                        ..
                    } => arr.slice(*i, 1),
                    _ => new_null_array(&dt, 1),
                })
                .collect();
            let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
            concat(&refs)?
        }
    })
}

/// Run a plan against a snapshot.
/// What one arm of a plan produced: per return column its values (for an
/// aggregate, its argument; `None` for `count(*)`), the tie-break columns,
/// and its row count.
struct ArmRows {
    values: Vec<Option<ArrayRef>>,
    ties: Vec<ArrayRef>,
    rows: usize,
}

/// Run one arm's operators and project what the result needs from it.
async fn arm_rows(ctx: &Ctx<'_>, arm: &Plan, ties: bool) -> Result<ArmRows> {
    let start = Frame {
        cols: vec![None; arm.vars.len()],
        rows: 1,
    };
    let frame = ctx.run_ops(arm, &arm.ops, start).await?;
    let mut values = Vec::with_capacity(arm.returns.len());
    for r in &arm.returns {
        values.push(match &r.expr {
            RetExpr::Agg { arg: Some(e), .. } => {
                Some(ctx.project(arm, &frame, &RetExpr::Val(e.clone())).await?)
            }
            RetExpr::Agg { arg: None, .. } => None,
            other => Some(ctx.project(arm, &frame, other).await?),
        });
    }
    // Rows of one node or edge differ by its id; rows of an interface
    // binding also by the concrete type (keyed ids can coincide across
    // types).
    let mut tie_cols = Vec::new();
    if ties {
        for (v, info) in arm.vars.iter().enumerate() {
            if info.name == "_" || frame.cols[v].is_none() {
                continue;
            }
            if info.interface.is_some() {
                tie_cols.push(repeat(
                    &Value::Str(var_type(arm, v).to_string()),
                    frame.rows,
                ));
            }
            tie_cols.push(
                ctx.project(arm, &frame, &RetExpr::Val(ValExpr::Id { var: v }))
                    .await?,
            );
        }
    }
    Ok(ArmRows {
        values,
        ties: tie_cols,
        rows: frame.rows,
    })
}

/// Arrays of the arms, end to end.
fn concat_all(parts: Vec<ArrayRef>) -> Result<ArrayRef> {
    if parts.len() == 1 {
        return Ok(parts.into_iter().next().expect("one part"));
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(concat(&refs)?)
}

pub async fn run(ctx: &Ctx<'_>, plan: &Plan) -> Result<QueryResult> {
    let ties = !plan.aggregate && (!plan.order.is_empty() || plan.limit.is_some());
    let mut arms = Vec::with_capacity(1 + plan.union.len());
    for arm in std::iter::once(plan).chain(&plan.union) {
        arms.push(arm_rows(ctx, arm, ties).await?);
    }
    let total_rows: usize = arms.iter().map(|a| a.rows).sum();
    let mut values: Vec<Option<ArrayRef>> = Vec::with_capacity(plan.returns.len());
    for i in 0..plan.returns.len() {
        let parts: Option<Vec<ArrayRef>> = arms.iter().map(|a| a.values[i].clone()).collect();
        values.push(parts.map(concat_all).transpose()?);
    }
    let tie_cols: Vec<ArrayRef> = (0..arms[0].ties.len())
        .map(|i| concat_all(arms.iter().map(|a| a.ties[i].clone()).collect()))
        .collect::<Result<_>>()?;

    let mut columns: Vec<ArrayRef>;
    if plan.aggregate {
        // Group keys are the non-aggregate columns.
        let mut key_cols: Vec<(usize, ArrayRef)> = Vec::new();
        let mut agg_args: Vec<(usize, Option<ArrayRef>)> = Vec::new();
        for (i, r) in plan.returns.iter().enumerate() {
            match &r.expr {
                RetExpr::Agg { .. } => agg_args.push((i, values[i].clone())),
                _ => key_cols.push((i, values[i].clone().expect("a group key has values"))),
            }
        }
        let mut groups: Vec<usize> = Vec::new(); // first row of each group
        let mut group_of = vec![0usize; total_rows];
        if key_cols.is_empty() {
            groups.push(0);
        } else {
            let fields: Vec<arrow::row::SortField> = key_cols
                .iter()
                .map(|(_, a)| arrow::row::SortField::new(a.data_type().clone()))
                .collect();
            let conv = arrow::row::RowConverter::new(fields)?;
            let arrays: Vec<ArrayRef> = key_cols.iter().map(|(_, a)| a.clone()).collect();
            let rows = conv.convert_columns(&arrays)?;
            let mut map: HashMap<arrow::row::Row<'_>, usize> = HashMap::new();
            for (r, slot) in group_of.iter_mut().enumerate() {
                *slot = *map.entry(rows.row(r)).or_insert_with(|| {
                    groups.push(r);
                    groups.len() - 1
                });
            }
        }
        let mut out_cols: Vec<Option<ArrayRef>> = vec![None; plan.returns.len()];
        for (i, a) in &key_cols {
            let idx = UInt32Array::from(groups.iter().map(|g| *g as u32).collect::<Vec<_>>());
            out_cols[*i] = Some(take(a.as_ref(), &idx, None)?);
        }
        for (i, arg) in &agg_args {
            let RetExpr::Agg { func, .. } = &plan.returns[*i].expr else {
                unreachable!()
            };
            let float = arg.as_ref().is_some_and(is_float);
            let mut accs = vec![new_acc(*func, float); groups.len()];
            for r in 0..total_rows {
                update(&mut accs[group_of[r]], arg.as_ref(), r);
            }
            out_cols[*i] = Some(finish_accs(&accs, arg.as_ref())?);
        }
        columns = out_cols
            .into_iter()
            .map(|c| c.expect("every column computed"))
            .collect();
    } else {
        columns = values
            .into_iter()
            .map(|c| c.expect("a returned column has values"))
            .collect();
    }
    let nrows = columns.first().map_or(0, |c| c.len());

    // Order: the order keys, then ids of every bound entity (or, after
    // aggregation, the visible columns) as tie-breaks.
    let mut indices: Option<UInt32Array> = None;
    if !plan.order.is_empty() || plan.limit.is_some() {
        let mut sort_cols: Vec<SortColumn> = plan
            .order
            .iter()
            .map(|o| SortColumn {
                values: columns[o.col].clone(),
                options: Some(SortOptions {
                    descending: o.desc,
                    nulls_first: !o.desc,
                }),
            })
            .collect();
        if plan.aggregate {
            for (i, r) in plan.returns.iter().enumerate() {
                if r.visible
                    && matches!(
                        columns[i].data_type(),
                        DataType::Utf8
                            | DataType::Int64
                            | DataType::Int32
                            | DataType::Float64
                            | DataType::Boolean
                            | DataType::Date32
                            | DataType::Date64
                            | DataType::UInt32
                            | DataType::UInt64
                            | DataType::Float32
                    )
                {
                    sort_cols.push(SortColumn {
                        values: columns[i].clone(),
                        options: Some(SortOptions {
                            descending: false,
                            nulls_first: true,
                        }),
                    });
                }
            }
        } else {
            for t in &tie_cols {
                sort_cols.push(SortColumn {
                    values: t.clone(),
                    options: Some(SortOptions {
                        descending: false,
                        nulls_first: true,
                    }),
                });
            }
        }
        if !sort_cols.is_empty() && nrows > 0 {
            indices = Some(lexsort_to_indices(&sort_cols, None)?);
        }
    }
    if let Some(idx) = &indices {
        columns = columns
            .iter()
            .map(|c| take(c.as_ref(), idx, None))
            .collect::<std::result::Result<_, _>>()?;
    }
    if let Some(l) = plan.limit {
        columns = columns
            .iter()
            .map(|c| c.slice(0, (l as usize).min(c.len())))
            .collect();
    }
    let mut fields = Vec::new();
    let mut arrays = Vec::new();
    let mut names = Vec::new();
    for (r, c) in plan.returns.iter().zip(columns) {
        if r.visible {
            fields.push(Field::new(&r.name, c.data_type().clone(), true));
            names.push(r.name.clone());
            arrays.push(c);
        }
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = if arrays.is_empty() {
        RecordBatch::new_empty(schema)
    } else {
        RecordBatch::try_new(schema, arrays)?
    };
    Ok(QueryResult {
        query: plan.name.clone(),
        branch: ctx.snap.branch.clone(),
        graph_commit_id: ctx.snap.record.head.clone(),
        manifest_version: ctx.snap.manifest.version,
        columns: names,
        batches: vec![batch],
    })
}

/// Parameter JSON -> typed values, checked against the plan's declarations.
pub fn bind_params(plan: &Plan, json: &serde_json::Value) -> Result<BTreeMap<String, Value>> {
    bind(&plan.name, &plan.params, json)
}

/// Parameter JSON -> typed values, checked against declarations
/// `(name, type, optional)` of the query `query`.
pub fn bind(
    query: &str,
    params: &[(String, PropType, bool)],
    json: &serde_json::Value,
) -> Result<BTreeMap<String, Value>> {
    use crate::compiler::lexer::Pos;
    use crate::compiler::query::check::{Code, type_error};
    let obj = match json {
        serde_json::Value::Null => serde_json::Map::new(),
        serde_json::Value::Object(m) => m.clone(),
        _ => return Err(OmniError::BadRequest("parameters are a JSON object".into())),
    };
    for k in obj.keys() {
        if !params.iter().any(|(n, _, _)| n == k) {
            return Err(type_error(
                Code::Parameter,
                Pos::default(),
                format!("'{query}' takes no parameter ${k}"),
            ));
        }
    }
    let mut out = BTreeMap::new();
    for (name, ty, optional) in params {
        match obj.get(name) {
            None | Some(serde_json::Value::Null) => {
                if !optional {
                    return Err(type_error(
                        Code::MissingParameter,
                        Pos::default(),
                        format!("missing parameter ${name} ({})", ty.describe()),
                    ));
                }
            }
            Some(v) => {
                let val = json_value(ty, v).ok_or_else(|| {
                    type_error(
                        Code::ParameterValue,
                        Pos::default(),
                        format!("parameter ${name} expects {}, got {v}", ty.describe()),
                    )
                })?;
                out.insert(name.clone(), val);
            }
        }
    }
    Ok(out)
}

fn json_value(ty: &PropType, v: &serde_json::Value) -> Option<Value> {
    use crate::util::dates::{days_from_date, ms_from_datetime};
    Some(match ty {
        PropType::String | PropType::Enum(_) => Value::Str(v.as_str()?.to_string()),
        PropType::Bool => Value::Bool(v.as_bool()?),
        PropType::I32 => Value::Int(i32::try_from(v.as_i64()?).ok()? as i64),
        PropType::I64 => Value::Int(v.as_i64()?),
        PropType::U32 => Value::Int(u32::try_from(v.as_u64()?).ok()? as i64),
        PropType::U64 => match v.as_u64()? {
            u if u <= i64::MAX as u64 => Value::Int(u as i64),
            u => Value::UInt(u),
        },
        PropType::F32 | PropType::F64 => Value::Float(v.as_f64()?),
        PropType::Date => match v {
            serde_json::Value::String(s) => Value::Date(days_from_date(s)?),
            other => Value::Date(i32::try_from(other.as_i64()?).ok()?),
        },
        PropType::DateTime => match v {
            serde_json::Value::String(s) => Value::DateTime(ms_from_datetime(s)?),
            other => Value::DateTime(other.as_i64()?),
        },
        PropType::List(inner) => Value::List(
            v.as_array()?
                .iter()
                .map(|x| json_value(inner, x))
                .collect::<Option<_>>()?,
        ),
        PropType::Vector(n) => {
            let a = v.as_array()?;
            if a.len() != *n as usize {
                return None;
            }
            Value::Vector(
                a.iter()
                    .map(|x| x.as_f64().map(|f| f as f32))
                    .collect::<Option<_>>()?,
            )
        }
        PropType::Blob => return None,
    })
}
