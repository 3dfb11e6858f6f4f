//! A graph's JSONL export for Python: to a file, or as an iterator whose
//! lines are produced on the runtime's blocking threads while Python takes
//! them (a bounded channel between, so the export never runs far ahead).

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

use crossbeam_channel::{Receiver, bounded};
use omnigraph::results::LineChunks;
use omnigraph::{OmniError, Omnigraph, Target};
use parking_lot::Mutex;
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;

use crate::errors::to_pyerr;
use crate::runtime::runtime;

/// Chunks of whole lines in flight between the export and Python.
const CHUNKS_IN_FLIGHT: usize = 8;

/// Export `at` to `path` (through a temporary file renamed at the end, so
/// a failed export leaves no partial file); the number of lines.
pub async fn to_path(g: &Omnigraph, at: &Target, path: &Path) -> omnigraph::Result<usize> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = std::path::PathBuf::from(tmp);
    let cannot = |p: &Path, e: std::io::Error| {
        OmniError::BadRequest(format!("cannot write {}: {e}", p.display()))
    };
    let file = std::fs::File::create(&tmp).map_err(|e| cannot(&tmp, e))?;
    let mut out = std::io::BufWriter::new(file);
    let written = async {
        let n = g.export(at, &mut out).await?;
        out.flush()?;
        Ok::<_, OmniError>(n)
    }
    .await;
    drop(out);
    match written {
        Ok(n) => {
            std::fs::rename(&tmp, path).map_err(|e| cannot(path, e))?;
            Ok(n)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// An iterator of the export's lines (each without its line end).
#[pyclass(module = "omnigraph._omnigraph", name = "ExportLines")]
pub struct ExportLines {
    rx: Receiver<Result<String, OmniError>>,
    pending: Mutex<VecDeque<String>>,
}

impl ExportLines {
    pub fn start(g: Omnigraph, at: Target) -> Self {
        let (tx, rx) = bounded(CHUNKS_IN_FLIGHT);
        let rt = runtime();
        let handle = rt.handle().clone();
        rt.spawn_blocking(move || {
            let lines = tx.clone();
            let mut w = LineChunks::new(move |chunk: Vec<u8>| {
                let text = String::from_utf8(chunk).map_err(std::io::Error::other)?;
                lines.send(Ok(text)).map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the reader left")
                })
            });
            let done = handle.block_on(async {
                g.export(&at, &mut w).await?;
                w.flush()?;
                Ok::<_, OmniError>(())
            });
            match done {
                // The reader stopped taking lines: nothing to tell.
                Err(OmniError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
                Ok(()) => {}
            }
        });
        Self {
            rx,
            pending: Mutex::new(VecDeque::new()),
        }
    }
}

#[pymethods]
impl ExportLines {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<String> {
        loop {
            if let Some(line) = self.pending.lock().pop_front() {
                return Ok(line);
            }
            let rx = self.rx.clone();
            match py.detach(move || rx.recv()) {
                Ok(Ok(text)) => self.pending.lock().extend(text.lines().map(str::to_string)),
                Ok(Err(e)) => return Err(to_pyerr(e)),
                Err(_) => return Err(PyStopIteration::new_err(())),
            }
        }
    }
}
