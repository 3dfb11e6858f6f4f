//! The one tokio runtime of the module, and the two ways Python waits on
//! the engine: a blocking call with the GIL released, or an asyncio
//! awaitable. After `fork()` the child has none of the parent's worker
//! threads, so the runtime is made again, per process.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{ContextExt, JoinError, Runtime as AsyncRuntime};
use tokio::runtime::Runtime;

/// The process that made the runtime, and the runtime.
static RUNTIME: Mutex<Option<(u32, Arc<Runtime>)>> = Mutex::new(None);

/// This process's runtime, made on first use and again in a forked child.
pub fn runtime() -> Arc<Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock();
    match slot.as_ref() {
        Some((p, rt)) if *p == pid => rt.clone(),
        _ => {
            if let Some((_, inherited)) = slot.take() {
                // The parent's worker threads do not exist here: dropping
                // the runtime would wait on them.
                std::mem::forget(inherited);
            }
            let rt = Arc::new(
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("omnigraph")
                    .build()
                    .expect("a tokio runtime"),
            );
            *slot = Some((pid, rt.clone()));
            rt
        }
    }
}

/// Run `fut` to completion on the runtime with the GIL released, so other
/// Python threads run meanwhile.
pub fn block_on<F, T>(py: Python<'_>, fut: F) -> T
where
    F: Future<Output = T> + Send,
    T: Send,
{
    let rt = runtime();
    py.detach(|| rt.block_on(fut))
}

/// `fut` as an asyncio awaitable of the running loop; the work runs on the
/// runtime's threads, never on the loop's.
pub fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::generic::future_into_py::<Omni, F, T>(py, fut)
}

/// The runtime as pyo3-async-runtimes sees it.
pub struct Omni;

pub struct Joined(tokio::task::JoinError);

impl JoinError for Joined {
    fn is_panic(&self) -> bool {
        self.0.is_panic()
    }
    fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        self.0.into_panic()
    }
}

tokio::task_local! {
    static LOCALS: OnceLock<TaskLocals>;
}

impl AsyncRuntime for Omni {
    type JoinError = Joined;
    type JoinHandle = Pin<Box<dyn Future<Output = Result<(), Joined>> + Send>>;

    fn spawn<F>(fut: F) -> Self::JoinHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let h = runtime().spawn(fut);
        Box::pin(async move { h.await.map_err(Joined) })
    }

    fn spawn_blocking<F>(f: F) -> Self::JoinHandle
    where
        F: FnOnce() + Send + 'static,
    {
        let h = runtime().spawn_blocking(f);
        Box::pin(async move { h.await.map_err(Joined) })
    }
}

impl ContextExt for Omni {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        let cell = OnceLock::new();
        let _ = cell.set(locals);
        Box::pin(LOCALS.scope(cell, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        LOCALS.try_with(|c| c.get().cloned()).unwrap_or_default()
    }
}
