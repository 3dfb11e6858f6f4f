//! `@unique` and `@card` for a load, checked on the complete staged image
//! of each type: what the graph keeps of it (nothing when the load
//! overwrites the type; the rows the file does not replace otherwise) plus
//! the file's rows. A mutation checks the same rules on its change set; a
//! load names the input line of the row that breaks them.

use arrow_array::RecordBatch;

use super::card::{self, Tally};
use super::columns;
use super::jsonl::ParsedType;
use crate::compiler::catalog::{Cardinality, ID, SRC, TypeDef};
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

/// Does the type have a `@unique` rule?
pub fn applies(def: &TypeDef) -> bool {
    !def.uniques.is_empty()
}

/// Check `pt`'s `@unique` rules. `keeps_committed`: the load leaves the
/// type's committed rows in place (append, merge); `file_ids`: the ids the
/// file gives the type (a committed row with one is replaced).
pub async fn check(
    cx: &PrepareCx,
    pt: &ParsedType,
    keeps_committed: bool,
    file_ids: &IdIndex,
) -> Result<()> {
    for cols in &pt.def.uniques {
        unique(cx, pt, cols, keeps_committed, file_ids).await?;
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

/// What a load brings of one `@card` edge type and its source node type.
pub struct CardInput<'a> {
    pub edge: &'a TypeDef,
    pub card: Cardinality,
    /// The file's edges of the type, and whether the graph's stay beside
    /// them (not an overwrite); `edge_ids`: the file's explicit edge ids (a
    /// committed edge with one is replaced).
    pub edges: Option<&'a ParsedType>,
    pub edges_kept: bool,
    pub edge_ids: &'a IdIndex,
    /// The source node type, the file's nodes of it, and whether the
    /// graph's stay beside them.
    pub from: &'a TypeDef,
    pub nodes: Option<&'a ParsedType>,
    pub nodes_kept: bool,
}

/// The `@card` rule (src/write/card.rs) on what the load leaves: the
/// sources of the file's edges, of the committed edges it replaces, the
/// source nodes it brings (under a minimum), and, when it overwrites the
/// edges but keeps the nodes, every committed source node.
pub async fn cardinality(cx: &PrepareCx, c: CardInput<'_>) -> Result<()> {
    let mut tally = Tally::new(c.card);
    if let Some(pt) = c.edges {
        for (bi, b) in pt.batches.iter().enumerate() {
            let src = stage::string_column(b, SRC)?;
            for i in 0..b.num_rows() {
                tally.watch(src.value(i), Some(pt.lines[bi][i] as usize));
            }
        }
    }
    if c.card.min > 0 {
        if let Some(pt) = c.nodes {
            for (bi, b) in pt.batches.iter().enumerate() {
                let ids = stage::string_column(b, ID)?;
                for i in 0..b.num_rows() {
                    tally.watch(ids.value(i), Some(pt.lines[bi][i] as usize));
                }
            }
        }
        if !c.edges_kept && c.nodes_kept {
            let ds = cx.read(c.from).await?;
            for b in scan::scan(&ds, &[ID], None).await? {
                let ids = stage::string_column(&b, ID)?;
                for i in 0..b.num_rows() {
                    tally.watch(ids.value(i), None);
                }
            }
        }
    }
    if c.edges_kept && !(tally.is_empty() && c.edge_ids.is_empty()) {
        let ds = cx.read(c.edge).await?;
        let batches = scan::scan(&ds, &[ID, SRC], None).await?;
        // A replaced edge's source loses it: watched before any is counted.
        for b in &batches {
            let (ids, src) = (stage::string_column(b, ID)?, stage::string_column(b, SRC)?);
            for i in 0..b.num_rows() {
                if c.edge_ids.get(ids.value(i)).is_some() {
                    tally.watch(src.value(i), None);
                }
            }
        }
        for b in &batches {
            let (ids, src) = (stage::string_column(b, ID)?, stage::string_column(b, SRC)?);
            for i in 0..b.num_rows() {
                if c.edge_ids.get(ids.value(i)).is_none() {
                    tally.edge(src.value(i), None);
                }
            }
        }
    }
    // The file's edges last, in file order: the one past the maximum is
    // the line that breaks it.
    if let Some(pt) = c.edges {
        for (bi, b) in pt.batches.iter().enumerate() {
            let src = stage::string_column(b, SRC)?;
            for i in 0..b.num_rows() {
                tally.edge(src.value(i), Some(pt.lines[bi][i] as usize));
            }
        }
    }
    match tally.broken().into_iter().next() {
        Some((src, n, line)) => Err(card::violation(&c.edge.name, c.card, &src, n, line)),
        None => Ok(()),
    }
}
