//! The node and edge tables as Lance datasets: opening exact versions, the
//! latest version of a branch's physical table, lazy forks with Lance's native
//! branches, strict commits of staged transactions, restores, and looking a
//! transaction up in a table's history (recovery).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::SchemaRef;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::transaction::Transaction;
use lance::dataset::{CommitBuilder, WriteMode, WriteParams};
use lance::session::Session;
use parking_lot::Mutex;

use super::manifest::TableRef;
use super::objstore::Store;
use crate::error::{OmniError, Result};
use omnigraph_actors::CommitResult;

/// How many opened table versions stay cached.
const OPEN_CACHE_LIMIT: usize = 512;

type Physical = (String, Option<String>);
/// A table version exactly: (folder, Lance branch, version).
type Exact = (String, Option<String>, u64);

pub struct Tables {
    store: Store,
    session: Arc<Session>,
    /// Exact (dir, lance branch, version) -> dataset; immutable, so always valid.
    opened: Mutex<HashMap<Exact, Arc<Dataset>>>,
    /// The latest version of each physical table this process knows. Only
    /// this process writes (one writer process per graph), so it stays true.
    latest: Mutex<HashMap<Physical, Arc<Dataset>>>,
    /// Serialises forks of one physical table.
    fork_lock: tokio::sync::Mutex<()>,
}

pub fn write_params(session: &Arc<Session>, mode: WriteMode) -> WriteParams {
    WriteParams {
        mode,
        session: Some(session.clone()),
        enable_stable_row_ids: true,
        ..Default::default()
    }
}

fn is_conflict(e: &lance::Error) -> bool {
    matches!(
        e,
        lance::Error::CommitConflict { .. }
            | lance::Error::RetryableCommitConflict { .. }
            | lance::Error::IncompatibleTransaction { .. }
            | lance::Error::TooMuchWriteContention { .. }
    )
}

impl Tables {
    pub fn new(store: Store, session: Arc<Session>) -> Self {
        Self {
            store,
            session,
            opened: Mutex::new(HashMap::new()),
            latest: Mutex::new(HashMap::new()),
            fork_lock: tokio::sync::Mutex::new(()),
        }
    }

    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    pub fn uri(&self, dir: &str) -> String {
        self.store.uri_of(dir)
    }

    /// Create an empty table (version 1) with the type's schema.
    pub async fn create(&self, dir: &str, schema: SchemaRef) -> Result<u64> {
        let reader =
            RecordBatchIterator::new(Vec::<std::result::Result<RecordBatch, _>>::new(), schema);
        let ds = Dataset::write(
            reader,
            &self.uri(dir),
            Some(write_params(&self.session, WriteMode::Overwrite)),
        )
        .await?;
        let version = ds.version().version;
        self.remember_latest(dir, None, Arc::new(ds));
        Ok(version)
    }

    /// A table exactly as a manifest names it.
    pub async fn open(&self, t: &TableRef) -> Result<Arc<Dataset>> {
        let key = (t.dir.clone(), t.lance_branch.clone(), t.version);
        if let Some(ds) = self.opened.lock().get(&key) {
            return Ok(ds.clone());
        }
        let ds = self
            .load_version(&t.dir, t.lance_branch.as_deref(), t.version)
            .await
            .map_err(|e| {
                OmniError::Storage(format!(
                    "table {} at version {} (branch {:?}) cannot be opened: {e}",
                    t.dir, t.version, t.lance_branch
                ))
            })?;
        let ds = Arc::new(ds);
        let mut opened = self.opened.lock();
        if opened.len() >= OPEN_CACHE_LIMIT {
            opened.clear();
        }
        opened.insert(key, ds.clone());
        Ok(ds)
    }

    async fn load_version(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        version: u64,
    ) -> lance::Result<Dataset> {
        DatasetBuilder::from_uri(self.uri(dir))
            .with_session(self.session.clone())
            .with_branch(lance_branch.unwrap_or("main"), Some(version))
            .load()
            .await
    }

    fn cached_latest(&self, dir: &str, lance_branch: Option<&str>) -> Option<Arc<Dataset>> {
        self.latest
            .lock()
            .get(&(dir.to_string(), lance_branch.map(str::to_string)))
            .cloned()
    }

    fn remember_latest(&self, dir: &str, lance_branch: Option<String>, ds: Arc<Dataset>) {
        self.latest
            .lock()
            .insert((dir.to_string(), lance_branch), ds);
    }

