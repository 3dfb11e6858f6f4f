//! Small files under the graph root (manifest versions, commit records,
//! sidecars, the schema), read and written through Lance's object-store layer
//! so that every URI Lance accepts works here too.

use std::sync::Arc;

use super::requests::StorageSession;
use bytes::Bytes;
use futures::TryStreamExt;
use lance::io::{ObjectStore, ObjectStoreParams};
use object_store::path::Path;
use object_store::{GetOptions, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use crate::error::{OmniError, Result};

/// What a conditional range read found.
pub enum RangeRead {
    /// The bytes, and the object's whole size.
    Read { bytes: Bytes, size: u64 },
    /// The object is not there.
    Gone,
    /// The object's tag is another.
    Moved,
}

#[derive(Clone)]
pub struct Store {
    os: Arc<ObjectStore>,
    root: Path,
    uri: String,
}

/// Normalise a graph URI: local paths become absolute so that Lance and the
/// object store agree on them; URIs with a scheme pass through.
pub fn normalize_uri(uri: &str) -> Result<String> {
    let uri = uri.trim_end_matches('/');
    if uri.contains("://") {
        return Ok(uri.to_string());
    }
    let p = std::path::absolute(uri)
        .map_err(|e| OmniError::BadRequest(format!("bad graph path {uri:?}: {e}")))?;
    Ok(p.to_string_lossy().trim_end_matches('/').to_string())
}

fn not_found(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotFound { .. })
}

fn lance_not_found(e: &lance::Error) -> bool {
    matches!(e, lance::Error::NotFound { .. })
        || e.to_string().contains("not found")
        || e.to_string().contains("No such file")
}

impl Store {
    pub async fn open(session: &StorageSession, uri: &str) -> Result<Self> {
        let (os, root) = ObjectStore::from_uri_and_params(
            session.0.store_registry(),
            uri,
            &ObjectStoreParams::default(),
        )
        .await?;
        Ok(Self {
            os,
            root,
            uri: uri.to_string(),
        })
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The URI of something under the root (for Lance datasets).
    pub fn uri_of(&self, rel: &str) -> String {
        format!("{}/{rel}", self.uri)
    }

    fn path(&self, rel: &str) -> Path {
        rel.split('/')
            .filter(|s| !s.is_empty())
            .fold(self.root.clone(), |p, s| p.join(s))
    }

    /// Read a whole object; `None` when it does not exist. One request:
    /// Lance's own reader retries a missing object, and the manifest probe
    /// asks for a missing version on every refresh.
    pub async fn read(&self, rel: &str) -> Result<Option<Bytes>> {
        Ok(self.read_tagged(rel).await?.map(|(bytes, _)| bytes))
    }

    /// An object's size in bytes and its ETag (or, from a store that gives
    /// none, its version), by one HEAD; `None` when it does not exist.
    pub async fn head(&self, rel: &str) -> Result<Option<(u64, Option<String>)>> {
        match self.os.inner.head(&self.path(rel)).await {
            Ok(meta) => Ok(Some((meta.size, meta.e_tag.or(meta.version)))),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(OmniError::storage(e)),
        }
    }

    /// Bytes `range` of an object, asked only while its entity tag (or
    /// version) is `tag` when one is given (S3's If-Match; the tag is also
    /// compared on the answer, for a store that ignores the condition).
    pub async fn read_range_if(
        &self,
        rel: &str,
        range: std::ops::Range<u64>,
        tag: Option<&str>,
    ) -> Result<RangeRead> {
        let opts = GetOptions {
            range: Some(range.into()),
            if_match: tag.map(str::to_string),
            ..Default::default()
        };
        let got = match self.os.inner.get_opts(&self.path(rel), opts).await {
            Ok(g) => g,
            Err(e) if not_found(&e) => return Ok(RangeRead::Gone),
            Err(object_store::Error::Precondition { .. }) => return Ok(RangeRead::Moved),
            Err(e) => return Err(OmniError::storage(e)),
        };
        let (size, now) = (
            got.meta.size,
            got.meta.e_tag.clone().or(got.meta.version.clone()),
        );
        if tag.is_some_and(|t| now.as_deref().is_some_and(|n| n != t)) {
            return Ok(RangeRead::Moved);
        }
        let bytes = got.bytes().await.map_err(OmniError::storage)?;
        Ok(RangeRead::Read { bytes, size })
    }

    /// A whole object, mapped read-only: a local file where it lies (a
    /// reader then touches only the pages it uses), an object read once into
    /// anonymous memory. `None` when it does not exist.
    pub async fn map(&self, rel: &str) -> Result<Option<Arc<memmap2::Mmap>>> {
        let Some(path) = self.local(rel) else {
            return match self.read(rel).await? {
                Some(b) => Ok(Some(crate::index::adjacency_file::anonymous(&b)?)),
                None => Ok(None),
            };
        };
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(OmniError::Storage(format!("{}: {e}", path.display()))),
        };
        // SAFETY: files under a graph are written whole (staged, then
        // renamed into place) and never changed in place; one deleted while
        // mapped stays readable until it is unmapped.
        let map = unsafe { memmap2::Mmap::map(&file) }
            .map_err(|e| OmniError::Storage(format!("{}: {e}", path.display())))?;
        Ok(Some(Arc::new(map)))
    }

