//! Ordering and limits: the order keys, then tie-breaks (the ids of every
//! bound entity, or after aggregation the visible columns), so that every
//! ordered result is deterministic.

use arrow::compute::{SortColumn, SortOptions, lexsort_to_indices, take};
use arrow_array::{ArrayRef, UInt32Array};
use arrow_schema::DataType;

use crate::compiler::query::ir::Plan;
use crate::error::Result;

/// The result columns ordered and cut to the limit.
pub(super) fn order_and_limit(
    plan: &Plan,
    mut columns: Vec<ArrayRef>,
    tie_cols: &[ArrayRef],
) -> Result<Vec<ArrayRef>> {
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
            for t in tie_cols {
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
            // With a limit only the first rows are ordered (a partial sort).
            let first = plan.limit.map(|l| (l as usize).min(nrows));
            indices = Some(lexsort_to_indices(&sort_cols, first)?);
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
    Ok(columns)
}
