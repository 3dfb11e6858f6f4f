//! Counts of the requests a graph handle sends to an object store, by kind:
//! the cost model of a graph on S3, where every request is a round trip and
//! is billed. Every store the handle's own Lance session opens for `s3://`
//! passes through the counter, Lance's dataset I/O included. The same
//! provider keeps listings off the write path (see `new_store`). Each
//! request is traced (`OMNIGRAPH_LOG=omnigraph::storage::requests=trace`).
//!
//! On a remote store what an operation costs is the number of requests it
//! waits for one after another, not their count: the counter also keeps
//! the longest chain of requests each sent after the one before it
//! answered (`Requests::serial`), and can add a delay to every request
//! (`Latency`, for measuring) so that requests sent together overlap and
//! requests sent one after another do not.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use lance::io::{ObjectStoreParams, ObjectStoreRegistry, WrappingObjectStore};
use lance::session::Session;
use lance_io::object_store::ObjectStoreProvider;
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use serde::Serialize;
use tracing::trace;
use url::Url;

use super::filecache::FileCache;

/// Requests by kind since the process started (or since `reset`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Requests {
    pub get: u64,
    pub head: u64,
    pub put: u64,
    /// Create-if-absent (If-None-Match) and replace-if-tag-matches (If-Match).
    pub conditional_put: u64,
    pub list: u64,
    pub delete: u64,
    pub copy: u64,
    /// Serial hops: the longest chain of these requests in which each was
    /// sent after the one before it had answered. Under a delay that
    /// dwarfs the work between requests, the operation's wall time is
    /// about this many delays.
    pub serial: u64,
}

impl Requests {
    /// Every request (serial hops are not requests).
    pub fn total(&self) -> u64 {
        self.get + self.head + self.put + self.conditional_put + self.list + self.delete + self.copy
    }

    pub fn since(&self, before: &Requests) -> Requests {
        Requests {
            get: self.get - before.get,
            head: self.head - before.head,
            put: self.put - before.put,
            conditional_put: self.conditional_put - before.conditional_put,
            list: self.list - before.list,
            delete: self.delete - before.delete,
            copy: self.copy - before.copy,
            serial: self.serial - before.serial,
        }
    }
}

impl fmt::Display for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests ({} serial): {} GET, {} HEAD, {} PUT, {} conditional PUT, {} LIST, {} DELETE, {} COPY",
            self.total(),
            self.serial,
            self.get,
            self.head,
            self.put,
            self.conditional_put,
            self.list,
            self.delete,
            self.copy
        )
    }
}

/// The live counters of one session's object stores.
#[derive(Default, Debug)]
pub struct Counters {
    get: AtomicU64,
    head: AtomicU64,
    put: AtomicU64,
    conditional_put: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
    copy: AtomicU64,
    /// The deepest chain position of an answered request.
    answered: AtomicU64,
    latency: Latency,
    /// At most `latency.max_concurrent` requests under way, when set.
    slots: Option<Arc<tokio::sync::Semaphore>>,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A delay added to every request of a session's remote stores, and a cap
/// on how many may be under way at once: a local store made to answer as a
/// distant one does, to measure an operation's serial hops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    pub delay: Duration,
    /// 0: no cap.
    pub max_concurrent: usize,
}

impl Latency {
    /// From `OMNIGRAPH_S3_DELAY_MS` and `OMNIGRAPH_S3_MAX_CONCURRENT`
    /// (unset: none), so that a CLI process can be measured too.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Self {
            delay: Duration::from_millis(var("OMNIGRAPH_S3_DELAY_MS").unwrap_or(0)),
            max_concurrent: var("OMNIGRAPH_S3_MAX_CONCURRENT").unwrap_or(0) as usize,
        }
    }
}

