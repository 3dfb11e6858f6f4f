//! Aggregates: `count`, `sum`, `avg`, `min`, `max` per group, and the
//! grouping of rows by their keys.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::compute::{cast, concat, take};
use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, ArrayRef, UInt32Array};
use arrow_schema::DataType;

use crate::compiler::query::ir::{AggFunc, Plan, RetExpr};
use crate::compiler::value::{self, Value};
use crate::error::Result;
use crate::util::hash::FxHashMap;

/// Aggregate state of one group for one aggregate column.
#[derive(Clone)]
pub(super) enum Acc2 {
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

pub(super) fn new_acc(f: AggFunc, float: bool) -> Acc2 {
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

pub(super) fn is_float(a: &ArrayRef) -> bool {
    matches!(a.data_type(), DataType::Float32 | DataType::Float64)
}

pub(super) fn update(acc: &mut Acc2, arr: Option<&ArrayRef>, row: usize) {
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
            let v = value::at(arr, row);
            match (v.integer(), &v) {
                (Some(i), _) => *int += i,
                (None, Value::Float(f)) => *float += f,
                _ => {}
            }
        }
        Acc2::Avg { sum, n } => {
            // `aggregate` gives an average its argument as Float64.
            *sum += arr.as_primitive::<Float64Type>().value(row);
            *n += 1;
        }
        Acc2::MinMax { best, max } => {
            let better = match best {
                None => true,
                Some((a, i)) => {
                    let o = value::order(&value::at(arr, row), &value::at(a, *i));
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

pub(super) fn finish_accs(accs: &[Acc2], template: Option<&ArrayRef>) -> Result<ArrayRef> {
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

/// Short group keys compared one by one before a hash map takes over.
const RECENT_GROUPS: usize = 16;

/// The `len` bytes at `at` of `bytes` as one integer with the length in
/// its top byte, when shorter than 16 bytes.
#[inline]
fn short_key(bytes: &[u8], at: usize, len: usize) -> Option<u128> {
    if len >= 16 {
        return None;
    }
    let raw = match bytes.get(at..at + 16) {
        Some(w) => u128::from_le_bytes(w.try_into().expect("16")),
        None => {
            let mut k = [0u8; 16];
            k[..len].copy_from_slice(&bytes[at..at + len]);
            u128::from_le_bytes(k)
        }
    };
    let mask = (1u128 << (8 * len)) - 1;
    Some(raw & mask | (len as u128) << 120)
}

/// Group the rows by the non-aggregate return columns and compute every
/// aggregate per group. `values` holds each return column's values (an
/// aggregate's argument; `None` for `count(*)`) over `total_rows` rows.
pub(super) fn aggregate(
    plan: &Plan,
    values: Vec<Option<ArrayRef>>,
    total_rows: usize,
) -> Result<Vec<ArrayRef>> {
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
    } else if let [(_, key)] = key_cols.as_slice()
        && let Some(strings) = key.as_string_opt::<i32>()
    {
        // One string key (a group by city): a short key (under 16 bytes,
        // most keys) is one integer of its bytes and length, looked up
        // among the first few groups by comparison and past them by hash;
        // a longer key is hashed as its string. Several times cheaper than
        // encoding rows.
        let mut recent: Vec<(u128, usize)> = Vec::new();
        let mut short: FxHashMap<u128, usize> = FxHashMap::default();
        let mut long: FxHashMap<&str, usize> = FxHashMap::default();
        let mut null = None;
        let (bytes, offsets) = (strings.value_data(), strings.value_offsets());
        for (r, slot) in group_of.iter_mut().enumerate() {
            let mut new = || {
                groups.push(r);
                groups.len() - 1
            };
            *slot = if strings.is_null(r) {
                *null.get_or_insert_with(new)
            } else {
                let (at, end) = (offsets[r] as usize, offsets[r + 1] as usize);
                match short_key(bytes, at, end - at) {
                    Some(k) => match recent.iter().find(|(x, _)| *x == k) {
                        Some((_, g)) => *g,
                        None if recent.len() < RECENT_GROUPS => {
                            let g = new();
                            recent.push((k, g));
                            g
                        }
                        None => *short.entry(k).or_insert_with(new),
                    },
                    None => *long.entry(strings.value(r)).or_insert_with(new),
                }
            };
        }
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
        // An average reads its argument as floats, cast once for the column
        // rather than a value per row.
        let arg = match (func, arg) {
            (AggFunc::Avg, Some(a)) => Some(cast(a.as_ref(), &DataType::Float64)?),
            (_, a) => a.clone(),
        };
        let mut accs = vec![new_acc(*func, float); groups.len()];
        match (&mut accs, func, &arg) {
            // The two a group by asks most, in one pass without a match
            // per row.
            (accs, AggFunc::Count, None) => {
                let mut n = vec![0i64; accs.len()];
                for &g in &group_of {
                    n[g] += 1;
                }
                for (a, n) in accs.iter_mut().zip(n) {
                    *a = Acc2::Count(n);
                }
            }
            (accs, AggFunc::Avg, Some(a)) => {
                let f = a.as_primitive::<Float64Type>();
                let (mut sum, mut n) = (vec![0f64; accs.len()], vec![0i64; accs.len()]);
                for (r, (&g, v)) in group_of.iter().zip(f.values()).enumerate() {
                    if f.is_valid(r) {
                        sum[g] += v;
                        n[g] += 1;
                    }
                }
                for (a, (sum, n)) in accs.iter_mut().zip(sum.into_iter().zip(n)) {
                    *a = Acc2::Avg { sum, n };
                }
            }
            (accs, ..) => {
                for r in 0..total_rows {
                    update(&mut accs[group_of[r]], arg.as_ref(), r);
                }
            }
        }
        out_cols[*i] = Some(finish_accs(&accs, arg.as_ref())?);
    }
    Ok(out_cols
        .into_iter()
        .map(|c| c.expect("every column computed"))
        .collect())
}
