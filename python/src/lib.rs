//! `omnigraph._omnigraph`: the engine in-process for Python. The module
//! owns one tokio runtime ([`runtime`]); every call releases the GIL while
//! the engine works, or is an asyncio awaitable. The public API is the
//! pure-Python package around it (`python/omnigraph/`).

mod arrow;
mod convert;
mod errors;
mod export;
mod graph;
mod input;
mod result;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _omnigraph(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<graph::Graph>()?;
    m.add_class::<result::QueryResult>()?;
    m.add_class::<export::ExportLines>()?;
    m.add_function(wrap_pyfunction!(graph::open, m)?)?;
    m.add_function(wrap_pyfunction!(graph::init, m)?)?;
    m.add_function(wrap_pyfunction!(result::result_from_ipc, m)?)?;
    Ok(())
}
