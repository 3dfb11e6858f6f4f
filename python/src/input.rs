//! A Python iterator of JSONL chunks as the loader's `Read`: each chunk is
//! taken (with the GIL) only when the loader wants more, so an iterable of
//! rows is never whole in memory. An exception the iterator raises stops
//! the read and is kept for the caller.

use std::io::Read;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyIterator, PyString};

use crate::convert::type_name;

pub struct PyChunks {
    iter: Py<PyIterator>,
    buf: Vec<u8>,
    pos: usize,
    done: bool,
    raised: Arc<Mutex<Option<PyErr>>>,
}

impl PyChunks {
    pub fn new(iter: Py<PyIterator>) -> Self {
        Self {
            iter,
            buf: Vec::new(),
            pos: 0,
            done: false,
            raised: Arc::default(),
        }
    }

    /// Where an exception of the iterator is kept.
    pub fn raised(&self) -> Arc<Mutex<Option<PyErr>>> {
        self.raised.clone()
    }

    /// The next chunk's bytes, `None` at the end.
    fn next_chunk(&self) -> PyResult<Option<Vec<u8>>> {
        Python::attach(|py| {
            let mut it = self.iter.bind(py).clone();
            let Some(item) = it.next() else {
                return Ok(None);
            };
            let item = item?;
            if let Ok(s) = item.cast::<PyString>() {
                return Ok(Some(s.to_str()?.as_bytes().to_vec()));
            }
            if let Ok(b) = item.cast::<PyBytes>() {
                return Ok(Some(b.as_bytes().to_vec()));
            }
            Err(PyTypeError::new_err(format!(
                "a JSONL chunk must be str or bytes, not {}",
                type_name(&item)
            )))
        })
    }
}

impl Read for PyChunks {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.done {
                return Ok(0);
            }
            match self.next_chunk() {
                Ok(Some(chunk)) => {
                    self.buf = chunk;
                    self.pos = 0;
                }
                Ok(None) => self.done = true,
                Err(e) => {
                    self.done = true;
                    *self.raised.lock() = Some(e);
                    return Err(std::io::Error::other("the Python iterator raised"));
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
