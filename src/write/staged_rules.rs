//! `@unique` and `@card` for a load, checked on the complete staged image
//! of each type: what the graph keeps of it (nothing when the load
//! overwrites the type; the rows the file does not replace otherwise) plus
//! the file's rows. A mutation checks the same rules on its change set; a
//! load names the input line of the row that breaks them.

use arrow_array::RecordBatch;

use super::columns;
use super::jsonl::ParsedType;
use crate::compiler::catalog::{Cardinality, ID, SRC, TypeDef, TypeKind};
use crate::compiler::value;
use crate::error::{Location, OmniError, Result};
use crate::storage::substrate::PrepareCx;
use crate::storage::{scan, stage};
use crate::util::hash::FxHashMap;
use crate::util::idindex::IdIndex;

fn at(line: usize, pt: &ParsedType, prop: &str, value: String) -> Location {
    Location {
        line: Some(line),
        row: None,
        type_name: Some(pt.def.name.clone()),
        property: Some(prop.to_string()),
        value: Some(value),
        ..Default::default()
    }
}

/// The `@unique` key of row `i` over `cols` (`None`: a part is null), read
/// as the values a mutation compares.
fn unique_key(b: &RecordBatch, cols: &[String], i: usize) -> Result<Option<String>> {
    let mut vals = Vec::with_capacity(cols.len());
    for c in cols {
        let a = b
            .column_by_name(c)
            .ok_or_else(|| OmniError::Storage(format!("column {c} is missing")))?;
        vals.push(value::at(a, i));
    }
    Ok(columns::unique_key(&vals))
}

/// Does the type have a rule checked here?
pub fn applies(def: &TypeDef) -> bool {
    !def.uniques.is_empty()
        || matches!(&def.kind, TypeKind::Edge { card, .. } if card.min > 0 || card.max.is_some())
}

/// Check `pt`'s `@unique` and `@card` rules. `keeps_committed`: the load
/// leaves the type's committed rows in place (append, merge); `file_ids`:
/// the ids the file gives the type (a committed row with one is replaced).
pub async fn check(
    cx: &PrepareCx,
    pt: &ParsedType,
    keeps_committed: bool,
    file_ids: &IdIndex,
) -> Result<()> {
    for cols in &pt.def.uniques {
        unique(cx, pt, cols, keeps_committed, file_ids).await?;
    }
    if let TypeKind::Edge { card, .. } = &pt.def.kind
        && (card.min > 0 || card.max.is_some())
    {
        cardinality(cx, pt, *card, keeps_committed, file_ids).await?;
    }
    Ok(())
}

async fn unique(
    cx: &PrepareCx,
    pt: &ParsedType,
    cols: &[String],
    keeps_committed: bool,
    file_ids: &IdIndex,
) -> Result<()> {
    let shown = cols.join(", ");
    // Key -> (id, line) of the file's rows.
    let mut file: FxHashMap<String, (String, usize)> = FxHashMap::default();
    for (bi, b) in pt.batches.iter().enumerate() {
        let ids = stage::string_column(b, ID)?;
        for i in 0..b.num_rows() {
            let Some(k) = unique_key(b, cols, i)? else {
                continue;
            };
            let line = pt.lines[bi][i] as usize;
            if let Some((other, first)) = file.get(&k)
                && other != ids.value(i)
            {
                let at = at(line, pt, &shown, k.replace('\u{1}', ", "));
                let first = u32::try_from(*first).ok();
                return Err(OmniError::invalid(
                    Location { first, ..at },
                    "violates @unique",
                ));
            }
            file.insert(k, (ids.value(i).to_string(), line));
        }
    }
    if !keeps_committed || file.is_empty() {
        return Ok(());
    }
    let mut wanted: Vec<&str> = vec![ID];
    wanted.extend(cols.iter().map(String::as_str));
    let ds = cx.read(&pt.def).await?;
    for b in scan::scan(&ds, &wanted, None).await? {
        let ids = stage::string_column(&b, ID)?;
        for i in 0..b.num_rows() {
            let id = ids.value(i);
            if file_ids.get(id).is_some() {
                continue; // the file replaces this row
            }
            if let Some(k) = unique_key(&b, cols, i)?
                && let Some((_, line)) = file.get(&k)
            {
                return Err(OmniError::invalid(
                    at(*line, pt, &shown, k.replace('\u{1}', ", ")),
                    format!("violates @unique: the graph's row {id:?} has it already"),
                ));
            }
        }
    }
    Ok(())
}

async fn cardinality(
    cx: &PrepareCx,
    pt: &ParsedType,
    card: Cardinality,
    keeps_committed: bool,
    file_ids: &IdIndex,
) -> Result<()> {
    // Source -> (edges, the line of its last edge in the file).
    let mut per_source: FxHashMap<String, (u64, usize)> = FxHashMap::default();
    for (bi, b) in pt.batches.iter().enumerate() {
        let src = stage::string_column(b, SRC)?;
        for i in 0..b.num_rows() {
            let e = per_source.entry(src.value(i).to_string()).or_insert((0, 0));
            e.0 += 1;
            e.1 = pt.lines[bi][i] as usize;
        }
    }
    if keeps_committed && !per_source.is_empty() {
        let ds = cx.read(&pt.def).await?;
        for b in scan::scan(&ds, &[ID, SRC], None).await? {
            let (ids, src) = (
                stage::string_column(&b, ID)?,
                stage::string_column(&b, SRC)?,
            );
            for i in 0..b.num_rows() {
                if file_ids.get(ids.value(i)).is_some() {
                    continue;
                }
                if let Some(e) = per_source.get_mut(src.value(i)) {
                    e.0 += 1;
                }
            }
        }
    }
    let mut broken: Vec<(&String, &(u64, usize))> = per_source
        .iter()
        .filter(|(_, (n, _))| *n < card.min || card.max.is_some_and(|m| *n > m))
        .collect();
    broken.sort_by_key(|(_, (_, line))| *line);
    if let Some((src, (n, line))) = broken.first() {
        let max = card.max.map_or("*".to_string(), |m| m.to_string());
        return Err(OmniError::invalid(
            at(*line, pt, "from", format!("{src:?}")),
            format!(
                "@card({}..{max}) violated: this source would have {n} {} edges",
                card.min, pt.def.name
            ),
        ));
    }
    Ok(())
}