/// One request's place in the chain: one deeper than the deepest request
/// answered before it was sent.
struct Hop {
    c: Arc<Counters>,
    depth: u64,
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Hop {
    async fn start(c: Arc<Counters>) -> Hop {
        let slot = match &c.slots {
            Some(s) => Some(
                s.clone()
                    .acquire_owned()
                    .await
                    .expect("the slots are never closed"),
            ),
            None => None,
        };
        let depth = c.answered.load(Ordering::Acquire) + 1;
        if !c.latency.delay.is_zero() {
            tokio::time::sleep(c.latency.delay).await;
        }
        Hop {
            c,
            depth,
            _slot: slot,
        }
    }
}

impl Drop for Hop {
    fn drop(&mut self) {
        self.c.answered.fetch_max(self.depth, Ordering::AcqRel);
    }
}

impl Counters {
    fn new(latency: Latency) -> Self {
        Self {
            latency,
            slots: (latency.max_concurrent > 0)
                .then(|| Arc::new(tokio::sync::Semaphore::new(latency.max_concurrent))),
            ..Self::default()
        }
    }

    /// The requests counted so far.
    pub fn read(&self) -> Requests {
        Requests {
            get: self.get.load(Ordering::Relaxed),
            head: self.head.load(Ordering::Relaxed),
            put: self.put.load(Ordering::Relaxed),
            conditional_put: self.conditional_put.load(Ordering::Relaxed),
            list: self.list.load(Ordering::Relaxed),
            delete: self.delete.load(Ordering::Relaxed),
            copy: self.copy.load(Ordering::Relaxed),
            serial: self.answered.load(Ordering::Acquire),
        }
    }
}

/// The schemes whose stores are counted: the remote ones.
const COUNTED: &[&str] = &["s3"];

/// What the handles opened with one session share: object-store
/// connections and caches. A `memory://` graph lives as long as its session.
#[derive(Clone, Debug, Default)]
pub struct StorageSession(pub(super) Arc<Session>);

/// A session whose remote stores count their requests.
pub fn counted_session() -> (StorageSession, Arc<Counters>) {
    counted_session_with(Latency::default())
}

/// A session whose remote stores count their requests and answer each
/// after `latency`.
pub fn counted_session_with(latency: Latency) -> (StorageSession, Arc<Counters>) {
    let counters = Arc::new(Counters::new(latency));
    let files = FileCache::default();
    let registry = ObjectStoreRegistry::default();
    for scheme in COUNTED {
        if let Some(inner) = registry.get_provider(scheme) {
            registry.insert(
                scheme,
                Arc::new(CountingProvider {
                    inner,
                    counters: counters.clone(),
                    files: files.clone(),
                }),
            );
        }
    }
    let session = Session::new(
        lance::dataset::DEFAULT_INDEX_CACHE_SIZE,
        lance::dataset::DEFAULT_METADATA_CACHE_SIZE,
        Arc::new(registry),
    );
    (StorageSession(Arc::new(session)), counters)
}

#[derive(Debug)]
struct CountingProvider {
    inner: Arc<dyn ObjectStoreProvider>,
    counters: Arc<Counters>,
    /// In front of the counter: a kept file's read is no request.
    files: FileCache,
}

#[async_trait::async_trait]
impl ObjectStoreProvider for CountingProvider {
    async fn new_store(
        &self,
        base_path: Url,
        params: &ObjectStoreParams,
    ) -> lance::Result<lance::io::ObjectStore> {
        let mut store = self.inner.new_store(base_path, params).await?;
        store.apply_wrapper(&CountingWrapper(self.counters.clone()));
        store.apply_wrapper(&self.files.wrapper());
        // Lance finds the versions committed since a base by listing the
        // table's `_versions/` where listings come back in key order, and by
        // a version hint plus probes where they do not. Every table commit
        // asks, so on S3 that is a LIST per table per write; the hint path
        // is point requests only (GET, HEAD, and a PUT of the hint).
        store.list_is_lexically_ordered = false;
        Ok(store)
    }

    fn extract_path(&self, url: &Url) -> lance::Result<Path> {
        self.inner.extract_path(url)
    }

    fn calculate_object_store_prefix(
        &self,
        url: &Url,
        storage_options: Option<&std::collections::HashMap<String, String>>,
    ) -> lance::Result<String> {
        self.inner
            .calculate_object_store_prefix(url, storage_options)
    }
}

#[derive(Debug)]
struct CountingWrapper(Arc<Counters>);

impl WrappingObjectStore for CountingWrapper {
    fn wrap(&self, _prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(Counting {
            inner: original,
            c: self.0.clone(),
        })
    }

