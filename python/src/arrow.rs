//! Arrow across the language boundary through the C stream interface: a
//! result leaves as an `arrow_array_stream` PyCapsule (pyarrow, Polars and
//! DuckDB import it without copying a column), and a table to load enters
//! from any object with `__arrow_c_stream__`.

use std::ffi::CString;

use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::SchemaRef;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::convert::type_name;

const STREAM: &std::ffi::CStr = c"arrow_array_stream";

/// `batches` (all of `schema`) as a stream capsule. The columns are shared,
/// not copied: the consumer holds references to the same buffers.
pub fn stream_capsule<'py>(
    py: Python<'py>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
    let stream = FFI_ArrowArrayStream::new(Box::new(reader));
    // Dropping an unconsumed stream releases it; a consumer that moved it
    // out left a released one behind, which drops as nothing.
    PyCapsule::new(py, stream, Some(CString::from(STREAM)))
}

/// The batches of any object that exports an Arrow C stream.
pub fn read_stream(o: &Bound<'_, PyAny>) -> PyResult<ArrowArrayStreamReader> {
    if !o.hasattr("__arrow_c_stream__")? {
        return Err(PyTypeError::new_err(format!(
            "a table to load must export an Arrow stream (__arrow_c_stream__): a pyarrow \
             Table or RecordBatchReader, a polars DataFrame, ...; not {}",
            type_name(o)
        )));
    }
    let capsule = o.call_method0("__arrow_c_stream__")?;
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__arrow_c_stream__ did not return a PyCapsule"))?;
    let ptr = capsule.pointer_checked(Some(STREAM)).map_err(|_| {
        PyValueError::new_err("__arrow_c_stream__ returned a capsule of another kind")
    })?;
    // SAFETY: a capsule named arrow_array_stream holds an FFI_ArrowArrayStream
    // (the C stream interface's contract); from_raw moves it out and leaves
    // a released stream in its place, which the capsule's owner then drops.
    unsafe { ArrowArrayStreamReader::from_raw(ptr.as_ptr().cast()) }
        .map_err(|e| PyValueError::new_err(format!("cannot read the Arrow stream: {e}")))
}
