//! Query results as text: JSON (one object), JSONL (metadata, then a row per
//! line), CSV, and rows of JSON values for the human table; and as an
//! Arrow IPC stream (what the server sends and its clients read back).

use std::io::Write;

use serde_json::{Map, Value, json};

use super::export::cell_json;
use super::run::QueryResult;
use crate::error::{OmniError, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Jsonl,
    Csv,
}

impl std::str::FromStr for Format {
    type Err = OmniError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "table" => Format::Table,
            "json" => Format::Json,
            "jsonl" => Format::Jsonl,
            "csv" => Format::Csv,
            other => {
                return Err(OmniError::BadRequest(format!(
                    "unknown format {other:?} (table, json, jsonl, csv)"
                )));
            }
        })
    }
}

/// The result's batches as one Arrow IPC stream (its schema, then each
/// batch).
pub fn to_ipc(r: &QueryResult) -> Result<Vec<u8>> {
    let schema = r
        .batches
        .first()
        .map(|b| b.schema())
        .ok_or_else(|| OmniError::Storage("a query result without a batch".into()))?;
    let mut out = Vec::new();
    let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut out, &schema)?;
    for b in &r.batches {
        w.write(b)?;
    }
    w.finish()?;
    drop(w);
    Ok(out)
}

/// A result read back from [`to_ipc`]'s stream, with what the server said
/// of the read beside it.
pub fn from_ipc(
    bytes: &[u8],
    query: &str,
    branch: &str,
    graph_commit_id: &str,
    manifest_version: u64,
) -> Result<QueryResult> {
    let bad = |e: arrow_schema::ArrowError| {
        OmniError::BadRequest(format!("not an Arrow IPC stream of a result: {e}"))
    };
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(bad)?;
    let schema = reader.schema();
    let mut batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(bad)?;
    if batches.is_empty() {
        batches.push(arrow_array::RecordBatch::new_empty(schema.clone()));
    }
    Ok(QueryResult {
        query: query.to_string(),
        branch: branch.to_string(),
        graph_commit_id: graph_commit_id.to_string(),
        manifest_version,
        columns: schema.fields().iter().map(|f| f.name().clone()).collect(),
        batches,
        search: Vec::new(),
    })
}

/// One row's cells in the result's column order (the query's `return`
/// order); it serializes as a JSON object whose keys keep that order.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(pub Vec<(String, Value)>);

impl serde::Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Every row, its cells in column order.
pub fn ordered_rows(r: &QueryResult) -> Result<Vec<Row>> {
    let mut out = Vec::with_capacity(r.num_rows());
    for b in &r.batches {
        for i in 0..b.num_rows() {
            let cells = b
                .columns()
                .iter()
                .zip(&r.columns)
                .map(|(c, name)| Ok((name.clone(), cell_json(c, i)?)))
                .collect::<Result<Vec<_>>>()?;
            out.push(Row(cells));
        }
    }
    Ok(out)
}

/// Every row as a JSON object keyed by column name (for lookups by name;
/// output keeps the column order through [`ordered_rows`]).
pub fn rows(r: &QueryResult) -> Result<Vec<Map<String, Value>>> {
    Ok(ordered_rows(r)?
        .into_iter()
        .map(|row| row.0.into_iter().collect())
        .collect())
}

/// A JSON result document (its keys in the order they always had).
#[derive(serde::Serialize)]
struct Document<'a> {
    branch: &'a str,
    columns: &'a [String],
    graph_commit_id: &'a str,
    manifest_version: u64,
    query: &'a str,
    rows: Vec<Row>,
}

fn meta(r: &QueryResult) -> Value {
    json!({
        "query": r.query,
        "branch": r.branch,
        "graph_commit_id": r.graph_commit_id,
        "manifest_version": r.manifest_version,
        "columns": r.columns,
    })
}

fn csv_field(v: &Value) -> String {
    let s = match v {
        Value::Null => return String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

/// Write a result in a machine format (not `Table`).
pub fn write(r: &QueryResult, format: Format, out: &mut dyn Write) -> Result<()> {
    match format {
        Format::Json => {
            let doc = Document {
                branch: &r.branch,
                columns: &r.columns,
                graph_commit_id: &r.graph_commit_id,
                manifest_version: r.manifest_version,
                query: &r.query,
                rows: ordered_rows(r)?,
            };
            serde_json::to_writer_pretty(&mut *out, &doc)?;
            writeln!(out)?;
        }
        Format::Jsonl => {
            serde_json::to_writer(&mut *out, &meta(r))?;
            writeln!(out)?;
            for row in ordered_rows(r)? {
                serde_json::to_writer(&mut *out, &row)?;
                writeln!(out)?;
            }
        }
        Format::Csv => {
            writeln!(
                out,
                "{}",
                r.columns
                    .iter()
                    .map(|c| csv_field(&json!(c)))
                    .collect::<Vec<_>>()
                    .join(",")
            )?;
            for row in ordered_rows(r)? {
                let line: Vec<String> = row.0.iter().map(|(_, v)| csv_field(v)).collect();
                writeln!(out, "{}", line.join(","))?;
            }
        }
        Format::Table => {
            return Err(OmniError::BadRequest(
                "the table format is printed by the CLI".into(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_quoting() {
        assert_eq!(csv_field(&json!("a,b")), "\"a,b\"");
        assert_eq!(csv_field(&json!("say \"hi\"")), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field(&Value::Null), "");
        assert_eq!(csv_field(&json!(3)), "3");
    }
}