    /// Paged listings go through the counted store instead.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        _original: Arc<dyn PaginatedListStore>,
    ) -> Option<Arc<dyn PaginatedListStore>> {
        None
    }
}

#[derive(Debug)]
struct Counting {
    inner: Arc<dyn ObjectStore>,
    c: Arc<Counters>,
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        match opts.mode {
            PutMode::Overwrite => bump(&self.c.put),
            PutMode::Create | PutMode::Update(_) => bump(&self.c.conditional_put),
        }
        let hop = Hop::start(self.c.clone()).await;
        trace!(depth = hop.depth, kind = ?opts.mode, %location, "PUT");
        self.inner.put_opts(location, payload, opts).await
    }

    /// A multipart upload counts once: its parts are one object's bytes.
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        bump(&self.c.put);
        let hop = Hop::start(self.c.clone()).await;
        trace!(depth = hop.depth, %location, "multipart PUT");
        self.inner.put_multipart_opts(location, opts).await
    }

    /// Ranged reads come here too, one request each (the trait's
    /// `get_ranges` coalesces, then calls this).
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        bump(if options.head {
            &self.c.head
        } else {
            &self.c.get
        });
        let hop = Hop::start(self.c.clone()).await;
        trace!(depth = hop.depth, head = options.head, range = ?options.range, %location, "GET");
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let c = self.c.clone();
        let counted = locations
            .map(move |p| {
                bump(&c.delete);
                p
            })
            .boxed();
        delayed(self.c.clone(), self.inner.delete_stream(counted))
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.c.list);
        trace!(?prefix, "LIST");
        delayed(self.c.clone(), self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.c.list);
        delayed(self.c.clone(), self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        bump(&self.c.list);
        let hop = Hop::start(self.c.clone()).await;
        trace!(depth = hop.depth, ?prefix, "LIST");
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        bump(&self.c.copy);
        let hop = Hop::start(self.c.clone()).await;
        trace!(depth = hop.depth, %from, %to, "COPY");
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        bump(&self.c.copy);
        bump(&self.c.delete);
        let hop = Hop::start(self.c.clone()).await;
        trace!(depth = hop.depth, %from, %to, "RENAME");
        self.inner.rename_opts(from, to, options).await
    }
}

/// A streamed request (a listing, a batch of deletes) as one hop: sent
/// after the delay, answered when the stream ends.
fn delayed<T: Send + 'static>(
    c: Arc<Counters>,
    inner: BoxStream<'static, object_store::Result<T>>,
) -> BoxStream<'static, object_store::Result<T>> {
    let mut inner = Some(inner);
    futures::stream::once(Hop::start(c))
        .flat_map(move |hop| {
            let mut hop = Some(hop);
            let mut inner = inner.take().expect("one hop, once");
            futures::stream::poll_fn(move |cx| {
                let next = inner.poll_next_unpin(cx);
                if let std::task::Poll::Ready(None) = next {
                    hop.take();
                }
                next
            })
        })
        .boxed()
}

/// The storage library's own cost of a 1-row commit, the floor a graph
/// commit is measured against: one row written to a one-column Lance table
/// at `uri` through `session`, creating the table (`append` false) or
/// appended to it.
pub async fn lance_one_row(
    session: &StorageSession,
    uri: &str,
    append: bool,
) -> crate::error::Result<()> {
    use arrow_array::{RecordBatch, RecordBatchIterator, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use lance::Dataset;
    use lance::dataset::WriteMode;
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)]));
    let batch = |v: &str| {
        RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(vec![v]))])
            .expect("one column")
    };
    let write = |mode, v: &str| {
        let reader = RecordBatchIterator::new([Ok(batch(v))], schema.clone());
        // Lance's own defaults: the floor is the library as anyone uses it.
        let params = lance::dataset::WriteParams {
            mode,
            session: Some(session.0.clone()),
            ..Default::default()
        };
        async move { Dataset::write(reader, uri, Some(params)).await }
    };
    match append {
        false => write(WriteMode::Create, "first").await?,
        true => write(WriteMode::Append, "next").await?,
    };
    Ok(())
}
