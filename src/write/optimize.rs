//! Optimize as a write: build or refresh every index of a branch. Every
//! table gets a storage BTREE on `id` (and on each orderable scalar or enum
//! `@index` property), so key probes and inserts' id checks look values up.
//! A search index (`@index` on a String or a Vector), a node table's id
//! order and an edge table's graph index are derived state of ours: a file
//! of its own (written first, unreferenced until committed) and a record in
//! its table's metadata. A table's BTREEs and records are
//! staged as that table's one change, so the write protocol commits every
//! table's and publishes them in one graph version (gates, sidecar,
//! recovery, all as for any write). Loads and mutations never build
//! indexes; what an index does not cover is read flat.

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, ArrayRef};

use std::sync::Arc;

use crate::compiler::catalog::{DST, ID, PropType, SRC, TypeDef};
use crate::error::{OmniError, Result};
use crate::index::adjacency::GraphIndex;
use crate::index::adjacency_file::{self, Basis, GraphIndexRef};
use crate::index::coverage::Layout;
use crate::index::id_file::{self, IdOrderRef};
use crate::index::id_order::IdOrder;
use crate::index::ivf::Ivf;
use crate::index::text::TextIndex;
use crate::index::{IndexKind, IndexRef};
use crate::storage::index_files::{self, new_index_file};
use crate::storage::objstore::Store;
use crate::storage::substrate::{BoxFut, PrepareCx, PrepareWork, Prepared};
use crate::storage::tables::Table;
use crate::storage::{scan, stage};
use crate::util::idindex::IdIndex;
use omnigraph_actors::WriteClass;

/// What an `@index` on one property builds, by the property's type: a
/// storage BTREE on an orderable scalar or enum, a search index on a
/// String or a Vector; lists and blobs get none.
enum Declared {
    Btree,
    Search(IndexKind),
}

fn declared_by(ty: &PropType) -> Option<Declared> {
    match ty {
        PropType::String => Some(Declared::Search(IndexKind::Text)),
        PropType::Vector(_) => Some(Declared::Search(IndexKind::Vector)),
        PropType::List(_) | PropType::Blob => None,
        _ => Some(Declared::Btree),
    }
}

/// Each single-property `@index` of a type, with what it builds.
fn indexes(def: &TypeDef) -> impl Iterator<Item = (&String, Declared)> {
    def.indexes
        .iter()
        .filter_map(|props| match props.as_slice() {
            [p] => declared_by(&def.property(p)?.ty).map(|d| (p, d)),
            _ => None,
        })
}

