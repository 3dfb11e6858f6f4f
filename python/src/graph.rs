//! The native graph handle. Every method is one engine call, run either
//! to completion with the GIL released (`asynchronous=False`) or as an
//! asyncio awaitable (`True`); the pure-Python layer (`omnigraph.Graph`,
//! `omnigraph.AsyncGraph`) gives them defaults and checks arguments. Values
//! come back in the CLI's `--json` shapes.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use omnigraph::BlobCell;
use omnigraph::StorageSession;
use omnigraph::blob_range as blob;
use omnigraph::{LoadMode, OmniError, Omnigraph, OpenOptions, TableInput, Target};
use parking_lot::RwLock;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde::Serialize;
use serde_json::Value;

use crate::arrow::read_stream;
use crate::convert::{Json, from_py};
use crate::errors::{OrRaise, to_pyerr};
use crate::export::ExportLines;
use crate::input::PyChunks;
use crate::result::QueryResult;
use crate::runtime::{awaitable, block_on};

#[pyclass(frozen, module = "omnigraph._omnigraph", name = "Graph")]
pub struct Graph {
    handle: RwLock<Option<Omnigraph>>,
    /// The process that opened the handle: its actors live on that
    /// process's runtime, which a forked child does not have.
    pid: u32,
    uri: String,
    read_only: bool,
}

/// Run `fut` the way the caller asked: blocking (GIL released) or as an
/// awaitable.
fn call<'py, F, T>(py: Python<'py>, asynchronous: bool, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = omnigraph::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    if asynchronous {
        return awaitable(py, async move { fut.await.map_err(to_pyerr) });
    }
    let out = block_on(py, fut).or_raise()?;
    out.into_bound_py_any(py)
}

fn json<T: Serialize>(v: T) -> omnigraph::Result<Json> {
    Ok(Json(serde_json::to_value(v)?))
}

fn params_json(params: Option<&Bound<'_, PyAny>>) -> PyResult<Value> {
    params.map_or(Ok(Value::Null), from_py)
}

/// Which state a read reads: a branch head, a commit, or a branch as of a
/// graph manifest version.
fn target(
    branch: Option<String>,
    commit: Option<String>,
    version: Option<u64>,
) -> PyResult<Target> {
    let branch = branch.unwrap_or_else(|| "main".into());
    match (commit, version) {
        (Some(_), Some(_)) => Err(to_pyerr(OmniError::BadRequest(
            "give a snapshot (commit) or a version, not both".into(),
        ))),
        (Some(c), None) => Ok(Target::Commit(c)),
        (None, Some(v)) => Ok(Target::Version { version: v, branch }),
        (None, None) => Ok(Target::Branch(branch)),
    }
}

fn mode(m: &str) -> PyResult<LoadMode> {
    m.parse().map_err(to_pyerr)
}

/// The storage session of this process's `memory://` graphs: a memory
/// graph lives as long as its session, so `open` finds what `init` made.
static MEMORY: parking_lot::Mutex<Option<(u32, StorageSession)>> = parking_lot::Mutex::new(None);

fn memory_session() -> StorageSession {
    let pid = std::process::id();
    let mut slot = MEMORY.lock();
    match slot.as_ref() {
        Some((p, s)) if *p == pid => s.clone(),
        _ => {
            let s = StorageSession::default();
            *slot = Some((pid, s.clone()));
            s
        }
    }
}

fn options(uri: &str, actor: Option<String>) -> OpenOptions {
    let mut o = OpenOptions {
        actor,
        ..Default::default()
    };
    if uri.starts_with("memory://") {
        o.session = Some(memory_session());
    }
    o
}

impl Graph {
    fn new(g: Omnigraph) -> Self {
        Self {
            uri: g.uri().to_string(),
            read_only: g.is_read_only(),
            handle: RwLock::new(Some(g)),
            pid: std::process::id(),
        }
    }

    /// The engine handle, unless closed or inherited across a fork.
    fn g(&self) -> PyResult<Omnigraph> {
        if self.pid != std::process::id() {
            return Err(to_pyerr(OmniError::BadRequest(format!(
                "this graph was opened in process {} before a fork; open {} again in this process",
                self.pid, self.uri
            ))));
        }
        self.handle.read().clone().ok_or_else(|| {
            to_pyerr(OmniError::BadRequest(format!(
                "the graph {} is closed",
                self.uri
            )))
        })
    }
}