    /// Does the graph lie on this machine's file system (so a mapped file
    /// pages in only what a reader touches)?
    pub fn is_local(&self) -> bool {
        self.local("").is_some()
    }

    /// Where something under the root is on this machine's file system,
    /// for a local graph.
    fn local(&self, rel: &str) -> Option<std::path::PathBuf> {
        let root = match self.uri.split_once("://") {
            None => self.uri.as_str(),
            Some(("file", rest)) => rest,
            Some(_) => return None,
        };
        Some(std::path::Path::new(root).join(rel))
    }

    pub async fn exists(&self, rel: &str) -> Result<bool> {
        Ok(self.os.exists(&self.path(rel)).await?)
    }

    /// Write or replace.
    pub async fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        self.os.put(&self.path(rel), bytes).await?;
        Ok(())
    }

    /// Create only if absent: the compare-and-swap every publish rests on.
    /// Returns false when the object already exists.
    pub async fn create(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        Ok(self.create_tagged(rel, bytes).await?.is_some())
    }

    /// Read an object with its entity tag, for a later `put_if_match`.
    pub async fn read_tagged(&self, rel: &str) -> Result<Option<(Bytes, String)>> {
        // On local disk a missing object is told by one stat, without the
        // object store's hop to a blocking thread and back: that hop was
        // most of a warm read's cost, which asks for the next manifest
        // version, missing, on every query.
        if let Some(path) = self.local(rel)
            && std::fs::symlink_metadata(&path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            return Ok(None);
        }
        let got = match self
            .os
            .inner
            .get_opts(&self.path(rel), GetOptions::default())
            .await
        {
            Ok(g) => g,
            Err(e) if not_found(&e) => return Ok(None),
            Err(e) => return Err(OmniError::storage(e)),
        };
        let tag = got.meta.e_tag.clone().unwrap_or_default();
        let bytes = got.bytes().await.map_err(OmniError::storage)?;
        Ok(Some((bytes, tag)))
    }

    /// Create only if absent, returning the new object's entity tag;
    /// `None` when the object already exists.
    pub async fn create_tagged(&self, rel: &str, bytes: Vec<u8>) -> Result<Option<String>> {
        self.put_mode(rel, bytes, PutMode::Create).await
    }

    /// Replace an object only while its entity tag is still `tag` (S3's
    /// If-Match): the compare-and-swap a lease takeover rests on. Returns the
    /// new tag, or `None` when the object changed or vanished meanwhile.
    ///
    /// A local path has no entity-tag conditions, so there this replaces
    /// unconditionally: on local disk the gate and liveness locks are OS
    /// locks, exact and process-bound, so no second writer of such an
    /// object can exist at the same time. The tag it returns is the one a
    /// later read finds, so that a caller may replace the object again.
    pub async fn put_if_match(
        &self,
        rel: &str,
        bytes: Vec<u8>,
        tag: &str,
    ) -> Result<Option<String>> {
        if !self.uri.contains("://") {
            self.put(rel, &bytes).await?;
            let meta = self.os.inner.head(&self.path(rel)).await;
            return Ok(Some(
                meta.map_err(OmniError::storage)?.e_tag.unwrap_or_default(),
            ));
        }
        let version = UpdateVersion {
            e_tag: Some(tag.to_string()),
            version: None,
        };
        self.put_mode(rel, bytes, PutMode::Update(version)).await
    }

    async fn put_mode(&self, rel: &str, bytes: Vec<u8>, mode: PutMode) -> Result<Option<String>> {
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        match self
            .os
            .inner
            .put_opts(&self.path(rel), Bytes::from(bytes).into(), opts)
            .await
        {
            Ok(r) => Ok(Some(r.e_tag.unwrap_or_default())),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => Ok(None),
            Err(e) => Err(OmniError::storage(e)),
        }
    }

    /// Delete; deleting something absent is not an error (idempotent).
    pub async fn delete(&self, rel: &str) -> Result<()> {
        match self.os.inner.delete(&self.path(rel)).await {
            Ok(()) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(OmniError::storage(e)),
        }
    }

    /// File names directly under a folder.
    pub async fn list(&self, dir: &str) -> Result<Vec<String>> {
        Ok(self
            .list_all(dir)
            .await?
            .into_iter()
            .filter(|(rel, _)| !rel.contains('/'))
            .map(|(rel, _)| rel)
            .collect())
    }

    /// Every object under a folder, at any depth: its path relative to the
    /// folder and its size, sorted by path.
    pub async fn list_all(&self, dir: &str) -> Result<Vec<(String, u64)>> {
        Ok(self
            .list_meta(dir)
            .await?
            .into_iter()
            .map(|(rel, size, _)| (rel, size))
            .collect())
    }

    /// Every object under a folder, at any depth: its path relative to the
    /// folder, its size and when it was last written (milliseconds since
    /// the Unix epoch, the store's clock), sorted by path.
    pub async fn list_meta(&self, dir: &str) -> Result<Vec<(String, u64, u64)>> {
        let prefix = self.path(dir);
        let entries: Vec<_> = match self.os.inner.list(Some(&prefix)).try_collect().await {
            Ok(v) => v,
            Err(e) if not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(OmniError::storage(e)),
        };
        let mut out: Vec<(String, u64, u64)> = entries
            .into_iter()
            .filter_map(|m| {
                let parts: Vec<String> = m
                    .location
                    .prefix_match(&prefix)?
                    .map(|p| p.as_ref().to_string())
                    .collect();
                let written = m.last_modified.timestamp_millis().max(0) as u64;
                Some((parts.join("/"), m.size, written))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// An object named by its full path in the store (as the storage
    /// library's cleanup names files): its size and last write, if it exists.
    pub async fn head_object(&self, path: &str) -> Result<Option<(u64, u64)>> {
        let path = Path::parse(path).map_err(|e| OmniError::Storage(e.to_string()))?;
        match self.os.inner.head(&path).await {
            Ok(m) => Ok(Some((
                m.size,
                m.last_modified.timestamp_millis().max(0) as u64,
            ))),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(OmniError::storage(e)),
        }
    }

    /// Delete an object named by its full path in the store; deleting
    /// something absent is not an error.
    pub async fn delete_object(&self, path: &str) -> Result<()> {
        let path = Path::parse(path).map_err(|e| OmniError::Storage(e.to_string()))?;
        match self.os.inner.delete(&path).await {
            Ok(()) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(e) => Err(OmniError::storage(e)),
        }
    }

    /// The names of the folders directly under a folder.
    pub async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let prefix = self.path(dir);
        let listed = match self.os.inner.list_with_delimiter(Some(&prefix)).await {
            Ok(l) => l,
            Err(e) if not_found(&e) => return Ok(Vec::new()),
            Err(e) => return Err(OmniError::storage(e)),
        };
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| {
                let parts: Vec<_> = p.prefix_match(&prefix)?.collect();
                (parts.len() == 1).then(|| parts[0].as_ref().to_string())
            })
            .collect();
        names.sort();
        Ok(names)
    }

    pub async fn remove_dir(&self, rel: &str) -> Result<()> {
        match self.os.remove_dir_all(self.path(rel)).await {
            Ok(()) => Ok(()),
            Err(e) if lance_not_found(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit record is replaced by its tag, and replaced again by the
    /// tag that replacement returned (a publish that lost its
    /// compare-and-swap twice): on local disk too.
    #[tokio::test]
    async fn a_replaced_object_can_be_replaced_again_by_the_tag_it_got() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().to_string_lossy().to_string();
        let store = Store::open(&StorageSession::default(), &uri).await.unwrap();
        let first = store.create_tagged("r.json", b"1".to_vec()).await.unwrap();
        let first = first.expect("created");
        let second = store.put_if_match("r.json", b"2".to_vec(), &first).await;
        let second = second.unwrap().expect("replaced");
        let (_, seen) = store.read_tagged("r.json").await.unwrap().expect("there");
        assert_eq!(
            seen, second,
            "the tag a replacement returns is the one a read finds"
        );
    }
}
