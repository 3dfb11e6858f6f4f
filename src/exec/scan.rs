//! Node scans and filters: a binding's candidates (an id lookup, a typed
//! filter pushed into storage, or every node), single-variable predicates
//! on candidates, and a filter over the frame's rows.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use futures::TryStreamExt;

use super::run::{Ctx, Frame, var_type};
use std::borrow::Cow;

use crate::compiler::catalog::{ID, PropType};
use crate::compiler::query::ast::CmpOp;
use crate::compiler::query::ir::{Op, Plan, Pred, ValExpr};
use crate::compiler::value::Value;
use crate::compiler::value::{self, holds};
use crate::error::Result;
use crate::storage::scan::{self, Filter};
use crate::storage::stage;

/// From this many candidates a comparison with a constant runs over the
/// whole cached column (Arrow's kernel) instead of row by row.
const COLUMN_FILTER_FROM: usize = 256;

impl Ctx<'_> {
    pub(super) async fn scan_candidates(
        &self,
        type_name: &str,
        filters: &[Pred],
    ) -> Result<Vec<u32>> {
        let t = self.def(type_name);
        let active: Vec<&Pred> = filters.iter().filter(|p| self.active(p)).collect();
        // A key (or id) equality is a lookup, not a scan.
        let key_eq = super::point::key_lookup(self, t, &active);
        let (mut cands, rest): (Vec<u32>, Vec<Pred>) = if let Some((i, key)) = key_eq {
            let found = match key {
                Some(k) => self.positions(type_name, &[&k]).await?[0],
                None => None,
            }
            .into_iter()
            .collect();
            let rest = active
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| (*p).clone())
                .collect();
            (found, rest)
        } else {
            // The first scan of a table version pushes its filters to
            // storage; once the version is warm (its ids held or carried),
            // filters read cached columns, which is cheaper than another
            // storage scan.
            let warm = !active.is_empty() && self.ids_warm(t).await?;
            let stored = |p: &&Pred| !(warm && in_memory(p)) && pushdown(self, p).is_some();
            let pushed: Vec<Filter> = active
                .iter()
                .filter(|p| stored(p))
                .filter_map(|p| pushdown(self, p))
                .collect();
            if let Some(filter) = Filter::all(pushed) {
                let rest = active
                    .iter()
                    .filter(|p| !stored(p))
                    .map(|p| (*p).clone())
                    .collect();
                let ids = self.node_ids(type_name).await?;
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
                    (0..self.node_count(type_name).await? as u32).collect(),
                    active.into_iter().cloned().collect(),
                )
            }
        };
        cands = self.filter_candidates(type_name, &rest, cands).await?;
        Ok(cands)
    }

    /// Evaluate single-variable predicates on candidate rows of one type.
    pub(super) async fn filter_candidates(
        &self,
        type_name: &str,
        preds: &[Pred],
        mut cands: Vec<u32>,
    ) -> Result<Vec<u32>> {
        for p in preds.iter().filter(|p| self.active(p)) {
            // Many candidates: compare the whole cached column at once.
            if cands.len() >= COLUMN_FILTER_FROM
                && let Some(mask) = self.column_mask(type_name, p).await?
            {
                cands.retain(|&c| mask.is_valid(c as usize) && mask.value(c as usize));
                continue;
            }
            let l = self.side(type_name, &p.left).await?;
            let r = self.side(type_name, &p.right).await?;
            cands.retain(|&c| holds(p.op, &l.at(0, c), &r.at(0, c)));
        }
        Ok(cands)
    }

    /// `column op constant` over every row of a cached column, as Arrow's
    /// comparison kernel computes it, where that is exactly what
    /// [`holds`] would say row by row (a null is never a match): integer,
    /// string, enum, boolean and date columns against a constant of their
    /// own kind. `None`: evaluate row by row. (Floats are left out: the
    /// kernel orders NaN, `holds` does not.)
    async fn column_mask(
        &self,
        type_name: &str,
        p: &Pred,
    ) -> Result<Option<arrow_array::BooleanArray>> {
        use arrow::compute::kernels::cmp;
        use arrow_array::{Datum, Scalar};
        let Some((prop, ty, other, op)) = property_vs(p) else {
            return Ok(None);
        };
        if matches!(ty, PropType::F32 | PropType::F64) {
            return Ok(None);
        }
        let Some(one) = self.const_of(other).and_then(|c| scan::constant(ty, &c)) else {
            return Ok(None);
        };
        let col = self.column(type_name, prop).await?;
        if col.data_type() != one.data_type() {
            return Ok(None);
        }
        let rhs = Scalar::new(one);
        let lhs: &dyn Datum = &col;
        Ok(Some(match op {
            CmpOp::Eq => cmp::eq(lhs, &rhs)?,
            CmpOp::Ne => cmp::neq(lhs, &rhs)?,
            CmpOp::Lt => cmp::lt(lhs, &rhs)?,
            CmpOp::Le => cmp::lt_eq(lhs, &rhs)?,
            CmpOp::Gt => cmp::gt(lhs, &rhs)?,
            CmpOp::Ge => cmp::gt_eq(lhs, &rhs)?,
            CmpOp::Contains | CmpOp::StartsWith => return Ok(None),
        }))
    }

    pub(super) async fn side(&self, type_name: &str, e: &ValExpr) -> Result<Acc<'static>> {
        Ok(match self.var_source(type_name, e).await? {
            Some(arr) => Acc::Cand { arr },
            None => Acc::Const(self.const_of(e).unwrap_or(Value::Null)),
        })
    }

    pub(super) async fn acc<'f>(
        &self,
        plan: &Plan,
        frame: &'f Frame,
        e: &ValExpr,
    ) -> Result<Acc<'f>> {
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

    /// `$x: T`: the cross product of the rows so far with the candidates.
    pub(super) async fn node_scan(&self, plan: &Plan, op: &Op, frame: Frame) -> Result<Frame> {
        let Op::NodeScan {
            var,
            type_name,
            filters,
        } = op
        else {
            unreachable!("node_scan runs Op::NodeScan")
        };
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
        // The usual first scan (one empty row) takes the candidates as
        // they are: at s1m a copy through `flat_map` was a millisecond.
        out.cols[*var] = Some(if frame.rows == 1 {
            cands
        } else {
            cands.repeat(frame.rows)
        });
        Ok(out)
    }

    /// A filter over the frame's rows.
    pub(super) async fn filter(&self, plan: &Plan, p: &Pred, frame: Frame) -> Result<Frame> {
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
}

