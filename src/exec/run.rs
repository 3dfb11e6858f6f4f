//! Runs a [`Plan`] over one snapshot: the operators of each arm (one
//! module per operator), their rows projected and unioned, then aggregated,
//! ordered and limited. The frame holds one column of row
//! positions per variable (a node's dense index in its table, or an edge's
//! row); properties are read from cached whole columns by position.
//! NodeScan pushes typed filters into Lance; traversal uses the cached
//! CSR/CSC graph index of each traversed edge type.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering as AtomicOrdering;

use arrow::compute::concat;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::{Field, Schema};

use super::aggregate::aggregate;
use super::antijoin::anti_degree_test;
use super::cache::{Key, Phys, RuntimeCache};
use super::carry::WarmIds;
use super::order::order_and_limit;
use super::project::repeat;
use super::residency::{self, Decision, Reach};
use crate::compiler::catalog::{ID, TypeDef};
use crate::compiler::query::ir::{Op, Plan, Pred, RetExpr, ValExpr, VarKind};
use crate::compiler::value::Value;
use crate::error::Result;
use crate::storage::scan::{self};
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
    /// What each search function did, in the order it ran.
    pub search: Vec<super::search::SearchStep>,
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
    pub params: &'a BTreeMap<String, Value<'static>>,
    pub now_ms: i64,
    /// How text queries of `nearest` are embedded.
    pub embed: &'a super::embed::EmbedConfig,
    /// What the search functions did (reported with the result).
    pub search: parking_lot::Mutex<Vec<super::search::SearchStep>>,
    /// The one node type a point read fetched just its matching rows of.
    pub point: std::sync::OnceLock<super::point::PointView>,
    /// Which adjacency each traversal read, in order (edge type, source).
    pub graphs: parking_lot::Mutex<Vec<(String, super::graph::Source)>>,
    /// Where this query read each node type's ids and columns from.
    pub reads: super::residency::QueryReads,
    /// Set for a profiled run: what each operator produced and took.
    pub profile: Option<&'a super::explain::Profile>,
}

#[derive(Clone)]
pub(super) struct Frame {
    /// Per variable: row positions (dense node index or edge row).
    pub(super) cols: Vec<Option<Vec<u32>>>,
    pub(super) rows: usize,
}