/// Open the graph at `uri`.
#[pyfunction]
pub fn open(
    py: Python<'_>,
    uri: String,
    read_only: bool,
    actor: Option<String>,
    policy: Option<String>,
    asynchronous: bool,
) -> PyResult<Bound<'_, PyAny>> {
    call(py, asynchronous, async move {
        let mut opts = options(&uri, actor);
        if let Some(p) = policy {
            opts.policy = Some(std::sync::Arc::new(omnigraph::policy::Policy::load(
                std::path::Path::new(&p),
            )?));
        }
        let g = match read_only {
            true => Omnigraph::open_read_only_with(&uri, opts).await?,
            false => Omnigraph::open_with(&uri, opts).await?,
        };
        Ok(Graph::new(g))
    })
}

/// Create a graph at `uri` with the schema source `schema`.
#[pyfunction]
pub fn init(
    py: Python<'_>,
    uri: String,
    schema: String,
    actor: Option<String>,
    asynchronous: bool,
) -> PyResult<Bound<'_, PyAny>> {
    call(py, asynchronous, async move {
        Ok(Graph::new(
            Omnigraph::init_with(&uri, &schema, options(&uri, actor)).await?,
        ))
    })
}

#[pymethods]
impl Graph {
    #[getter]
    fn uri(&self) -> &str {
        &self.uri
    }

    #[getter]
    fn read_only(&self) -> bool {
        self.read_only
    }

    #[getter]
    fn closed(&self) -> bool {
        self.handle.read().is_none()
    }