    /// The newest version of a physical table, or `None` when that Lance
    /// branch does not exist.
    pub async fn latest(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
    ) -> Result<Option<Arc<Dataset>>> {
        if let Some(ds) = self.cached_latest(dir, lance_branch) {
            return Ok(Some(ds));
        }
        let builder = DatasetBuilder::from_uri(self.uri(dir)).with_session(self.session.clone());
        let builder = match lance_branch {
            Some(b) => builder.with_branch(b, None),
            None => builder,
        };
        match builder.load().await {
            Ok(ds) => {
                let ds = Arc::new(ds);
                self.remember_latest(dir, lance_branch.map(str::to_string), ds.clone());
                Ok(Some(ds))
            }
            Err(e) if lance_branch.is_some() && missing_branch(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The newest version of a physical table whose version `known` is
    /// known to exist (the graph manifest names it). Lance versions are
    /// consecutive, so probing `known + 1, known + 2, ...` finds the newest
    /// without listing every version file, which a table with a long
    /// history would make slow for a fresh process.
    pub async fn latest_from(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        known: u64,
    ) -> Result<Arc<Dataset>> {
        if let Some(ds) = self.cached_latest(dir, lance_branch) {
            return Ok(ds);
        }
        let mut newest = self
            .open(&TableRef {
                dir: dir.to_string(),
                lance_branch: lance_branch.map(str::to_string),
                version: known,
            })
            .await?;
        loop {
            let next = newest.version().version + 1;
            match self.load_version(dir, lance_branch, next).await {
                Ok(ds) => newest = Arc::new(ds),
                Err(e) if missing_branch(&e) => break,
                Err(e) => return Err(e.into()),
            }
        }
        self.remember_latest(dir, lance_branch.map(str::to_string), newest.clone());
        Ok(newest)
    }

    /// Make sure `lance_branch` exists on the table, forked from `from`; returns
    /// its latest version. Creating a fork changes nothing a reader can see:
    /// the manifest keeps naming `from` until a commit on the fork is published.
    pub async fn ensure_fork(&self, from: &TableRef, lance_branch: &str) -> Result<Arc<Dataset>> {
        let _guard = self.fork_lock.lock().await;
        if let Some(ds) = self.latest(&from.dir, Some(lance_branch)).await? {
            return Ok(ds);
        }
        let mut base = (*self.open(from).await?).clone();
        let forked = base
            .create_branch(
                lance_branch,
                (from.lance_branch.as_deref(), Some(from.version)),
                None,
            )
            .await?;
        let forked = Arc::new(forked);
        self.remember_latest(&from.dir, Some(lance_branch.to_string()), forked.clone());
        Ok(forked)
    }

    /// Commit a staged transaction exactly on top of `base`, which must be the
    /// table's latest version (the table gate and the recheck ensure it).
    pub async fn commit(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        base: Arc<Dataset>,
        txn: Transaction,
    ) -> CommitResult {
        let result = CommitBuilder::new(base)
            .with_session(self.session.clone())
            .with_max_retries(0)
            .execute(txn)
            .await;
        match result {
            Ok(ds) => {
                let version = ds.version().version;
                self.remember_latest(dir, lance_branch.map(str::to_string), Arc::new(ds));
                CommitResult::Committed { version }
            }
            Err(e) if is_conflict(&e) => {
                self.forget_latest(dir, lance_branch);
                CommitResult::Conflict(e.to_string())
            }
            Err(e) => {
                self.forget_latest(dir, lance_branch);
                CommitResult::Unknown(e.to_string())
            }
        }
    }

    fn forget_latest(&self, dir: &str, lance_branch: Option<&str>) {
        self.latest
            .lock()
            .remove(&(dir.to_string(), lance_branch.map(str::to_string)));
    }

    /// Write a new version whose content equals version `to`.
    pub async fn restore(&self, dir: &str, lance_branch: Option<&str>, to: u64) -> Result<u64> {
        self.forget_latest(dir, lance_branch);
        let t = TableRef {
            dir: dir.to_string(),
            lance_branch: lance_branch.map(str::to_string),
            version: to,
        };
        let mut ds = (*self.open(&t).await?).clone();
        ds.restore().await?;
        self.forget_latest(dir, lance_branch);
        let latest = self
            .latest(dir, lance_branch)
            .await?
            .ok_or_else(|| OmniError::Storage(format!("table {dir} vanished during restore")))?;
        Ok(latest.version().version)
    }

    /// Where (if anywhere) after `base` the transaction `txn` landed, and the
    /// table's latest version now.
    pub async fn find_landed(
        &self,
        dir: &str,
        lance_branch: Option<&str>,
        base: u64,
        txn: &str,
    ) -> Result<(Option<u64>, Option<u64>)> {
        self.forget_latest(dir, lance_branch);
        let Some(latest) = self.latest(dir, lance_branch).await? else {
            return Ok((None, None));
        };
        let top = latest.version().version;
        for v in (base + 1)..=top {
            let found = latest.read_transaction_by_version(v).await?;
            if found.is_some_and(|t| t.uuid == txn) {
                return Ok((Some(v), Some(top)));
            }
        }
        Ok((None, Some(top)))
    }

    /// Best effort: remove a Lance branch (a deleted graph branch's fork).
    pub async fn drop_branch(&self, dir: &str, lance_branch: &str) -> Result<()> {
        self.forget_latest(dir, Some(lance_branch));
        let Some(main) = self.latest(dir, None).await? else {
            return Ok(());
        };
        let mut main = (*main).clone();
        match main.delete_branch(lance_branch).await {
            Ok(()) => Ok(()),
            Err(e) if missing_branch(&e) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn missing_branch(e: &lance::Error) -> bool {
    let s = e.to_string();
    matches!(
        e,
        lance::Error::NotFound { .. } | lance::Error::DatasetNotFound { .. }
    ) || s.contains("not found")
        || s.contains("Not found")
        || s.contains("does not exist")
}