impl Frame {
    pub(super) fn take_rows(&self, keep: &[usize]) -> Frame {
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

impl Ctx<'_> {
    pub(super) fn def(&self, name: &str) -> &TypeDef {
        self.snap.catalog().get(name).expect("checked types exist")
    }

    pub(super) fn phys(&self, t: &TypeDef) -> Result<Phys> {
        Ok(Phys::of(self.g.store.uri(), self.snap.table(t)?))
    }

    /// How this run reads `column` (or the ids, [`ID`]) of a node type for
    /// `rows` rows, `held` saying whether this process holds it already
    /// (`residency`). Counts the run as one that read the version cold.
    pub(super) fn reach(
        &self,
        type_name: &str,
        column: &str,
        held: bool,
        rows: usize,
    ) -> Result<Decision> {
        let d = self.decide(type_name, held, rows, true)?;
        self.reads
            .log
            .lock()
            .push((type_name.to_string(), column.to_string(), d));
        Ok(d)
    }

    /// [`Self::reach`] as a run would decide it now, counting nothing (for
    /// `--explain`).
    pub(super) fn peek_reach(&self, type_name: &str, held: bool, rows: usize) -> Result<Decision> {
        self.decide(type_name, held, rows, false)
    }

    fn decide(&self, type_name: &str, held: bool, rows: usize, count: bool) -> Result<Decision> {
        let earlier = match held {
            true => 0,
            false => {
                let phys = self.phys(self.def(type_name))?;
                self.reads.earlier(self.cache, &phys, count)
            }
        };
        Ok(residency::decide(held, earlier, rows))
    }

    pub async fn node_ids(&self, type_name: &str) -> Result<Arc<IdIndex>> {
        if let Some(p) = self.point.get().filter(|p| p.type_name == type_name) {
            return Ok(p.ids.clone());
        }
        let t = self.def(type_name);
        let key = Key::Ids(self.phys(t)?);
        if let Some(v) = self.cache.get::<IdIndex>(&key) {
            return Ok(v);
        }
        let _making = self.cache.making(&key).await;
        if let Some(v) = self.cache.get::<IdIndex>(&key) {
            return Ok(v);
        }
        let ids = match self.carried_ids(t).await? {
            Some((d, base)) => {
                let whole = d.whole(ID, &super::carry::ids_column(&base))?;
                whole.as_string::<i32>().clone()
            }
            None => IdIndex::concat(&self.scan_strings(t, ID).await?)?,
        };
        let v = Arc::new(IdIndex::new(ids));
        self.cache.put(key, v.clone(), v.bytes());
        self.remember_node_base(t, ID).await?;
        Ok(v)
    }

    /// Read the whole columns the returns will read, at once: decoding
    /// them is CPU work that runs on every core instead of one after
    /// another. Only columns read whole (many rows) and not cached.
    async fn prefetch_columns(&self, plan: &Plan, frame: &Frame) -> Result<()> {
        let mut wanted: Vec<(&str, &str)> = Vec::new();
        for r in &plan.returns {
            let e = match &r.expr {
                RetExpr::Val(e) | RetExpr::Agg { arg: Some(e), .. } => e,
                _ => continue,
            };
            let ValExpr::Prop { var, prop, .. } = e else {
                continue;
            };
            let rows = frame.cols[*var].as_ref().map_or(0, Vec::len);
            let t = var_type(plan, *var);
            let point = self.point.get().is_some_and(|p| p.type_name == t);
            if rows > residency::ROWS_MAX && !point && !wanted.contains(&(t, prop.as_str())) {
                wanted.push((t, prop));
            }
        }
        if wanted.len() > 1 {
            futures::future::try_join_all(wanted.iter().map(|(t, c)| self.column(t, c))).await?;
        }
        Ok(())
    }

    /// How many nodes a type has at this snapshot, without reading them.
    pub(super) async fn node_count(&self, type_name: &str) -> Result<usize> {
        if let Some(p) = self.point.get().filter(|p| p.type_name == type_name) {
            return Ok(p.ids.len());
        }
        let t = self.def(type_name);
        if let Some(v) = self.cache.get::<IdIndex>(&Key::Ids(self.phys(t)?)) {
            return Ok(v.len());
        }
        // The layout counts the rows without reading any (a carry would
        // read the appended ones).
        Ok(crate::index::coverage::rows(&self.layout(type_name).await?))
    }

    /// The dense positions of some ids of a node type (`None`: no such
    /// node): from the id index this process holds, or (`residency`) by
    /// looking the few ids up in storage (through the `id` BTREE once
    /// `optimize` built it), or by reading the whole id column into an id
    /// index it then keeps.
    pub(super) async fn positions(
        &self,
        type_name: &str,
        ids: &[&str],
    ) -> Result<Vec<Option<u32>>> {
        let t = self.def(type_name);
        if let Some(p) = self.point.get().filter(|p| p.type_name == type_name) {
            return Ok(ids.iter().map(|id| p.ids.get(id)).collect());
        }
        if let Some(w) = self.warm_ids(t).await? {
            if let WarmIds::Carried(d, _) = &w {
                self.log_carried(type_name, ID, d);
            }
            return Ok(ids.iter().map(|id| w.position(id)).collect());
        }
        if self.reach(type_name, ID, false, ids.len())?.reach == Reach::Whole {
            let v = self.node_ids(type_name).await?;
            return Ok(ids.iter().map(|id| v.get(id)).collect());
        }
        let mut wanted: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let t0 = std::time::Instant::now();
        let table = self.g.read_table(self.snap, t).await?;
        let layout = self.layout(type_name).await?;
        let mut at = std::collections::HashMap::new();
        let found = table.addresses_of(ID, &wanted).await?;
        tracing::debug!(
            type_name,
            ids = wanted.len(),
            ms = t0.elapsed().as_millis() as u64,
            "ids looked up through the id index"
        );
        for (id, addr) in found {
            let p = crate::index::coverage::position(&layout, addr >> 32, addr as u32);
            if let Some(p) = p {
                at.entry(id).or_insert(p);
            }
        }
        Ok(ids.iter().map(|id| at.get(*id).copied()).collect())
    }

    pub(super) async fn scan_strings(&self, t: &TypeDef, column: &str) -> Result<Vec<StringArray>> {
        let ds = self.g.read_table(self.snap, t).await?;
        stage::scan_strings(&ds, column).await
    }

    /// A whole column of a type's table at this snapshot, in scan order.
    pub async fn column(&self, type_name: &str, column: &str) -> Result<ArrayRef> {
        if let Some(p) = self.point.get().filter(|p| p.type_name == type_name) {
            return p.rows.column_by_name(column).cloned().ok_or_else(|| {
                crate::error::OmniError::Storage(format!("a point read has no column {column}"))
            });
        }
        let t = self.def(type_name);
        let key = Key::Column(self.phys(t)?, column.to_string());
        if let Some(v) = self.cache.get::<ArrayRef>(&key) {
            return Ok((*v).clone());
        }
        let _making = self.cache.making(&key).await;
        if let Some(v) = self.cache.get::<ArrayRef>(&key) {
            return Ok((*v).clone());
        }
        let arr = match self.carried_column(t, column).await? {
            Some((d, base)) => d.whole(column, &base)?,
            None => {
                let ds = self.g.read_table(self.snap, t).await?;
                let arr = scan::column(&ds, column).await?;
                self.cache
                    .stats
                    .column_loads
                    .fetch_add(1, AtomicOrdering::Relaxed);
                arr
            }
        };
        let bytes = arr.get_array_memory_size();
        self.cache.put(key, Arc::new(arr.clone()), bytes);
        if !t.is_edge() {
            self.remember_node_base(t, column).await?;
        }
        Ok(arr)
    }

    pub(super) fn param(&self, name: &str) -> Option<&Value<'static>> {
        self.params.get(name)
    }

