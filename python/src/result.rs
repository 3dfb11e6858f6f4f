//! A query's result as Python sees it: the snapshot it read, its columns in
//! `return` order, rows as dicts, and the Arrow C stream that hands the
//! column buffers to pyarrow, Polars or DuckDB without a copy.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict, PyList};

use crate::arrow::stream_capsule;
use crate::convert::to_py;
use crate::errors::OrRaise;

#[pyclass(frozen, module = "omnigraph._omnigraph", name = "QueryResult")]
pub struct QueryResult(pub Arc<omnigraph::QueryResult>);

#[pymethods]
impl QueryResult {
    /// The query's name.
    #[getter]
    fn query_name(&self) -> &str {
        &self.0.query
    }

    /// The branch of the snapshot read.
    #[getter]
    fn branch(&self) -> &str {
        &self.0.branch
    }

    /// The commit of the snapshot read.
    #[getter]
    fn graph_commit_id(&self) -> &str {
        &self.0.graph_commit_id
    }

    /// The graph manifest version of the snapshot read.
    #[getter]
    fn manifest_version(&self) -> u64 {
        self.0.manifest_version
    }

    /// The column names, in the query's `return` order.
    #[getter]
    fn columns(&self) -> Vec<String> {
        self.0.columns.clone()
    }

    fn __len__(&self) -> usize {
        self.0.num_rows()
    }

    /// Every row as a dict keyed by column, values as the CLI's JSON gives
    /// them, keys in `return` order.
    fn to_pylist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for b in &self.0.batches {
            for i in 0..b.num_rows() {
                let row = PyDict::new(py);
                for (c, name) in b.columns().iter().zip(&self.0.columns) {
                    let v = omnigraph::results::cell_json(c, i).or_raise()?;
                    row.set_item(name, to_py(py, &v)?)?;
                }
                out.append(row)?;
            }
        }
        Ok(out)
    }

    /// The Arrow C stream interface: the result's batches, shared.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        // The schema is the result's own; a consumer that asked for another
        // casts what it gets (the interface lets the producer decline).
        let _ = requested_schema;
        let schema = self.0.batches[0].schema();
        stream_capsule(py, schema, self.0.batches.clone())
    }

    fn __repr__(&self) -> String {
        format!(
            "QueryResult(query_name={:?}, rows={}, columns={:?}, graph_commit_id={:?})",
            self.0.query,
            self.0.num_rows(),
            self.0.columns,
            self.0.graph_commit_id
        )
    }
}

/// A result a server sent as an Arrow IPC stream, with what it said of
/// the read (the remote client's `query`): the same class, rows and
/// stream as an in-process result.
#[pyfunction]
pub fn result_from_ipc(
    py: Python<'_>,
    data: &[u8],
    query_name: &str,
    branch: &str,
    graph_commit_id: &str,
    manifest_version: u64,
) -> PyResult<QueryResult> {
    py.detach(|| {
        omnigraph::results::from_ipc(data, query_name, branch, graph_commit_id, manifest_version)
    })
    .or_raise()
    .map(|r| QueryResult(Arc::new(r)))
}
