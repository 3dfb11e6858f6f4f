//! The commit handler of every table the graph opens, and table commits
//! pinned to one version.
//!
//! Every table commit of the graph lands at exactly its base + 1 under the
//! table's gate, so the handler never looks for versions committed since
//! the base: Lance would list (or, on S3, read a hint and probe) before
//! every commit to rebase over them, three round trips for nothing. A
//! version someone else wrote at base + 1 still refuses the commit, as its
//! manifest is created only if absent. Lance's version hint is written
//! after the manifest, off the commit's path (a reader verifies a hint and
//! probes past it, so one that lags costs a read, never a wrong answer).
//!
//! Table commits pinned to one version. Lance rebases a commit over every
//! compatible transaction that landed after its read version, even with no
//! retries (an Append over another Append lands at read + 2 and holds both),
//! so "the table gate makes every commit land on its base" is not enough:
//! a writer that stalled past its lease can still land a commit on that
//! base after the gate moved on, and the next holder's commit would then be
//! rebased over it and publish its rows. The handler here is the one Lance
//! uses for every URI this project opens (put-if-not-exists of the version's
//! manifest), with one refusal in front: the manifest being written must be
//! exactly the version the commit was pinned to. A rebased commit is
//! therefore refused as a conflict before anything is written.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use futures::stream::BoxStream;
use lance_io::object_store::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter,
    write_version_hint,
};
use object_store::path::Path;
use object_store::{PutMode, PutOptions};

/// The handler every table of the graph is opened and created with.
/// `known`: a version whose manifest size the opener knows (the graph
/// manifest recorded it), so that it is read without a HEAD first.
#[derive(Debug, Default)]
pub struct GraphCommit {
    known: Option<(u64, u64)>,
}

impl GraphCommit {
    pub fn shared() -> Arc<dyn CommitHandler> {
        Arc::new(GraphCommit::default())
    }

    /// For an open of `version`, whose manifest is `size` bytes.
    pub fn knowing(version: u64, size: u64) -> Arc<dyn CommitHandler> {
        Arc::new(GraphCommit {
            known: Some((version, size)),
        })
    }
}

#[async_trait::async_trait]
impl CommitHandler for GraphCommit {
    /// A manifest is created only if absent, and then is there: a version
    /// not found is not there.
    fn is_version_not_found_definitive(&self) -> bool {
        true
    }

    /// A create-if-absent that failed in transport but whose manifest is
    /// there landed (the read back decides).
    fn propagate_commit_error_after_success(&self) -> bool {
        false
    }

    /// Lance's own resolution asks the manifest's size (a HEAD of its V2
    /// name, else the V1 name); a version whose size is known is named
    /// without asking: every table this graph writes uses V2 names. (A
    /// wrong size is found by the read, which then asks the size itself.)
    async fn resolve_version_location(
        &self,
        base_path: &Path,
        version: u64,
        object_store: &dyn object_store::ObjectStore,
    ) -> lance::Result<ManifestLocation> {
        if let Some((v, size)) = self.known
            && v == version
        {
            return Ok(ManifestLocation {
                version,
                path: ManifestNamingScheme::V2.manifest_path(base_path, version),
                size: Some(size),
                naming_scheme: ManifestNamingScheme::V2,
                e_tag: None,
                identity: None,
            });
        }
        let scheme = ManifestNamingScheme::V2;
        let path = scheme.manifest_path(base_path, version);
        match object_store::ObjectStoreExt::head(object_store, &path).await {
            Ok(meta) => Ok(ManifestLocation {
                version,
                path,
                size: Some(meta.size),
                naming_scheme: scheme,
                e_tag: meta.e_tag,
                identity: None,
            }),
            Err(object_store::Error::NotFound { .. }) => {
                let scheme = ManifestNamingScheme::V1;
                Ok(ManifestLocation {
                    version,
                    path: scheme.manifest_path(base_path, version),
                    size: None,
                    naming_scheme: scheme,
                    e_tag: None,
                    identity: None,
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Nothing to rebase over: a commit lands at its base + 1 or not at all.
    fn list_manifest_locations_since<'a>(
        &self,
        _base_path: &Path,
        _object_store: &'a ObjectStore,
        _since_version: u64,
    ) -> BoxStream<'a, lance::Result<ManifestLocation>> {
        futures::stream::empty().boxed()
    }

    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
    ) -> std::result::Result<ManifestLocation, CommitError> {
        let path = naming_scheme.manifest_path(base_path, manifest.version);
        // The manifest is built in memory and sent as one conditional PUT.
        let scratch = ObjectStore::memory();
        let at: Path = "manifest".into();
        manifest_writer(&scratch, manifest, indices, &at, transaction).await?;
        let bytes = scratch.read_one_all(&at).await?;
        let size = bytes.len() as u64;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let put = object_store
            .inner
            .put_opts(&path, bytes.into(), opts)
            .await
            .map_err(|e| match e {
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. } => CommitError::CommitConflict,
                other => CommitError::OtherError(other.into()),
            })?;
        let (store, base, version) = (object_store.clone(), base_path.clone(), manifest.version);
        super::background::spawn(async move { write_version_hint(&store, &base, version).await });
        Ok(ManifestLocation {
            version: manifest.version,
            path,
            size: Some(size),
            naming_scheme,
            e_tag: put.e_tag,
            identity: None,
        })
    }
}

/// Commits only the manifest of version `version`.
pub struct PinnedCommit {
    version: u64,
    /// The version Lance tried to write instead, once refused (0: none).
    refused: AtomicU64,
    inner: GraphCommit,
}

impl PinnedCommit {
    pub fn at(version: u64) -> Arc<Self> {
        Arc::new(Self {
            version,
            refused: AtomicU64::new(0),
            inner: GraphCommit::default(),
        })
    }

    /// Why this handler refused a commit, if it did: Lance would have
    /// rebased it over versions committed since its base.
    pub fn refusal(&self) -> Option<String> {
        let got = self.refused.load(Ordering::Relaxed);
        (got != 0).then(|| {
            format!(
                "the table moved past the commit's base: the storage library would have rebased it to version {got} over versions committed since, instead of landing it at {}",
                self.version
            )
        })
    }
}

impl std::fmt::Debug for PinnedCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedCommit(v{})", self.version)
    }
}

// The methods `GraphCommit` overrides are forwarded; every other method
// keeps the trait's default, as it does there.
#[async_trait::async_trait]
impl CommitHandler for PinnedCommit {
    fn is_version_not_found_definitive(&self) -> bool {
        self.inner.is_version_not_found_definitive()
    }

    fn propagate_commit_error_after_success(&self) -> bool {
        self.inner.propagate_commit_error_after_success()
    }

    fn list_manifest_locations_since<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
        since_version: u64,
    ) -> BoxStream<'a, lance::Result<ManifestLocation>> {
        self.inner
            .list_manifest_locations_since(base_path, object_store, since_version)
    }

    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
    ) -> std::result::Result<ManifestLocation, CommitError> {
        if manifest.version != self.version {
            tracing::warn!(
                expected = self.version,
                got = manifest.version,
                "a table commit would be rebased over foreign versions; refused"
            );
            self.refused.store(manifest.version, Ordering::Relaxed);
            return Err(CommitError::CommitConflict);
        }
        self.inner
            .commit(
                manifest,
                indices,
                base_path,
                object_store,
                manifest_writer,
                naming_scheme,
                transaction,
            )
            .await
    }
}
