//! The engine's errors as the package's exceptions (`omnigraph._errors`):
//! the group follows the CLI's exit code, `.kind` is the CLI's
//! `error[Kind]`, and the fields a kind carries become attributes.

use omnigraph::OmniError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::convert::to_py;

static OMNIGRAPH: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static INPUT: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static RETRYABLE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static MERGE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const MODULE: &str = "omnigraph._errors";

/// The exception class for an exit code.
fn class(py: Python<'_>, exit_code: i32) -> PyResult<&Bound<'_, PyType>> {
    match exit_code {
        2 => INPUT.import(py, MODULE, "InputError"),
        4 => RETRYABLE.import(py, MODULE, "RetryableError"),
        5 => MERGE.import(py, MODULE, "MergeConflictError"),
        _ => OMNIGRAPH.import(py, MODULE, "OmnigraphError"),
    }
}

/// The exception for `e`, with its kind, exit code and fields.
pub fn to_pyerr(e: OmniError) -> PyErr {
    Python::attach(|py| match build(py, &e) {
        Ok(err) => err,
        Err(failed) => failed,
    })
}

fn build(py: Python<'_>, e: &OmniError) -> PyResult<PyErr> {
    let exc = class(py, e.exit_code())?.call1((e.to_string(),))?;
    exc.setattr("kind", e.kind())?;
    exc.setattr("exit_code", e.exit_code())?;
    match e {
        OmniError::Invalid { at, .. } => {
            exc.setattr("line", at.line)?;
            exc.setattr("row", at.row)?;
            exc.setattr("type_name", at.type_name.as_deref())?;
            exc.setattr("property", at.property.as_deref())?;
            exc.setattr("value", at.value.as_deref())?;
            exc.setattr("first", at.first)?;
        }
        OmniError::Parse { line, column, .. } | OmniError::Type { line, column, .. } => {
            exc.setattr("line", *line)?;
            exc.setattr("column", *column)?;
        }
        OmniError::PolicyDenied {
            actor,
            action,
            branch,
            target_branch,
            ..
        } => {
            exc.setattr("actor", actor)?;
            exc.setattr("action", action)?;
            exc.setattr("branch", branch.as_deref())?;
            exc.setattr("target_branch", target_branch.as_deref())?;
        }
        OmniError::KeyConflict { type_name, id } => {
            exc.setattr("type_name", type_name)?;
            exc.setattr("id", id)?;
        }
        OmniError::PreconditionFailed { expected, actual } => {
            exc.setattr("expected", expected)?;
            exc.setattr("actual", actual)?;
        }
        OmniError::MergeConflicts(c) => {
            let conflicts = serde_json::to_value(c).unwrap_or_default();
            exc.setattr("conflicts", to_py(py, &conflicts)?)?;
        }
        _ => {}
    }
    Ok(PyErr::from_value(exc))
}

/// `?` on an engine result inside a Python-facing function.
pub trait OrRaise<T> {
    fn or_raise(self) -> PyResult<T>;
}

impl<T> OrRaise<T> for omnigraph::Result<T> {
    fn or_raise(self) -> PyResult<T> {
        self.map_err(to_pyerr)
    }
}
