//! JSON values to Python objects and back: the CLI's `--json` shapes become
//! dicts and lists, and a call's parameters become the JSON object the
//! engine binds. Python mistakes (a value of a type JSON cannot carry) are
//! `TypeError`s naming the type.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// A JSON value that becomes Python objects once the GIL is held (what a
/// call returns from the runtime's threads).
pub struct Json(pub Value);

impl<'py> IntoPyObject<'py> for Json {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.0)
    }
}

pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                PyFloat::new(py, n.as_f64().unwrap_or(f64::NAN)).into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let list = PyList::empty(py);
            for x in a {
                list.append(to_py(py, x)?)?;
            }
            list.into_any()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}

/// A Python value as JSON: `None`, `bool`, `int`, `float`, `str`, lists and
/// tuples, dicts with string keys, and anything with `tolist()` (a NumPy
/// array) or `isoformat()` (a date or datetime).
pub fn from_py(o: &Bound<'_, PyAny>) -> PyResult<Value> {
    if o.is_none() {
        return Ok(Value::Null);
    }
    // `bool` before `int`: in Python a bool is an int.
    if let Ok(b) = o.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if o.is_instance_of::<PyInt>() {
        if let Ok(i) = o.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = o.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(PyValueError::new_err(format!(
            "the integer {o} does not fit in 64 bits"
        )));
    }
    if let Ok(f) = o.cast::<PyFloat>() {
        let f = f.value();
        return Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{f} is not a number JSON can carry")));
    }
    if let Ok(s) = o.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(l) = o.cast::<PyList>() {
        return l
            .iter()
            .map(|x| from_py(&x))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(t) = o.cast::<PyTuple>() {
        return t
            .iter()
            .map(|x| from_py(&x))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(d) = o.cast::<PyDict>() {
        let mut m = Map::new();
        for (k, v) in d.iter() {
            let k = k.cast::<PyString>().map_err(|_| {
                PyTypeError::new_err(format!("a key must be a str, not {}", type_name(&k)))
            })?;
            m.insert(k.to_str()?.to_owned(), from_py(&v)?);
        }
        return Ok(Value::Object(m));
    }
    if o.hasattr("tolist")? {
        return from_py(&o.call_method0("tolist")?);
    }
    if o.hasattr("isoformat")? {
        return from_py(&o.call_method0("isoformat")?);
    }
    Err(PyTypeError::new_err(format!(
        "a value of type {} cannot be passed to the engine",
        type_name(o)
    )))
}

pub fn type_name(o: &Bound<'_, PyAny>) -> String {
    o.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}
