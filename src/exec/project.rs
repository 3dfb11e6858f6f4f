//! Projection: one output column per return expression, read by position
//! from cached whole columns, or (a few rows of a cold type) from just
//! those rows in storage.

use std::sync::Arc;

use arrow::compute::take;
use arrow_array::{Array, ArrayRef, UInt32Array};
use arrow_schema::{DataType, Field};

use super::cache::Key;
use super::carry::{WarmIds, ids_column};
use super::residency::Reach;
use super::run::{Ctx, Frame, var_type};
use crate::compiler::catalog::{ID, PropType};
use crate::compiler::query::ir::{Plan, RetExpr, ValExpr};
use crate::compiler::value::Value;
use crate::error::Result;

impl Ctx<'_> {
    /// One output column for the frame's rows.
    pub(super) async fn project(
        &self,
        plan: &Plan,
        frame: &Frame,
        e: &RetExpr,
    ) -> Result<ArrayRef> {
        let at = |var: usize| frame.cols[var].as_deref().expect("bound");
        Ok(match e {
            RetExpr::Val(ValExpr::Prop { var, prop, .. }) => {
                self.column_at(var_type(plan, *var), prop, at(*var)).await?
            }
            RetExpr::Val(ValExpr::Id { var }) => {
                self.ids_at(var_type(plan, *var), at(*var)).await?
            }
            RetExpr::Score(_) => unreachable!("a score needs its return's place (run.rs)"),
            RetExpr::Fused { .. } => unreachable!("a fusion ranks the whole result (run.rs)"),
            RetExpr::Val(other) => repeat(&self.const_of(other).unwrap_or(Value::Null), frame.rows),
            RetExpr::Node { var } => {
                let t = self.def(var_type(plan, *var));
                let indices = at(*var);
                let mut fields = vec![Field::new(ID, DataType::Utf8, false)];
                let mut arrays = vec![self.ids_at(&t.name, indices).await?];
                // Through an interface, the node shows the interface's
                // properties, in its order: every arm then has one shape.
                let props: Vec<&crate::compiler::catalog::PropDef> =
                    match &plan.vars[*var].interface {
                        Some(i) => self
                            .snap
                            .catalog()
                            .interfaces
                            .iter()
                            .find(|d| &d.name == i)
                            .map(|d| d.properties.iter().collect())
                            .unwrap_or_default(),
                        None => t.properties.iter().collect(),
                    };
                for p in props.into_iter().filter(|p| p.ty != PropType::Blob) {
                    let arr = self.column_at(&t.name, &p.name, indices).await?;
                    fields.push(Field::new(&p.name, arr.data_type().clone(), true));
                    arrays.push(arr);
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

    /// The ids at `rows`: from a warm node type's id index, else read as
    /// any column.
    async fn ids_at(&self, type_name: &str, rows: &[u32]) -> Result<ArrayRef> {
        let t = self.def(type_name);
        let point = self.point.get().is_some_and(|p| p.type_name == type_name);
        if t.is_edge() {
            return self.column_at(type_name, ID, rows).await;
        }
        if point {
            let ids = self.node_ids(type_name).await?;
            return take_at(&ids_column(&ids), rows);
        }
        match self.warm_ids(t).await? {
            Some(WarmIds::Held(v)) => take_at(&ids_column(&v), rows),
            Some(WarmIds::Carried(d, base)) => {
                self.log_carried(type_name, ID, &d);
                d.take(ID, &ids_column(&base), rows)
            }
            None => self.column_at(type_name, ID, rows).await,
        }
    }

    /// A column's values at `rows` (positions in scan order). From the
    /// cached column when this process holds it (or a point read's rows);
    /// else, as `residency` decides, just those rows from storage, or the
    /// whole column, read, cached and taken from.
    pub(super) async fn column_at(
        &self,
        type_name: &str,
        column: &str,
        rows: &[u32],
    ) -> Result<ArrayRef> {
        let point = self.point.get().is_some_and(|p| p.type_name == type_name);
        let t = self.def(type_name);
        let key = Key::Column(self.phys(t)?, column.to_string());
        // A point read's view holds its columns: its ids' decision was the
        // read's.
        let held = self.cache.get::<ArrayRef>(&key).is_some();
        if !point
            && !held
            && !t.is_edge()
            && let Some((d, base)) = self.carried_column(t, column).await?
        {
            self.log_carried(type_name, column, &d);
            return d.take(column, &base, rows);
        }
        if point || self.reach(type_name, column, held, rows.len())?.reach != Reach::Rows {
            return take_at(&self.column(type_name, column).await?, rows);
        }
        let mut wanted: Vec<u32> = rows.to_vec();
        wanted.sort_unstable();
        wanted.dedup();
        let table = self.g.read_table(self.snap, t).await?;
        let got = table.take_positions(&wanted, column).await?;
        let at: Vec<u32> = rows
            .iter()
            .map(|r| wanted.binary_search(r).expect("a wanted row") as u32)
            .collect();
        take_at(&got, &at)
    }
}

/// `arr` at `rows`; the array itself when `rows` is every row in order
/// (a whole-table scan), which copies nothing.
pub(super) fn take_at(arr: &ArrayRef, rows: &[u32]) -> Result<ArrayRef> {
    if rows.len() == arr.len() && rows.iter().enumerate().all(|(i, r)| *r as usize == i) {
        return Ok(arr.clone());
    }
    Ok(take(arr.as_ref(), &UInt32Array::from(rows.to_vec()), None)?)
}

/// A constant repeated `n` times.
pub(super) fn repeat(v: &Value, n: usize) -> ArrayRef {
    use arrow_array::*;
    match v {
        Value::Null => new_null_array(&DataType::Utf8, n),
        Value::Bool(b) => Arc::new(BooleanArray::from(vec![*b; n])),
        Value::Int(i) => Arc::new(Int64Array::from(vec![*i; n])),
        Value::UInt(u) => Arc::new(UInt64Array::from(vec![*u; n])),
        Value::Float(f) => Arc::new(Float64Array::from(vec![*f; n])),
        Value::Str(s) => Arc::new(StringArray::from(vec![s.as_ref(); n])),
        Value::Date(d) => Arc::new(Date32Array::from(vec![*d; n])),
        Value::DateTime(ms) => Arc::new(Date64Array::from(vec![*ms; n])),
        Value::List(_) | Value::Vector(_) | Value::Bytes(_) | Value::BlobUri(_) => {
            new_null_array(&DataType::Utf8, n)
        }
    }
}