    /// Stop the handle's actors; later calls fail. Closing twice is nothing.
    fn close<'py>(&self, py: Python<'py>, asynchronous: bool) -> PyResult<Bound<'py, PyAny>> {
        let g = match self.pid == std::process::id() {
            true => self.handle.write().take(),
            // A forked child cannot reach the parent's actors.
            false => None,
        };
        call(py, asynchronous, async move {
            if let Some(g) = g {
                g.close().await;
            }
            Ok(())
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        &self,
        py: Python<'py>,
        source: String,
        name: Option<String>,
        params: Option<Bound<'py, PyAny>>,
        branch: Option<String>,
        snapshot: Option<String>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let params = params_json(params.as_ref())?;
        let at = target(branch, snapshot, version)?;
        call(py, asynchronous, async move {
            let name = omnigraph::query_name(&source, name)?;
            let r = g.query(&at, &source, &name, &params).await?;
            Ok(QueryResult(Arc::new(r)))
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn explain<'py>(
        &self,
        py: Python<'py>,
        source: String,
        name: Option<String>,
        params: Option<Bound<'py, PyAny>>,
        branch: Option<String>,
        snapshot: Option<String>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let params = params_json(params.as_ref())?;
        let at = target(branch, snapshot, version)?;
        call(py, asynchronous, async move {
            let name = omnigraph::query_name(&source, name)?;
            json(g.explain(&at, &source, &name, &params).await?)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn mutate<'py>(
        &self,
        py: Python<'py>,
        source: String,
        name: Option<String>,
        params: Option<Bound<'py, PyAny>>,
        branch: String,
        if_commit: Option<String>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let params = params_json(params.as_ref())?;
        call(py, asynchronous, async move {
            let name = omnigraph::query_name(&source, name)?;
            json(
                g.mutate_if(&branch, &source, &name, &params, if_commit.as_deref())
                    .await?,
            )
        })
    }

    /// Load `data` as one commit. `kind` says what it is: `text` (JSONL),
    /// `path` (a JSONL file), `chunks` (an iterator of JSONL `str` chunks,
    /// each ending at a line end) or `tables` (a list of `(type_name,
    /// table)`, each table exporting `__arrow_c_stream__`).
    #[allow(clippy::too_many_arguments)]
    fn load<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        data: Bound<'py, PyAny>,
        mode: &str,
        branch: String,
        from_: Option<String>,
        progress: Option<Py<PyAny>>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let mode = self::mode(mode)?;
        let mut raised = None;
        let input = match kind {
            "text" => Input::Text(data.extract::<String>()?.into_bytes()),
            "path" => Input::Path(data.extract()?),
            "chunks" => {
                let chunks = PyChunks::new(data.try_iter()?.unbind());
                raised = Some(chunks.raised());
                Input::Chunks(chunks)
            }
            "tables" => {
                let mut inputs = Vec::new();
                for item in data.try_iter()? {
                    let (type_name, table): (String, Bound<'py, PyAny>) = item?.extract()?;
                    inputs.push(TableInput {
                        type_name,
                        batches: Box::new(read_stream(&table)?),
                    });
                }
                Input::Tables(inputs)
            }
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown load input {other:?}"
                )));
            }
        };
        let fut = async move {
            let (from, progress) = (from_.as_deref(), reporter(progress));
            let r = match input {
                Input::Text(bytes) => {
                    let input = std::io::Cursor::new(bytes);
                    g.load_from(&branch, from, input, mode, progress).await
                }
                Input::Path(path) => match std::fs::File::open(&path) {
                    Ok(file) => {
                        let input = std::io::BufReader::with_capacity(1 << 20, file);
                        g.load_from(&branch, from, input, mode, progress).await
                    }
                    Err(e) => Err(OmniError::BadRequest(format!(
                        "cannot read {}: {e}",
                        path.display()
                    ))),
                },
                Input::Chunks(chunks) => g.load_from(&branch, from, chunks, mode, progress).await,
                Input::Tables(tables) => g.load_tables(&branch, from, tables, mode, progress).await,
            };
            r.map_err(|e| (e, raised.and_then(|r| r.lock().take())))
        };
        // An exception the iterator raised is the caller's to see, not the
        // I/O error the loader saw.
        let unpack = |r: Result<_, (OmniError, Option<PyErr>)>| match r {
            Ok(report) => json(report).map_err(to_pyerr),
            Err((_, Some(raised))) => Err(raised),
            Err((e, None)) => Err(to_pyerr(e)),
        };
        if asynchronous {
            return awaitable(py, async move { unpack(fut.await) });
        }
        unpack(block_on(py, fut))?.into_bound_py_any(py)
    }

    fn branch_create<'py>(
        &self,
        py: Python<'py>,
        name: String,
        from_: String,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            json(g.branch_create(&name, &from_).await?)
        })
    }

    fn branch_list<'py>(&self, py: Python<'py>, asynchronous: bool) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(
            py,
            asynchronous,
            async move { json(g.branch_list().await?) },
        )
    }

    fn branch_delete<'py>(
        &self,
        py: Python<'py>,
        name: String,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            g.branch_delete(&name).await?;
            json(serde_json::json!({ "deleted": name }))
        })
    }

    fn merge<'py>(
        &self,
        py: Python<'py>,
        source: String,
        into: String,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            json(g.merge(&source, &into).await?)
        })
    }

    fn commits<'py>(
        &self,
        py: Python<'py>,
        branch: String,
        limit: Option<usize>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            json(g.commits(&branch, limit).await?)
        })
    }

    fn commit<'py>(
        &self,
        py: Python<'py>,
        id: String,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move { json(g.commit(&id).await?) })
    }

    fn changes<'py>(
        &self,
        py: Python<'py>,
        id: String,
        type_name: Option<String>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            json(g.commit_changes(&id, type_name.as_deref()).await?)
        })
    }

    /// A page of `branch`'s change feed.
    #[allow(clippy::too_many_arguments)]
    fn feed<'py>(
        &self,
        py: Python<'py>,
        branch: String,
        cursor: Option<String>,
        start: Option<String>,
        types: Vec<String>,
        kind: Option<String>,
        ops: Vec<String>,
        limit: Option<usize>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            let req = omnigraph::ChangeRequest {
                branch,
                cursor,
                start: start.as_deref().unwrap_or("now").parse()?,
                types,
                kind,
                ops,
                limit,
            };
            json(g.changes(&req).await?)
        })
    }

    fn snapshot<'py>(
        &self,
        py: Python<'py>,
        branch: Option<String>,
        commit: Option<String>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let at = target(branch, commit, version)?;
        call(
            py,
            asynchronous,
            async move { json(g.snapshot(&at).await?) },
        )
    }

    fn schema_plan<'py>(
        &self,
        py: Python<'py>,
        source: String,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            json(g.plan_schema(&source).await?)
        })
    }

    fn schema_apply<'py>(
        &self,
        py: Python<'py>,
        source: String,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            json(g.apply_schema(&source).await?)
        })
    }

    /// The accepted schema's source on `main`, or as of a graph version.
    fn schema_source<'py>(
        &self,
        py: Python<'py>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            let at = version.map(|version| Target::Version {
                version,
                branch: "main".into(),
            });
            let source = g.schema_source(at.as_ref()).await?;
            json(serde_json::json!({ "version": version, "source": source }))
        })
    }

    fn optimize<'py>(
        &self,
        py: Python<'py>,
        branch: String,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(
            py,
            asynchronous,
            async move { json(g.optimize(&branch).await?) },
        )
    }

    fn gc<'py>(
        &self,
        py: Python<'py>,
        dry_run: bool,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move { json(g.gc(dry_run).await?) })
    }

    fn cleanup<'py>(
        &self,
        py: Python<'py>,
        older_than: String,
        keep_versions: Option<usize>,
        dry_run: bool,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        call(py, asynchronous, async move {
            let policy = omnigraph::RetentionPolicy {
                older_than: omnigraph::parse_duration(&older_than)?,
                keep_versions,
                dry_run,
            };
            json(g.cleanup(policy).await?)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn blob_stat<'py>(
        &self,
        py: Python<'py>,
        type_name: String,
        id: String,
        property: String,
        branch: Option<String>,
        snapshot: Option<String>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let at = target(branch, snapshot, version)?;
        let cell = BlobCell::new(&type_name, &id, &property);
        call(py, asynchronous, async move {
            Ok(Json(g.read_blob_at(&at, &cell).await?.stat()))
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn read_blob<'py>(
        &self,
        py: Python<'py>,
        type_name: String,
        id: String,
        property: String,
        offset: u64,
        length: Option<u64>,
        branch: Option<String>,
        snapshot: Option<String>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let at = target(branch, snapshot, version)?;
        let cell = BlobCell::new(&type_name, &id, &property);
        call(py, asynchronous, async move {
            let reader = g.read_blob_at(&at, &cell).await?.into_reader();
            let range = blob::clamp(offset, length, reader.len())?;
            let mut out = Vec::with_capacity((range.end - range.start) as usize);
            for step in blob::steps(range) {
                out.extend_from_slice(&reader.read_range(step).await?);
            }
            Ok(Bytes(out))
        })
    }

    /// The graph as JSONL lines, produced as they are taken.
    fn export_lines(
        &self,
        branch: Option<String>,
        snapshot: Option<String>,
        version: Option<u64>,
    ) -> PyResult<ExportLines> {
        let g = self.g()?;
        Ok(ExportLines::start(g, target(branch, snapshot, version)?))
    }

    /// Write the graph as JSONL to `path`; the number of lines.
    fn export_path<'py>(
        &self,
        py: Python<'py>,
        path: PathBuf,
        branch: Option<String>,
        snapshot: Option<String>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let at = target(branch, snapshot, version)?;
        call(py, asynchronous, async move {
            crate::export::to_path(&g, &at, &path).await
        })
    }

    /// Where a type's table is at a graph version (for `dataset()`).
    fn table_location<'py>(
        &self,
        py: Python<'py>,
        type_name: String,
        branch: Option<String>,
        version: Option<u64>,
        asynchronous: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let g = self.g()?;
        let at = target(branch, None, version)?;
        call(py, asynchronous, async move {
            json(g.table_location(&at, &type_name).await?)
        })
    }

    fn __repr__(&self) -> String {
        let state = match self.closed() {
            true => ", closed",
            false if self.read_only => ", read_only",
            false => "",
        };
        format!("Graph({:?}{state})", self.uri)
    }
}

/// What a load reads.
enum Input {
    Text(Vec<u8>),
    Path(PathBuf),
    Chunks(PyChunks),
    Tables(Vec<TableInput>),
}

/// Bytes that become a Python `bytes` once the GIL is held.
pub struct Bytes(Vec<u8>);

impl<'py> IntoPyObject<'py> for Bytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.0))
    }
}

/// The load's progress as calls of `progress(bytes_read)`; an exception
/// the callback raises is printed, not propagated (the load goes on).
fn reporter(progress: Option<Py<PyAny>>) -> impl Fn(u64) + Send + Sync + 'static {
    move |bytes| {
        if let Some(cb) = &progress {
            Python::attach(|py| {
                if let Err(e) = cb.call1(py, (bytes,)) {
                    e.print(py);
                }
            });
        }
    }
}
