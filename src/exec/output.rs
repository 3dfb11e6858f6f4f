//! Query results as text: JSON (one object), JSONL (metadata, then a row per
//! line), CSV, and rows of JSON values for the human table.

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

/// Every row as a JSON object keyed by column name, in result order.
pub fn rows(r: &QueryResult) -> Result<Vec<Map<String, Value>>> {
    let mut out = Vec::with_capacity(r.num_rows());
    for b in &r.batches {
        for i in 0..b.num_rows() {
            let mut row = Map::new();
            for (c, name) in b.columns().iter().zip(&r.columns) {
                row.insert(name.clone(), cell_json(c, i)?);
            }
            out.push(row);
        }
    }
    Ok(out)
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
            let mut m = meta(r);
            m["rows"] = Value::Array(rows(r)?.into_iter().map(Value::Object).collect());
            serde_json::to_writer_pretty(&mut *out, &m)?;
            writeln!(out)?;
        }
        Format::Jsonl => {
            serde_json::to_writer(&mut *out, &meta(r))?;
            writeln!(out)?;
            for row in rows(r)? {
                serde_json::to_writer(&mut *out, &Value::Object(row))?;
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
            for row in rows(r)? {
                let line: Vec<String> = r.columns.iter().map(|c| csv_field(&row[c])).collect();
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
