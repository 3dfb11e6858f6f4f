//! Counts of the requests a graph handle sends to an object store, by kind:
//! the cost model of a graph on S3, where every request is a round trip and
//! is billed. Every store the handle's own Lance session opens for `s3://`
//! passes through the counter, Lance's dataset I/O included. The same
//! provider keeps listings off the write path (see `new_store`). Each
//! request is traced (`OMNIGRAPH_LOG=omnigraph::storage::requests=trace`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

impl Requests {
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
        }
    }
}

impl fmt::Display for Requests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests: {} GET, {} HEAD, {} PUT, {} conditional PUT, {} LIST, {} DELETE, {} COPY",
            self.total(),
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
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
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
    let counters = Arc::new(Counters::default());
    let registry = ObjectStoreRegistry::default();
    for scheme in COUNTED {
        if let Some(inner) = registry.get_provider(scheme) {
            registry.insert(
                scheme,
                Arc::new(CountingProvider {
                    inner,
                    counters: counters.clone(),
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
        trace!(kind = ?opts.mode, %location, "PUT");
        self.inner.put_opts(location, payload, opts).await
    }

    /// A multipart upload counts once: its parts are one object's bytes.
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        bump(&self.c.put);
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
        trace!(head = options.head, range = ?options.range, %location, "GET");
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
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.c.list);
        trace!(?prefix, "LIST");
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        bump(&self.c.list);
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        bump(&self.c.list);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        bump(&self.c.copy);
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
        self.inner.rename_opts(from, to, options).await
    }
}
