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

use lance_io::object_store::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ConditionalPutCommitHandler, ManifestLocation,
    ManifestNamingScheme, ManifestWriter,
};
use object_store::path::Path;

/// Commits only the manifest of version `version`.
pub struct PinnedCommit {
    version: u64,
    /// The version Lance tried to write instead, once refused (0: none).
    refused: AtomicU64,
    inner: ConditionalPutCommitHandler,
}

impl PinnedCommit {
    pub fn at(version: u64) -> Arc<Self> {
        Arc::new(Self {
            version,
            refused: AtomicU64::new(0),
            inner: ConditionalPutCommitHandler,
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

// Only the three methods `ConditionalPutCommitHandler` itself overrides are
// forwarded; every other method keeps the trait's default, as it does there.
#[async_trait::async_trait]
impl CommitHandler for PinnedCommit {
    fn is_version_not_found_definitive(&self) -> bool {
        self.inner.is_version_not_found_definitive()
    }

    fn propagate_commit_error_after_success(&self) -> bool {
        self.inner.propagate_commit_error_after_success()
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