/// The columns of a type that get a storage BTREE: `id`, and each `@index`
/// on one orderable scalar or enum property.
pub fn btree_columns(def: &TypeDef) -> Vec<String> {
    let mut out = vec![ID.to_string()];
    for (p, d) in indexes(def) {
        if matches!(d, Declared::Btree) && !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

/// The search indexes a type declares: each `@index` on one String or
/// Vector property.
pub fn declared(def: &TypeDef) -> Vec<(String, IndexKind)> {
    indexes(def)
        .filter_map(|(p, d)| match d {
            Declared::Search(kind) => Some((p.clone(), kind)),
            Declared::Btree => None,
        })
        .collect()
}

/// The declared indexes of a table version that are missing or not
/// current. An index is current while its file exists and its table holds
/// exactly the fragments it was built over (deletions since do not matter:
/// searches skip deleted documents). An empty table needs none.
pub async fn stale(
    store: &Store,
    table: &Table,
    def: &TypeDef,
) -> Result<Vec<(String, IndexKind)>> {
    let wanted = declared(def);
    if wanted.is_empty() || table.fragments() == 0 {
        return Ok(Vec::new());
    }
    let digest = crate::index::coverage::digest(&table.layout().await?);
    let mut out = Vec::new();
    for (prop, kind) in wanted {
        let current = match table.index_of(&prop)? {
            Some(r) => r.kind == kind && r.fragments == digest && store.exists(&r.file).await?,
            None => false,
        };
        if !current {
            out.push((prop, kind));
        }
    }
    Ok(out)
}

pub struct OptimizeWork;

impl PrepareWork for OptimizeWork {
    fn prepare<'a>(&'a self, cx: &'a mut PrepareCx) -> BoxFut<'a, Result<Prepared>> {
        Box::pin(async move {
            let mut built = Vec::new();
            let defs: Vec<TypeDef> = cx.catalog().types.clone();
            for def in &defs {
                let read = cx.read(def).await?;
                let stale_search = stale(&cx.graph.store, &read, def).await?;
                let stale_btrees = stage::stale_btrees(&read, &btree_columns(def)).await?;
                let graph = match def.is_edge() {
                    true => graph_index(cx, def).await?,
                    false => None,
                };
                let ids_stale = !def.is_edge() && id_order_stale(cx, &read).await?;
                if stale_search.is_empty()
                    && stale_btrees.is_empty()
                    && graph.is_none()
                    && !ids_stale
                {
                    continue;
                }
                // A branch that shares the table forks it here (invisible
                // until published); its rows are the ones just read.
                let target = cx.target(def).await?;
                let rows = target.rows().await? as u64;
                let mut change = None;
                if !stale_btrees.is_empty() {
                    for c in &stale_btrees {
                        built.push(serde_json::json!({
                            "type": def.name, "property": c, "kind": "btree", "rows": rows,
                        }));
                    }
                    change = Some(stage::btrees(target.clone(), &stale_btrees).await?);
                }
                let mut records = Vec::new();
                if !stale_search.is_empty() {
                    let layout = target.layout().await?;
                    let fragments = crate::index::coverage::digest(&layout);
                    for (prop, kind) in stale_search {
                        let r = build(cx, def, &target, (&layout, &fragments), &prop, kind).await?;
                        built.push(serde_json::json!({
                            "type": def.name, "property": prop, "kind": kind, "rows": r.rows,
                            "file": r.file,
                        }));
                        records.push((prop, r));
                    }
                }
                let graph = graph.map(|(r, info)| {
                    built.push(info);
                    r
                });
                let id_order = match ids_stale {
                    true => {
                        let (r, info) = id_order(cx, def, &target).await?;
                        built.push(info);
                        Some(r)
                    }
                    false => None,
                };
                if !records.is_empty() || graph.is_some() || id_order.is_some() {
                    let recorded = stage::index_records(
                        target.clone(),
                        &records,
                        graph.as_ref(),
                        id_order.as_ref(),
                    )?;
                    change = Some(match change {
                        Some(b) => b.then_index_records(recorded),
                        None => recorded,
                    });
                }
                cx.stage(def, target, change.expect("something is stale"))?;
            }
            // Another optimize got there first (this one re-prepared after
            // losing the race): nothing to write, so no empty commit.
            if cx.staged_tables() == 0 {
                return Err(OmniError::AlreadyCurrent);
            }
            Ok(Prepared {
                class: WriteClass::Retryable,
                summary: serde_json::json!({ "indexes": built }),
                merge: None,
                schema_change: None,
            })
        })
    }
}

/// An edge type's graph index, when the edge table records none or one
/// built from other rows: built from the snapshot's rows and stored (its
/// file unreferenced until the commit records it). An empty edge table
/// needs none.
async fn graph_index(
    cx: &PrepareCx,
    def: &TypeDef,
) -> Result<Option<(GraphIndexRef, serde_json::Value)>> {
    let (from, to) = def.endpoints().expect("an edge type");
    let catalog = cx.catalog();
    let defs = [Some(def), catalog.get(from), catalog.get(to)];
    let mut tables: [String; 3] = Default::default();
    let mut layouts: [Layout; 3] = Default::default();
    let mut read = Vec::new();
    for (i, d) in defs.into_iter().enumerate() {
        let d = d.ok_or_else(|| {
            OmniError::Storage(format!("{}: an endpoint type is missing", def.name))
        })?;
        let t = cx.read(d).await?;
        tables[i] = serde_json::to_string(cx.snapshot.table(d)?)?;
        layouts[i] = t.layout().await?;
        read.push(t);
    }
    if crate::index::coverage::rows(&layouts[0]) == 0 {
        return Ok(None);
    }
    let basis = Basis { tables, layouts };
    let name = adjacency_file::digest(&basis);
    // Current: recorded for these rows, and the file reads back whole (a
    // damaged or missing one is written again).
    if let Some(r) = read[0].graph_index()?
        && r.basis == name
        && let Some(map) = cx.graph.store.map(&r.file).await?
        && let Ok(p) = adjacency_file::decode(map, &r.file)
        && p.graph.edge_rows_sound()
        && p.ids.iter().all(|o| o.sound())
    {
        return Ok(None);
    }
    let from_ids = Arc::new(IdIndex::from_parts(
        &stage::scan_strings(&read[1], ID).await?,
    )?);
    let to_ids = match from == to {
        true => from_ids.clone(),
        false => Arc::new(IdIndex::from_parts(
            &stage::scan_strings(&read[2], ID).await?,
        )?),
    };
    let src = stage::scan_strings(&read[0], SRC).await?;
    let dst = stage::scan_strings(&read[0], DST).await?;
    let one_table = from == to;
    let (bytes, edges) = tokio::task::spawn_blocking(move || {
        let g = GraphIndex::build(&src, &dst, &from_ids, &to_ids);
        let from_order = IdOrder::build(&from_ids.ids);
        let to_order = (!one_table).then(|| IdOrder::build(&to_ids.ids));
        let ids: Vec<&IdOrder> = std::iter::once(&from_order).chain(&to_order).collect();
        (adjacency_file::encode(&g, &basis, &ids), g.edges)
    })
    .await
    .map_err(|e| OmniError::Storage(format!("the graph index build failed: {e}")))?;
    let file = new_index_file("graph", &index_files::table_name(def), "adj", &cx.writer);
    cx.graph.store.put(&file, &bytes).await?;
    let info = serde_json::json!({
        "type": def.name, "kind": "graph", "rows": edges, "bytes": bytes.len(), "file": file,
    });
    Ok(Some((GraphIndexRef { file, basis: name }, info)))
}

/// Does a node table version need its id order (built)? Not when empty,
/// nor when it records one of exactly its rows whose file exists.
async fn id_order_stale(cx: &PrepareCx, read: &Table) -> Result<bool> {
    let layout = read.layout().await?;
    if crate::index::coverage::rows(&layout) == 0 {
        return Ok(false);
    }
    Ok(match read.id_order()? {
        Some(r) => {
            r.rows != crate::index::coverage::rows_digest(&layout)
                || !cx.graph.store.exists(&r.file).await?
        }
        None => true,
    })
}

/// A node table's id order, built from its rows and stored (its file
/// unreferenced until the commit records it).
async fn id_order(
    cx: &PrepareCx,
    def: &TypeDef,
    table: &Table,
) -> Result<(IdOrderRef, serde_json::Value)> {
    let layout = table.layout().await?;
    let parts = stage::scan_strings(table, ID).await?;
    let rows = crate::index::coverage::rows_digest(&layout);
    let (bytes, n) = tokio::task::spawn_blocking(move || {
        let ids = IdIndex::concat(&parts)?;
        if ids.len() != crate::index::coverage::rows(&layout) {
            return Err(OmniError::Storage(format!(
                "{} ids do not match the table's {} live rows",
                ids.len(),
                crate::index::coverage::rows(&layout)
            )));
        }
        Ok((id_file::encode(&IdOrder::build(&ids), &layout), ids.len()))
    })
    .await
    .map_err(|e| OmniError::Storage(format!("the id order build failed: {e}")))??;
    let file = new_index_file(&index_files::table_name(def), ID, "ids", &cx.writer);
    cx.graph.store.put(&file, &bytes).await?;
    let info = serde_json::json!({
        "type": def.name, "property": ID, "kind": "id order", "rows": n, "bytes": bytes.len(),
        "file": file,
    });
    Ok((IdOrderRef { file, rows }, info))
}

/// Build one index from a table version and store its file.
async fn build(
    cx: &PrepareCx,
    def: &TypeDef,
    table: &Table,
    (layout, fragments): (&Layout, &str),
    prop: &str,
    kind: IndexKind,
) -> Result<IndexRef> {
    let column = scan::column(table, prop).await?;
    let rows = column.len() as u64;
    let layout_owned = layout.clone();
    let bytes = tokio::task::spawn_blocking(move || encode(kind, &column, &layout_owned))
        .await
        .map_err(|e| OmniError::Storage(format!("the index build failed: {e}")))??;
    let ext = match kind {
        IndexKind::Text => "text",
        IndexKind::Vector => "ivf",
    };
    let file = new_index_file(&index_files::table_name(def), prop, ext, &cx.writer);
    cx.graph.store.put(&file, &bytes).await?;
    Ok(IndexRef {
        kind,
        file,
        built_at: table.version(),
        rows,
        fragments: fragments.to_string(),
    })
}

fn encode(kind: IndexKind, column: &ArrayRef, layout: &Layout) -> Result<Vec<u8>> {
    if column.len() != crate::index::coverage::rows(layout) {
        return Err(OmniError::Storage(format!(
            "a column of {} rows does not match its table's {} live rows",
            column.len(),
            crate::index::coverage::rows(layout)
        )));
    }
    Ok(match kind {
        IndexKind::Text => TextIndex::build(column.as_string::<i32>()).to_bytes(layout)?,
        IndexKind::Vector => {
            let list = column.as_fixed_size_list();
            let dim = list.value_length() as usize;
            let values = list.values().as_primitive::<Float32Type>().values();
            let present: Vec<bool> = (0..list.len()).map(|r| list.is_valid(r)).collect();
            Ivf::train(&values[..list.len() * dim], dim, &present).to_bytes(layout)
        }
    })
}
