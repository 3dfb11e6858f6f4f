//! Upkeep of a graph: search indexes (`optimize`), index files (`gc`),
//! old versions (`cleanup`) and the external-blob policy.

use super::*;

/// What an optimize did: the indexes it built, and its commit (none when
/// every declared index was already current).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OptimizeReport {
    pub branch: String,
    pub commit: Option<String>,
    pub manifest_version: u64,
    /// One record per index built: `type`, `property`, `kind` (`btree`,
    /// `text` or `vector`), `rows`, and for a search index its `file`
    /// (relative to the graph).
    pub indexes: Vec<serde_json::Value>,
}

impl Omnigraph {
    /// Remove the index files no version of any table records: those of
    /// optimizes that crashed or lost a race, and of deleted branches' forks.
    /// A file whose writing process may still record it stays (another
    /// process while it lives, this one while a write of its own runs);
    /// with `dry_run`, nothing is removed and the report lists what would
    /// be. Not a write: it changes nothing any version reads.
    pub async fn gc(&self, dry_run: bool) -> Result<GcReport> {
        self.authorize(Action::Cleanup, None, None)?;
        let w = self.writes("gc")?;
        index_files::collect(&w.substrate, dry_run).await
    }

    /// Remove the graph versions `policy` does not keep, the table versions
    /// only they name, and the files no kept version references (those of
    /// crashed writes once their writers are gone). Always kept: every
    /// branch head and what its lazy forks share, the bases of unresolved
    /// intents, and whatever a live writer in any process may still commit.
    /// Safe beside writers, readers and other cleanups in other processes;
    /// one killed anywhere leaves a graph that reads and writes, and the
    /// next finishes the job. A read of a removed version is
    /// `VersionExpired`; the commit history stays listable.
    pub async fn cleanup(&self, policy: RetentionPolicy) -> Result<CleanupReport> {
        self.authorize(Action::Cleanup, None, None)?;
        let w = self.writes("cleanup")?;
        // This handle's answered writes are done: their sidecars must not
        // keep what they no longer need.
        w.host.settle_answered().await;
        retention::cleanup(&w.substrate, &policy).await
    }

    /// Build or refresh every declared search index of `branch` in one
    /// commit (none when all are current). Loads and mutations never build
    /// indexes; searches cover the rows an index does not, flat.
    pub async fn optimize(&self, branch: &str) -> Result<OptimizeReport> {
        self.authorize(Action::Cleanup, None, None)?;
        // Whether anything is stale is decided under the write's gates: with
        // nothing to build it writes nothing (not even a sidecar).
        let ran = self
            .run(
                OpKind::Write {
                    branch: branch.to_string(),
                },
                "optimize",
                Some(Arc::new(optimize::OptimizeWork)),
            )
            .await;
        let (commit, manifest_version, summary) = match ran {
            Err(OmniError::AlreadyCurrent) => {
                let snap = self.resolve(&Target::Branch(branch.to_string())).await?;
                (
                    None,
                    snap.manifest.version,
                    serde_json::json!({ "indexes": [] }),
                )
            }
            other => other?,
        };
        Ok(OptimizeReport {
            branch: branch.to_string(),
            commit,
            manifest_version,
            indexes: summary["indexes"].as_array().cloned().unwrap_or_default(),
        })
    }

    /// The graph's external-blob policy: the URI bases a Blob cell may
    /// reference (none until one is allowed; `file://` only when named).
    pub async fn external_blob_policy(&self) -> Result<BlobPolicy> {
        self.authorize(Action::Read, None, None)?;
        Ok(external::read_policy(&self.inner.graph.store).await?.1)
    }

    /// Allow external Blob references under `base` from now on.
    pub async fn allow_external_blobs(&self, base: &str) -> Result<BlobPolicy> {
        self.authorize(Action::Admin, None, None)?;
        self.writes("allow external blobs")?;
        external::update_policy(&self.inner.graph.store, |p| {
            p.with_allowed(base).map_err(OmniError::BadRequest)
        })
        .await
    }

    /// Stop allowing new external Blob references under `base` (cells that
    /// already hold one keep it).
    pub async fn revoke_external_blobs(&self, base: &str) -> Result<BlobPolicy> {
        self.authorize(Action::Admin, None, None)?;
        self.writes("revoke external blobs")?;
        external::update_policy(&self.inner.graph.store, |p| {
            p.without(base).map_err(OmniError::BadRequest)
        })
        .await
    }
}
