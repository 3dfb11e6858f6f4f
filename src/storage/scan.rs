//! Reads of a table's rows: projections, filtered scans, streams and blob
//! reads. Callers describe a filter with [`Filter`], a small typed
//! expression of ours; it becomes a Lance (DataFusion) expression here and
//! nowhere else, so caller text never becomes SQL.

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, ArrayRef, RecordBatch, new_null_array};
use arrow_schema::DataType;
use datafusion::prelude::{Expr as DfExpr, col, lit};
use datafusion::scalar::ScalarValue;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use super::tables::{BlobInput, Table};

use crate::compiler::catalog::PropType;
use crate::compiler::query::ast::CmpOp;
use crate::compiler::value::Value;
use crate::error::{OmniError, Result};

/// Lance's name for the row-id column a scan adds on request.
pub const ROW_ID: &str = "_rowid";

/// A row filter storage evaluates.
#[derive(Clone, Debug, PartialEq)]
pub enum Filter {
    /// `column op value`, the value one that fits the column's type `ty`.
    Cmp {
        column: String,
        ty: PropType,
        op: CmpOp,
        value: Value<'static>,
    },
    /// A string column equal to one of these values.
    AnyOf {
        column: String,
        values: Vec<String>,
    },
    And(Vec<Filter>),
}

impl Filter {
    /// `column op value` for a column of type `ty`. `None` when storage
    /// cannot evaluate it exactly (`contains`, `starts_with`, a value that
    /// does not fit the column): the caller filters in memory.
    pub fn compare(column: &str, ty: &PropType, op: CmpOp, value: &Value) -> Option<Filter> {
        if matches!(op, CmpOp::Contains | CmpOp::StartsWith) {
            return None;
        }
        scalar(ty, value)?;
        Some(Filter::Cmp {
            column: column.to_string(),
            ty: ty.clone(),
            op,
            value: value.clone().into_owned(),
        })
    }

    /// All of `filters`, or `None` if there are none.
    pub fn all(mut filters: Vec<Filter>) -> Option<Filter> {
        match filters.len() {
            0 => None,
            1 => filters.pop(),
            _ => Some(Filter::And(filters)),
        }
    }

    /// The one translation to a Lance expression.
    fn lance(&self) -> DfExpr {
        match self {
            Filter::Cmp {
                column,
                ty,
                op,
                value,
            } => {
                let v = lit(scalar(ty, value).expect("Filter::compare checked the value fits"));
                let c = col(column.as_str());
                match op {
                    CmpOp::Eq => c.eq(v),
                    CmpOp::Ne => c.not_eq(v),
                    CmpOp::Lt => c.lt(v),
                    CmpOp::Le => c.lt_eq(v),
                    CmpOp::Gt => c.gt(v),
                    CmpOp::Ge => c.gt_eq(v),
                    CmpOp::Contains | CmpOp::StartsWith => {
                        unreachable!("Filter::compare never builds {op:?}")
                    }
                }
            }
            Filter::AnyOf { column, values } => {
                col(column.as_str()).in_list(values.iter().map(|v| lit(v.clone())).collect(), false)
            }
            Filter::And(parts) => parts
                .iter()
                .map(Filter::lance)
                .reduce(|a, b| a.and(b))
                .expect("Filter::all never builds an empty And"),
        }
    }
}

/// `value` as a one-row array of a `ty` column's Arrow type, if it fits
/// exactly (the same rule as the filters storage evaluates).
pub fn constant(ty: &PropType, value: &Value) -> Option<arrow_array::ArrayRef> {
    scalar(ty, value)?.to_array().ok()
}

