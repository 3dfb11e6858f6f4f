//! Point reads. A query that reaches a node type only through one key (or
//! id) equality, and whose type is cold in this process, reads just the
//! matching rows from storage (through the persisted id order when
//! `optimize` wrote one for exactly the table's rows, else the `id` BTREE
//! when it built one) instead of the type's whole id column and every
//! property column it returns. The executor then runs unchanged over a
//! view of the type that holds only those rows; nothing of the view enters
//! the cache.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow_array::RecordBatch;

use super::residency::Reach;
use super::run::Ctx;
use crate::compiler::catalog::{ID, TypeDef};
use crate::compiler::query::ast::CmpOp;
use crate::compiler::query::ir::{Op, Plan, Pred, RetExpr, ValExpr};
use crate::error::Result;
use crate::index::coverage::{self, Layout};
use crate::index::id_file::{self, IdOrderRef};
use crate::storage::scan::{self, Filter};
use crate::storage::stage;
use crate::storage::tables::Table;
use crate::util::idindex::IdIndex;

/// One node type as a point read sees it: the rows its key matched.
pub struct PointView {
    pub type_name: String,
    pub ids: Arc<IdIndex>,
    pub rows: RecordBatch,
}

/// The position in `filters` of a key (or id) equality with a constant,
/// and the id it names: a lookup, not a scan.
pub(super) fn key_lookup(
    ctx: &Ctx<'_>,
    t: &TypeDef,
    filters: &[&Pred],
) -> Option<(usize, Option<String>)> {
    filters.iter().enumerate().find_map(|(i, p)| {
        if p.op != CmpOp::Eq {
            return None;
        }
        let other = match (&p.left, &p.right) {
            (ValExpr::Prop { prop, .. }, o) | (o, ValExpr::Prop { prop, .. })
                if t.key.len() == 1 && t.key[0] == *prop =>
            {
                o
            }
            (ValExpr::Id { .. }, o) | (o, ValExpr::Id { .. }) => o,
            _ => return None,
        };
        let c = ctx.const_of(other)?;
        Some((i, c.key_part()))
    })
}

/// The table version's id order record, and the version's layout, when a
/// point read may use the file: the graph is on local disk (on object
/// storage the file would be fetched whole for one lookup, where the BTREE
/// reads a page or two) and the record names exactly the version's rows.
pub(super) async fn usable_id_order(
    ctx: &Ctx<'_>,
    table: &Table,
) -> Result<Option<(IdOrderRef, Layout)>> {
    if !ctx.g.store.is_local() {
        return Ok(None);
    }
    let Some(r) = table.id_order()? else {
        return Ok(None);
    };
    let layout = table.layout().await?;
    Ok((r.rows == coverage::rows_digest(&layout)).then_some((r, layout)))
}

/// The row of `id` found through the table version's persisted id order
/// ([`usable_id_order`]): a binary search in the mapped file, then that one
/// row read. `None` (read it through the BTREE instead) when there is no
/// usable file, it cannot be read, it does not hold `id`, or the row it
/// points at holds another id: the file is never trusted for a row it
/// cannot show.
async fn by_id_order(
    ctx: &Ctx<'_>,
    table: &Table,
    id: &str,
    cols: &[&str],
) -> Result<Option<RecordBatch>> {
    let Some((r, layout)) = usable_id_order(ctx, table).await? else {
        return Ok(None);
    };
    let Some(map) = ctx.g.store.map(&r.file).await? else {
        return Ok(None);
    };
    let position = match id_file::decode(map, &r.file) {
        Ok((order, built)) if built == layout => order.position_guarded(id),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("{e}; the id BTREE answers instead");
            None
        }
    };
    let Some(p) = position else {
        return Ok(None);
    };
    let row = table.take_columns(&[p], cols).await?;
    let found = stage::string_column(&row, ID)?;
    if row.num_rows() != 1 || found.value(0) != id {
        tracing::warn!(
            "id order {} points {id} at a row of another id; the id BTREE answers instead",
            r.file
        );
        return Ok(None);
    }
    ctx.cache
        .stats
        .id_order_reads
        .fetch_add(1, Ordering::Relaxed);
    Ok(Some(row))
}

fn reads_only(e: &ValExpr, var: usize) -> bool {
    e.var().is_none_or(|v| v == var)
}

/// The view a plan of this shape runs on: one arm that scans one node
/// variable by its key, filters it, and returns only its own values.
pub(super) async fn view(ctx: &Ctx<'_>, plan: &Plan) -> Result<Option<PointView>> {
    let [
        Op::NodeScan {
            var,
            type_name,
            filters,
        },
        rest @ ..,
    ] = plan.ops.as_slice()
    else {
        return Ok(None);
    };
    let var = *var;
    let only_filters = rest.iter().all(
        |op| matches!(op, Op::Filter(p) if reads_only(&p.left, var) && reads_only(&p.right, var)),
    );
    let own_returns = plan.returns.iter().all(|r| match &r.expr {
        RetExpr::Val(v) => reads_only(v, var),
        RetExpr::Node { var: v } => *v == var,
        RetExpr::Agg { arg, node_var, .. } => {
            arg.as_ref().is_none_or(|a| reads_only(a, var)) && node_var.is_none_or(|v| v == var)
        }
        RetExpr::Score(_) | RetExpr::Fused { .. } => false,
    });
    if !plan.union.is_empty() || !only_filters || !own_returns {
        return Ok(None);
    }
    let t = ctx.def(type_name);
    if t.is_edge() {
        return Ok(None);
    }
    let active: Vec<&Pred> = filters.iter().filter(|p| ctx.active(p)).collect();
    let Some((_, id)) = key_lookup(ctx, t, &active) else {
        return Ok(None);
    };
    // A version this process holds, or read cold before, is read (or
    // loaded) whole instead: the workload repeats.
    if ctx.reach(type_name, ID, ctx.ids_warm(t).await?, 1)?.reach != Reach::Rows {
        return Ok(None);
    }
    let cols = t.row_columns();
    let table = ctx.g.read_table(ctx.snap, t).await?;
    let batches = match id {
        Some(id) => match by_id_order(ctx, &table, &id, &cols).await? {
            Some(row) => vec![row],
            None => {
                let only = Filter::AnyOf {
                    column: ID.to_string(),
                    values: vec![id],
                };
                scan::scan(&table, &cols, Some(&only)).await?
            }
        },
        None => Vec::new(),
    };
    let rows = match batches.first() {
        Some(b) => arrow::compute::concat_batches(&b.schema(), &batches)?,
        None => scan::empty(&table, &cols)?,
    };
    let ids = IdIndex::from_parts(&[stage::string_column(&rows, ID)?.clone()])?;
    Ok(Some(PointView {
        type_name: type_name.clone(),
        ids: Arc::new(ids),
        rows,
    }))
}