    /// A predicate that reads an absent optional parameter is dropped.
    pub(super) fn active(&self, p: &Pred) -> bool {
        [&p.left, &p.right].iter().all(|e| match e {
            ValExpr::Param { name } => self.param(name).is_some(),
            _ => true,
        })
    }

    pub(super) fn const_of(&self, e: &ValExpr) -> Option<Value<'static>> {
        match e {
            ValExpr::Const(v) => Some(v.clone()),
            ValExpr::Param { name } => self.param(name).cloned(),
            ValExpr::Now => Some(Value::DateTime(self.now_ms)),
            _ => None,
        }
    }

    /// The property source of one side for rows of `var`'s type.
    pub(super) async fn var_source(
        &self,
        type_name: &str,
        e: &ValExpr,
    ) -> Result<Option<ArrayRef>> {
        Ok(match e {
            ValExpr::Prop { prop, .. } => Some(self.column(type_name, prop).await?),
            ValExpr::Id { .. } => {
                Some(Arc::new(self.node_or_edge_ids(type_name).await?) as ArrayRef)
            }
            _ => None,
        })
    }

    pub(super) async fn node_or_edge_ids(&self, type_name: &str) -> Result<StringArray> {
        if self.def(type_name).is_edge() {
            let a = self.column(type_name, ID).await?;
            Ok(a.as_string::<i32>().clone())
        } else {
            Ok(self.node_ids(type_name).await?.ids.clone())
        }
    }
}

pub(super) fn var_type(plan: &Plan, var: usize) -> &str {
    match &plan.vars[var].kind {
        VarKind::Node(t) | VarKind::Edge(t) => t,
    }
}

impl Ctx<'_> {
    pub(super) fn run_ops<'b>(
        &'b self,
        plan: &'b Plan,
        ops: &'b [Op],
        frame: Frame,
    ) -> futures::future::BoxFuture<'b, Result<Frame>> {
        Box::pin(async move {
            let mut frame = frame;
            for op in ops {
                if frame.rows == 0 {
                    // Nothing left to match: the variables later operators
                    // would bind are bound to no rows, so the returns
                    // project an empty answer.
                    for c in frame.cols.iter_mut() {
                        c.get_or_insert_with(Vec::new);
                    }
                    break;
                }
                let started = std::time::Instant::now();
                frame = self.run_op(plan, op, frame).await?;
                if let Some(p) = self.profile {
                    p.record(op, frame.rows, started);
                }
            }
            Ok(frame)
        })
    }

    async fn run_op(&self, plan: &Plan, op: &Op, frame: Frame) -> Result<Frame> {
        match op {
            Op::NodeScan { .. } => self.node_scan(plan, op, frame).await,
            Op::Expand { .. } => self.expand(plan, op, frame).await,
            Op::ExpandEdge { .. } => self.expand_edge(plan, op, frame).await,
            Op::Filter(p) => self.filter(plan, p, frame).await,
            Op::TextFilter { .. } => self.text_filter(plan, op, frame).await,
            Op::AntiJoin(inner) => match anti_degree_test(inner) {
                Some(test) => self.anti_degree(test, frame).await,
                None => self.anti_join(plan, inner, frame).await,
            },
        }
    }
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
    ctx.prefetch_columns(arm, &frame).await?;
    let (frame, mut scored) = ctx.scored_frame(arm, frame).await?;
    let mut values = Vec::with_capacity(arm.returns.len());
    for (i, r) in arm.returns.iter().enumerate() {
        if let Some(s) = scored[i].take() {
            values.push(Some(s));
            continue;
        }
        values.push(match &r.expr {
            RetExpr::Agg { arg: Some(e), .. } => {
                Some(ctx.project(arm, &frame, &RetExpr::Val(e.clone())).await?)
            }
            RetExpr::Agg { arg: None, .. } | RetExpr::Fused { .. } => None,
            RetExpr::Score(_) => Some(ctx.score(arm, &frame, i).await?),
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
                    &Value::Str(var_type(arm, v).to_string().into()),
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
    if let Some(view) = super::point::view(ctx, plan).await? {
        let _ = ctx.point.set(view);
    }
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
    let (values, tie_cols) = super::search::scored_rows(ctx, plan, values, tie_cols)?;

    let columns = if plan.aggregate {
        aggregate(plan, values, total_rows)?
    } else {
        values
            .into_iter()
            .map(|c| c.expect("a returned column has values"))
            .collect()
    };
    let columns = order_and_limit(plan, columns, &tie_cols)?;
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
        search: std::mem::take(&mut *ctx.search.lock()),
    })
}