/// A value source prepared for per-row reads.
pub(super) enum Acc<'f> {
    Col {
        arr: ArrayRef,
        idx: &'f [u32],
    },
    /// The single row a NodeScan/Expand candidate is (index given at read).
    Cand {
        arr: ArrayRef,
    },
    Const(Value<'static>),
}

impl Acc<'_> {
    fn at(&self, row: usize, cand: u32) -> Cow<'_, Value<'_>> {
        match self {
            Acc::Col { arr, idx } => Cow::Owned(value::at(arr, idx[row] as usize)),
            Acc::Cand { arr } => Cow::Owned(value::at(arr, cand as usize)),
            Acc::Const(v) => Cow::Borrowed(v),
        }
    }
}

/// Does memory evaluate `p` as storage would? Not on an F32 property:
/// storage compares those in f32, memory in f64.
pub(super) fn in_memory(p: &Pred) -> bool {
    !matches!(
        (&p.left, &p.right),
        (
            ValExpr::Prop {
                ty: PropType::F32,
                ..
            },
            _
        ) | (
            _,
            ValExpr::Prop {
                ty: PropType::F32,
                ..
            }
        )
    )
}

/// A predicate as a typed Lance filter, when it is a property compared with
/// a constant.
pub(super) fn pushdown(ctx: &Ctx, p: &Pred) -> Option<Filter> {
    let (prop, ty, other, op) = property_vs(p)?;
    Filter::compare(prop, ty, op, &ctx.const_of(other)?)
}

/// `p` read as `property op expression`, the comparison flipped when the
/// property is on the right (`None` when neither side is a property, or
/// the property is the right side of `contains` or `starts_with`).
pub(super) fn property_vs(p: &Pred) -> Option<(&str, &PropType, &ValExpr, CmpOp)> {
    match (&p.left, &p.right) {
        (ValExpr::Prop { prop, ty, .. }, other) => Some((prop, ty, other, p.op)),
        (other, ValExpr::Prop { prop, ty, .. }) => {
            let flipped = match p.op {
                CmpOp::Lt => CmpOp::Gt,
                CmpOp::Le => CmpOp::Ge,
                CmpOp::Gt => CmpOp::Lt,
                CmpOp::Ge => CmpOp::Le,
                CmpOp::Eq | CmpOp::Ne => p.op,
                CmpOp::Contains | CmpOp::StartsWith => return None,
            };
            Some((prop, ty, other, flipped))
        }
        _ => None,
    }
}
