//! The bytes of small immutable files a session wrote or read whole, kept
//! in memory: Lance's data, deletion and index files are named once (a
//! fresh id each) and never rewritten, so a copy can answer every later
//! read of them. On a remote store that is a round trip saved each time a
//! file is opened again: Lance reads a file no bigger than its block size
//! whole on every open (one GET per reader, and a key lookup opens the
//! key column's file, then the row's), and a writer's process reads back
//! the rows it just wrote (the first read of its own write).
//!
//! Only whole objects are kept, at most `FILE_MAX` bytes each and
//! `FILES_MAX` in all (least recently used go first); a ranged read of a
//! kept file is cut from it. A delete through the session forgets the
//! file. Nothing else is kept: manifests, leases, sidecars and graph
//! versions are probed for what they say now.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use lance::io::WrappingObjectStore;
use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

/// The largest file kept: a data file of a small write, a deletion file,
/// the files Lance reads whole (its block size on object stores is 64 KiB).
pub const FILE_MAX: usize = 1 << 20;

/// The bytes kept in all, per session.
pub const FILES_MAX: u64 = 64 << 20;

/// Whether a file under a Lance table is written once and never rewritten:
/// its data files, deletion files and index files.
pub fn immutable(path: &Path) -> bool {
    let mut parts = path.parts();
    let mut in_table = false;
    while let Some(p) = parts.next() {
        if in_table && matches!(p.as_ref(), "data" | "_deletions" | "_indices") {
            // A file below it, not the folder itself.
            return parts.next().is_some();
        }
        in_table = p.as_ref().ends_with(".lance");
    }
    false
}

#[derive(Clone, Hash, PartialEq, Eq)]
struct Key {
    /// The store's prefix (its bucket): one session may reach several.
    store: Arc<str>,
    path: Path,
}

struct Kept {
    bytes: Bytes,
    meta: ObjectMeta,
}

/// One session's kept files.
#[derive(Clone)]
pub struct FileCache(moka::sync::Cache<Key, Arc<Kept>>);

impl Default for FileCache {
    fn default() -> Self {
        Self(
            moka::sync::Cache::builder()
                .max_capacity(FILES_MAX)
                .weigher(|_, k: &Arc<Kept>| k.bytes.len().try_into().unwrap_or(u32::MAX))
                .build(),
        )
    }
}

impl fmt::Debug for FileCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileCache({} files)", self.0.entry_count())
    }
}

impl FileCache {
    /// The wrapper that puts this cache in front of a session's stores.
    pub fn wrapper(&self) -> FileCacheWrapper {
        FileCacheWrapper(self.clone())
    }
}

#[derive(Debug)]
pub struct FileCacheWrapper(FileCache);

impl WrappingObjectStore for FileCacheWrapper {
    fn wrap(&self, prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(Caching {
            inner: original,
            store: prefix.into(),
            cache: self.0.clone(),
        })
    }

    /// Listings are not cached: they go to the wrapped store.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        _original: Arc<dyn PaginatedListStore>,
    ) -> Option<Arc<dyn PaginatedListStore>> {
        None
    }
}

#[derive(Debug)]
struct Caching {
    inner: Arc<dyn ObjectStore>,
    store: Arc<str>,
    cache: FileCache,
}

impl fmt::Display for Caching {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Caching({})", self.inner)
    }
}

impl Caching {
    fn key(&self, path: &Path) -> Key {
        Key {
            store: self.store.clone(),
            path: path.clone(),
        }
    }
}

/// A read asks only for bytes (no condition, no version): a kept copy
/// answers it as the store would.
fn plain(o: &GetOptions) -> bool {
    o.if_match.is_none()
        && o.if_none_match.is_none()
        && o.if_modified_since.is_none()
        && o.if_unmodified_since.is_none()
        && o.version.is_none()
}

fn answer(kept: &Kept, options: &GetOptions) -> Option<GetResult> {
    let size = kept.meta.size;
    let range = match &options.range {
        None => 0..size,
        // An invalid range goes to the store, for the store's own error.
        Some(r) => r.as_range(size).ok()?,
    };
    let bytes = if options.head {
        Bytes::new()
    } else {
        kept.bytes.slice(range.start as usize..range.end as usize)
    };
    Some(GetResult {
        payload: GetResultPayload::Stream(futures::stream::once(async move { Ok(bytes) }).boxed()),
        meta: kept.meta.clone(),
        range,
        attributes: Default::default(),
        extensions: Default::default(),
    })
}