/// `value` as a literal of a `ty` column's Arrow type, if it fits exactly.
fn scalar(ty: &PropType, value: &Value) -> Option<ScalarValue> {
    Some(match (ty, value) {
        (PropType::String | PropType::Enum(_), Value::Str(s)) => {
            ScalarValue::Utf8(Some(s.to_string()))
        }
        (PropType::I32, Value::Int(i)) => ScalarValue::Int32(Some(i32::try_from(*i).ok()?)),
        (PropType::I64, Value::Int(i)) => ScalarValue::Int64(Some(*i)),
        (PropType::U32, Value::Int(i)) => ScalarValue::UInt32(Some(u32::try_from(*i).ok()?)),
        (PropType::U64, Value::Int(i)) => ScalarValue::UInt64(Some(u64::try_from(*i).ok()?)),
        (PropType::U64, Value::UInt(u)) => ScalarValue::UInt64(Some(*u)),
        (PropType::F32, Value::Float(f)) => ScalarValue::Float32(Some(*f as f32)),
        (PropType::F64, Value::Float(f)) => ScalarValue::Float64(Some(*f)),
        (PropType::F64, Value::Int(i)) => ScalarValue::Float64(Some(*i as f64)),
        (PropType::Bool, Value::Bool(b)) => ScalarValue::Boolean(Some(*b)),
        (PropType::Date, Value::Date(d)) => ScalarValue::Date32(Some(*d)),
        (PropType::DateTime, Value::DateTime(ms)) => ScalarValue::Date64(Some(*ms)),
        _ => return None,
    })
}

/// Some columns of every row (that `filter` keeps), in batches.
pub async fn scan(
    table: &Table,
    columns: &[&str],
    filter: Option<&Filter>,
) -> Result<Vec<RecordBatch>> {
    stream(table, columns, filter, None, false)
        .await?
        .try_collect()
        .await
}

/// Some columns of every row as a stream, `batch_rows` at a time if given,
/// with Lance's row ids (column [`ROW_ID`]) if asked (for blob reads).
pub async fn stream(
    Table(ds): &Table,
    columns: &[&str],
    filter: Option<&Filter>,
    batch_rows: Option<usize>,
    row_ids: bool,
) -> Result<BoxStream<'static, Result<RecordBatch>>> {
    let mut scan = ds.scan();
    scan.project(columns)?;
    if let Some(f) = filter {
        scan.filter_expr(f.lance());
    }
    if let Some(n) = batch_rows {
        scan.batch_size(n);
    }
    if row_ids {
        scan.with_row_id();
    }
    Ok(scan
        .try_into_stream()
        .await?
        .map_err(OmniError::from)
        .boxed())
}

/// No rows of these columns, in the table's types.
pub fn empty(table: &Table, columns: &[&str]) -> Result<RecordBatch> {
    let schema = table.schema();
    let fields: Vec<arrow_schema::Field> = columns
        .iter()
        .map(|c| schema.field_with_name(c).cloned())
        .collect::<std::result::Result<_, _>>()?;
    Ok(RecordBatch::new_empty(std::sync::Arc::new(
        arrow_schema::Schema::new(fields),
    )))
}

/// One whole column, in scan order (an empty table gives an empty array of
/// the column's type).
pub async fn column(table: &Table, column: &str) -> Result<ArrayRef> {
    let parts: Vec<ArrayRef> = scan(table, &[column], None)
        .await?
        .iter()
        .map(|b| b.column(0).clone())
        .collect();
    if parts.is_empty() {
        let ty = table
            .0
            .schema()
            .field(column)
            .map(|f| f.data_type())
            .unwrap_or(DataType::Utf8);
        return Ok(new_null_array(&ty, 0));
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
    Ok(arrow::compute::concat(&refs)?)
}

/// The bytes of a Blob property for the rows of a batch scanned with row
/// ids, an external reference as its URI without the recorded ETag (its
/// object is not read).
pub async fn blobs(table: &Table, batch: &RecordBatch, prop: &str) -> Result<Vec<BlobInput>> {
    let row_ids: Vec<u64> = batch
        .column_by_name(ROW_ID)
        .ok_or_else(|| OmniError::Storage("row ids missing from a blob scan".into()))?
        .as_primitive::<UInt64Type>()
        .values()
        .to_vec();
    table.blob_values(&row_ids, prop).await
}
