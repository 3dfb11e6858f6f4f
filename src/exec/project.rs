//! Projection: one output column per return expression, read from cached
//! whole columns by position.

use std::sync::Arc;

use arrow::compute::take;
use arrow_array::{Array, ArrayRef, UInt32Array};
use arrow_schema::{DataType, Field};

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
            RetExpr::Score(_) => unreachable!("a score needs its return's place (run.rs)"),
            RetExpr::Fused { .. } => unreachable!("a fusion ranks the whole result (run.rs)"),
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