#[async_trait::async_trait]
impl ObjectStore for Caching {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let keep = immutable(location)
            && !matches!(opts.mode, PutMode::Update(_))
            && payload.content_length() <= FILE_MAX;
        let copy = keep.then(|| payload.clone());
        let put = self.inner.put_opts(location, payload, opts).await?;
        if let Some(copy) = copy {
            let bytes: Bytes = copy.into();
            let meta = ObjectMeta {
                location: location.clone(),
                last_modified: chrono::Utc::now(),
                size: bytes.len() as u64,
                e_tag: put.e_tag.clone(),
                version: put.version.clone(),
            };
            self.cache
                .0
                .insert(self.key(location), Arc::new(Kept { bytes, meta }));
        }
        Ok(put)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        if !immutable(location) || !plain(&options) {
            return self.inner.get_opts(location, options).await;
        }
        let key = self.key(location);
        if let Some(kept) = self.cache.0.get(&key)
            && let Some(r) = answer(&kept, &options)
        {
            return Ok(r);
        }
        let whole = options.range.is_none() && !options.head;
        let got = self.inner.get_opts(location, options).await?;
        if !whole || got.meta.size > FILE_MAX as u64 {
            return Ok(got);
        }
        let meta = got.meta.clone();
        let range = got.range.clone();
        let attributes = got.attributes.clone();
        let bytes = got.bytes().await?;
        self.cache.0.insert(
            key,
            Arc::new(Kept {
                bytes: bytes.clone(),
                meta: meta.clone(),
            }),
        );
        Ok(GetResult {
            payload: GetResultPayload::Stream(
                futures::stream::once(async move { Ok(bytes) }).boxed(),
            ),
            meta,
            range,
            attributes,
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let cache = self.cache.clone();
        let store = self.store.clone();
        let forgotten = locations
            .map(move |p| {
                if let Ok(path) = &p {
                    cache.0.invalidate(&Key {
                        store: store.clone(),
                        path: path.clone(),
                    });
                }
                p
            })
            .boxed();
        self.inner.delete_stream(forgotten)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.cache.0.invalidate(&self.key(to));
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.cache.0.invalidate(&self.key(from));
        self.cache.0.invalidate(&self.key(to));
        self.inner.rename_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{GetRange, ObjectStoreExt};

    /// A caching store over `inner`, and the inner store itself, to change
    /// what is stored behind the cache's back.
    fn caching() -> (Caching, Arc<InMemory>) {
        let inner = Arc::new(InMemory::new());
        let c = Caching {
            inner: inner.clone(),
            store: "bucket".into(),
            cache: FileCache::default(),
        };
        (c, inner)
    }

    async fn read(c: &Caching, p: &Path, range: Option<GetRange>) -> object_store::Result<Bytes> {
        let o = GetOptions {
            range,
            ..Default::default()
        };
        c.get_opts(p, o).await?.bytes().await
    }

    #[tokio::test]
    async fn a_written_data_file_is_read_from_memory_until_deleted() {
        let (c, inner) = caching();
        let data = Path::from("g/nodes/P.lance/data/01ab.lance");
        c.put(&data, Bytes::from_static(b"0123456789").into())
            .await
            .unwrap();
        // Gone from the store: the kept copy answers, whole and ranged.
        inner.delete(&data).await.unwrap();
        assert_eq!(read(&c, &data, None).await.unwrap(), &b"0123456789"[..]);
        assert_eq!(
            read(&c, &data, Some(GetRange::Bounded(2..5)))
                .await
                .unwrap(),
            &b"234"[..]
        );
        assert_eq!(
            read(&c, &data, Some(GetRange::Suffix(3))).await.unwrap(),
            &b"789"[..]
        );
        let head = c.head(&data).await.unwrap();
        assert_eq!(head.size, 10);
        // A delete through the session forgets it.
        c.delete(&data).await.unwrap();
        assert!(matches!(
            read(&c, &data, None).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn a_file_read_whole_is_kept_and_a_manifest_never_is() {
        let (c, inner) = caching();
        let data = Path::from("g/nodes/P.lance/data/02cd.lance");
        let manifest = Path::from("g/nodes/P.lance/_versions/7.manifest");
        inner
            .put(&data, Bytes::from_static(b"rows").into())
            .await
            .unwrap();
        inner
            .put(&manifest, Bytes::from_static(b"v7").into())
            .await
            .unwrap();
        assert_eq!(read(&c, &data, None).await.unwrap(), &b"rows"[..]);
        assert_eq!(read(&c, &manifest, None).await.unwrap(), &b"v7"[..]);
        inner.delete(&data).await.unwrap();
        inner.delete(&manifest).await.unwrap();
        assert_eq!(read(&c, &data, None).await.unwrap(), &b"rows"[..]);
        assert!(matches!(
            read(&c, &manifest, None).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn a_file_over_the_limit_is_not_kept() {
        let (c, inner) = caching();
        let data = Path::from("g/nodes/P.lance/data/03ef.lance");
        c.put(&data, Bytes::from(vec![7u8; FILE_MAX + 1]).into())
            .await
            .unwrap();
        inner.delete(&data).await.unwrap();
        assert!(matches!(
            read(&c, &data, None).await,
            Err(object_store::Error::NotFound { .. })
        ));
    }

    #[test]
    fn only_files_under_a_table_s_write_once_folders_are_immutable() {
        for p in [
            "g.omni/nodes/Person.lance/data/0101abc.lance",
            "g.omni/edges/Knows.lance/_deletions/3-7-99.arrow",
            "g.omni/nodes/Person.lance/_indices/5f1e/index.idx",
        ] {
            assert!(immutable(&Path::from(p)), "{p}");
        }
        for p in [
            "g.omni/nodes/Person.lance/_versions/18446744073709551613.manifest",
            "g.omni/nodes/Person.lance/data",
            "g.omni/_graph/versions/00000000000000000002.json",
            "g.omni/_graph/latest",
            "g.omni/data/x.lance",
            "g.omni/nodes/Person.lance/_transactions/1-abc.txn",
        ] {
            assert!(!immutable(&Path::from(p)), "{p}");
        }
    }
}
