//! The graph manifest: for every branch, its head commit and the exact table
//! versions (and Lance branches) that make up its state. Each manifest version
//! is an immutable file `_graph/versions/<n>.json`; publishing version n+1 is
//! one create-if-absent of that file, which is the compare-and-swap. Commit
//! records live beside it, one file per commit, and are only trusted when the
//! manifest version they name really carries them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::objstore::Store;
use crate::error::{OmniError, Result};

pub const FORMAT: u32 = 1;
pub const MAIN: &str = "main";
const VERSIONS: &str = "_graph/versions";
const COMMITS: &str = "_graph/commits";
const LATEST_HINT: &str = "_graph/latest";
/// The commits that graph versions a cleanup removed carried, by version:
/// their records stay trusted (and the history listable) without them.
const RETIRED: &str = "_graph/retired.json";
/// What a removed graph version's file holds instead of its manifest.
pub const REMOVED: &[u8] = b"{\"removed\":true}";
/// How many manifest versions stay parsed in memory.
const CACHE_LIMIT: usize = 256;

/// Where one table's state for a branch lives.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableRef {
    /// The dataset folder under the graph root.
    pub dir: String,
    /// The Lance branch (`None`: Lance's main line).
    pub lance_branch: Option<String>,
    pub version: u64,
    /// Random, drawn when the table's dataset was created: a table made
    /// again at the same folder is another incarnation (blob ETags bind it).
    #[serde(default)]
    pub incarnation: u64,
    /// The size of that version's Lance manifest, where the commit that made
    /// it was this graph's: a cold open reads the manifest without asking
    /// its size first (one round trip fewer). Not part of the table state:
    /// two refs that differ only here are equal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_size: Option<u64>,
}

impl PartialEq for TableRef {
    fn eq(&self, o: &Self) -> bool {
        (
            &self.dir,
            &self.lance_branch,
            self.version,
            self.incarnation,
        ) == (&o.dir, &o.lance_branch, o.version, o.incarnation)
    }
}

impl Eq for TableRef {}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchRecord {
    pub head: String,
    /// The manifest version at which this record last changed.
    pub updated_at: u64,
    /// The manifest version at which the branch was created (0 for main);
    /// it makes the branch's Lance branch names unique per incarnation.
    pub incarnation: u64,
    pub parent: Option<String>,
    /// Table key -> table state. A branch shares its parent's table (the ref
    /// names the parent's Lance branch) until it first writes that table.
    pub tables: BTreeMap<String, TableRef>,
    /// Table key -> the Lance branch this branch writes that table on, where
    /// it is not the branch's default line: a merge that made the branch
    /// take another branch's table version in place of its own moves the
    /// branch to a fresh line for that table (its old line keeps the past).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lines: BTreeMap<String, String>,
}

impl BranchRecord {
    /// The Lance branch this graph branch (`name`) writes `table` on: a
    /// table ref naming it is the branch's own; any other is shared, and the
    /// first write forks it onto this line.
    pub fn line(&self, name: &str, table: &str) -> Option<String> {
        match self.lines.get(table) {
            Some(l) => Some(l.clone()),
            None => lance_branch_name(name, self.incarnation),
        }
    }
}

pub fn lance_branch_name(branch: &str, incarnation: u64) -> Option<String> {
    (branch != MAIN).then(|| format!("{branch}-v{incarnation}"))
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeNote {
    pub kind: String,
    pub branch: String,
    pub commit: Option<String>,
    pub op: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub version: u64,
    /// Identity of the accepted schema.
    pub schema: String,
    pub branches: BTreeMap<String, BranchRecord>,
    /// What produced this version.
    pub change: ChangeNote,
}

impl Manifest {
    pub fn branch(&self, name: &str) -> Result<&BranchRecord> {
        self.branches
            .get(name)
            .ok_or_else(|| OmniError::NotFound(format!("branch '{name}'")))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommitRecord {
    pub id: String,
    pub parents: Vec<String>,
    pub branch: String,
    pub manifest_version: u64,
    pub actor: String,
    /// RFC 3339.
    pub timestamp: String,
    pub kind: String,
    /// What the commit did (per-type row counts, ...).
    #[serde(default)]
    pub summary: serde_json::Value,
    /// Set when read: a cleanup removed the graph version this commit
    /// published, so its state can no longer be read (its record stays).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired: bool,
}

fn version_file(v: u64) -> String {
    format!("{VERSIONS}/{v:020}.json")
}

fn commit_file(id: &str) -> String {
    format!("{COMMITS}/{id}.json")
}

/// What a graph version's file holds.
enum Slot {
    Absent,
    /// Removed by a cleanup.
    Removed,
    Manifest(Arc<Manifest>),
}

pub struct Manifests {
    store: Store,
    latest: Mutex<Option<Arc<Manifest>>>,
    cache: Mutex<HashMap<u64, Arc<Manifest>>>,
    /// The retired commits last read: entries are only ever added, so one
    /// found here stays true; a version not here is read again.
    retired: Mutex<Arc<BTreeMap<u64, String>>>,
}

impl Manifests {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            latest: Mutex::new(None),
            cache: Mutex::new(HashMap::new()),
            retired: Mutex::new(Arc::default()),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Is there a graph here at all? (A cleanup that removes version 1
    /// records what it removed first.)
    pub async fn exists(&self) -> Result<bool> {
        Ok(self.store.exists(&version_file(1)).await? || self.store.exists(RETIRED).await?)
    }

    /// Every graph version file on storage, removed ones included:
    /// (version, bytes, written at ms).
    pub async fn listing(&self) -> Result<Vec<(u64, u64, u64)>> {
        let mut out: Vec<(u64, u64, u64)> = self
            .store
            .list_meta(VERSIONS)
            .await?
            .into_iter()
            .filter_map(|(name, bytes, at)| {
                let v = name.strip_suffix(".json")?.parse().ok()?;
                Some((v, bytes, at))
            })
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// The commit removed graph version `v` carried, if a cleanup removed
    /// it. A history of many removed versions reads the record once.
    async fn retired_commit(&self, v: u64) -> Result<Option<String>> {
        if let Some(c) = self.retired.lock().get(&v) {
            return Ok(Some(c.clone()));
        }
        let map = Arc::new(self.retired_tagged().await?.0);
        let found = map.get(&v).cloned();
        *self.retired.lock() = map;
        Ok(found)
    }

    async fn retired_tagged(&self) -> Result<(BTreeMap<u64, String>, Option<String>)> {
        let Some((bytes, tag)) = self.store.read_tagged(RETIRED).await? else {
            return Ok((BTreeMap::new(), None));
        };
        let map = serde_json::from_slice(&bytes)
            .map_err(|e| OmniError::Storage(format!("{RETIRED} is corrupt: {e}")))?;
        Ok((map, Some(tag)))
    }

    /// Record the commits these graph versions carried before they go.
    /// Several cleanups may record at once: each adds to what is there
    /// (a conditional write on the tag it read).
    pub async fn retire(&self, carried: &BTreeMap<u64, String>) -> Result<()> {
        for _ in 0..MAX_RECORD_RACES {
            let (mut map, tag) = self.retired_tagged().await?;
            map.extend(carried.iter().map(|(v, c)| (*v, c.clone())));
            let bytes = serde_json::to_vec(&map)?;
            let written = match tag {
                Some(t) => self.store.put_if_match(RETIRED, bytes, &t).await?.is_some(),
                None => self.store.create_tagged(RETIRED, bytes).await?.is_some(),
            };
            if written {
                return Ok(());
            }
        }
        Err(OmniError::Storage(format!(
            "{RETIRED} kept changing under {MAX_RECORD_RACES} writes"
        )))
    }

    /// Remove graph versions (a cleanup's, after [`Self::retire`]): each
    /// file is replaced by a marker, so the number is never published again
    /// (publishing is a create-if-absent of the next number) and a process
    /// that probes forward from an old version walks past it.
    pub async fn remove(&self, versions: &[u64]) -> Result<()> {
        for v in versions {
            self.cache.lock().remove(v);
            self.store.put(&version_file(*v), REMOVED).await?;
        }
        Ok(())
    }

    /// The error for a read of graph version `v` of `branch` that is not
    /// on storage: removed by a cleanup when older than the newest, with
    /// the oldest version still kept that holds the branch.
    pub async fn missing(&self, v: u64, branch: &str) -> OmniError {
        let not_found = OmniError::NotFound(format!("graph version {v}"));
        let Ok(latest) = self.refresh().await else {
            return not_found;
        };
        if v >= latest.version {
            return not_found;
        }
        let mut oldest = None;
        if let Ok(listing) = self.listing().await {
            // A marker is never a manifest's size: markers are not read.
            let kept = listing
                .into_iter()
                .filter(|(_, bytes, _)| *bytes != REMOVED.len() as u64);
            for (k, _, _) in kept {
                if let Ok(Some(m)) = self.read_version(k).await
                    && m.branches.contains_key(branch)
                {
                    oldest = Some(k);
                    break;
                }
            }
        }
        OmniError::VersionExpired {
            version: v,
            branch: branch.to_string(),
            oldest_kept: oldest,
        }
    }

    /// What version `v`'s file holds.
    async fn slot(&self, v: u64) -> Result<Slot> {
        if let Some(m) = self.cache.lock().get(&v) {
            return Ok(Slot::Manifest(m.clone()));
        }
        let Some(bytes) = self.store.read(&version_file(v)).await? else {
            return Ok(Slot::Absent);
        };
        if bytes.as_ref() == REMOVED {
            return Ok(Slot::Removed);
        }
        let m: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| OmniError::Storage(format!("manifest version {v} is corrupt: {e}")))?;
        if m.format != FORMAT {
            return Err(OmniError::Storage(format!(
                "manifest version {v} has format {}, this build reads {FORMAT}",
                m.format
            )));
        }
        let m = Arc::new(m);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_LIMIT {
            // Keep it simple and bounded: drop the oldest versions.
            let mut keys: Vec<u64> = cache.keys().copied().collect();
            keys.sort_unstable();
            for k in keys.into_iter().take(CACHE_LIMIT / 2) {
                cache.remove(&k);
            }
        }
        cache.insert(v, m.clone());
        Ok(Slot::Manifest(m))
    }

    async fn read_version(&self, v: u64) -> Result<Option<Arc<Manifest>>> {
        Ok(match self.slot(v).await? {
            Slot::Manifest(m) => Some(m),
            Slot::Removed | Slot::Absent => None,
        })
    }

    /// The newest version from a hint on: the hinted version and the one
    /// after it are read together (the hint is usually the newest, so the
    /// second read is the miss that ends the probe), then on as `probe`.
    async fn probe_from_hint(&self, hint: u64) -> Result<Option<Arc<Manifest>>> {
        let (at, after) = futures::try_join!(self.slot(hint), self.slot(hint + 1))?;
        let mut best = None;
        for slot in [at, after] {
            match slot {
                Slot::Manifest(m) => best = Some(m),
                Slot::Removed => {}
                // Versions have no holes: nothing is past a miss (a version
                // published between the two reads is found next time).
                Slot::Absent => return Ok(best),
            }
        }
        self.probe(hint + 2, best).await
    }

    /// The newest version from `from` on, past removed ones (the newest
    /// version is never removed, so a removed one has a successor).
    async fn probe(
        &self,
        from: u64,
        mut best: Option<Arc<Manifest>>,
    ) -> Result<Option<Arc<Manifest>>> {
        let mut next = from;
        loop {
            match self.slot(next).await? {
                Slot::Manifest(m) => best = Some(m),
                Slot::Removed => {}
                Slot::Absent => return Ok(best),
            }
            next += 1;
        }
    }

    /// A past (or the current) version, exactly.
    pub async fn at(&self, v: u64) -> Result<Arc<Manifest>> {
        self.read_version(v)
            .await?
            .ok_or_else(|| OmniError::NotFound(format!("graph version {v}")))
    }

    /// The newest version this process has seen, with no request (none
    /// before the first read).
    pub fn known(&self) -> Option<Arc<Manifest>> {
        self.latest.lock().clone()
    }

    /// The newest version: the cached one, or found from the hint by probing
    /// forward (the hint may lag behind).
    pub async fn latest(&self) -> Result<Arc<Manifest>> {
        if let Some(m) = self.latest.lock().clone() {
            return Ok(m);
        }
        self.refresh().await
    }

    /// The hint: the newest version when it was written, and the schema
    /// that version accepts (so that a fresh process reads the schema
    /// beside the version, not after it). A missing or unreadable hint is
    /// version 1 and no schema.
    pub async fn read_hint(&self) -> Result<Hint> {
        let text = self.store.read(LATEST_HINT).await?;
        let text = text.as_deref().and_then(|b| std::str::from_utf8(b).ok());
        let mut words = text.unwrap_or_default().split_whitespace();
        Ok(Hint {
            version: words.next().and_then(|v| v.parse().ok()).unwrap_or(1),
            schema: words.next().map(str::to_string),
        })
    }

    /// The newest version on storage now. Versions only grow, so a process
    /// that knows one probes forward from it (one read when nothing is
    /// new); a fresh process starts from the hint.
    pub async fn refresh(&self) -> Result<Arc<Manifest>> {
        let hint = match self.known() {
            Some(_) => None,
            None => Some(self.read_hint().await?),
        };
        self.refresh_from(hint.as_ref()).await
    }

    /// `refresh`, for a fresh process from a hint it read already.
    pub async fn refresh_from(&self, hint: Option<&Hint>) -> Result<Arc<Manifest>> {
        let known = self.latest.lock().clone();
        let cur = match (known, hint) {
            (Some(cur), _) => self.probe(cur.version + 1, Some(cur)).await?,
            (None, hint) => {
                let hint = hint.map_or(1, |h| h.version);
                match self.probe_from_hint(hint).await? {
                    Some(m) => Some(m),
                    // A hint past the newest version (it is written after
                    // the publish, and may be stale or lost): from the
                    // newest manifest the listing shows (markers skipped
                    // by their size).
                    None => {
                        let marker = REMOVED.len() as u64;
                        let newest = self
                            .listing()
                            .await?
                            .into_iter()
                            .rfind(|(_, bytes, _)| *bytes != marker)
                            .map(|(v, _, _)| v);
                        match newest {
                            Some(v) => self.probe(v, None).await?,
                            None => None,
                        }
                    }
                }
            }
        };
        let Some(cur) = cur else {
            return Err(OmniError::NotFound(format!(
                "no graph at {}",
                self.store.uri()
            )));
        };
        let mut latest = self.latest.lock();
        if latest.as_ref().is_none_or(|l| l.version < cur.version) {
            *latest = Some(cur.clone());
        }
        Ok(latest.clone().expect("set"))
    }

    /// Publish `next` (whose version must be the latest + 1) with its commit
    /// record. Returns false, having changed nothing visible, when another
    /// publisher took that version first.
    pub async fn publish(&self, next: &Manifest, commit: Option<&CommitRecord>) -> Result<bool> {
        if let Some(c) = commit {
            match self.claim_record(c, None, false).await? {
                Claim::Mine(_) => {}
                Claim::Published | Claim::Taken => {
                    return Err(OmniError::AlreadyExists(format!("commit {}", c.id)));
                }
            }
        }
        self.publish_version(next).await
    }

    /// Write a commit record before publishing the version that carries it,
    /// never replacing a record another publisher may stand on: the record
    /// is created if absent; an existing one is replaced (If-Match on the
    /// tag read) only when it is this publisher's own (`mine`, from a lost
    /// compare-and-swap) or, for a recovery (`replace_stale`), when no
    /// version carries it. Two publishers of one commit id (a writer taken
    /// over while stalled, and the recovery that rolled its intent forward)
    /// so never clobber each other's record.
    pub async fn claim_record(
        &self,
        c: &CommitRecord,
        mine: Option<&str>,
        replace_stale: bool,
    ) -> Result<Claim> {
        let file = commit_file(&c.id);
        let bytes = serde_json::to_vec_pretty(c)?;
        for _ in 0..MAX_RECORD_RACES {
            if let Some(tag) = self.store.create_tagged(&file, bytes.clone()).await? {
                return Ok(Claim::Mine(tag));
            }
            let Some((_, tag)) = self.store.read_tagged(&file).await? else {
                continue;
            };
            if self.commit(&c.id).await?.is_some() {
                return Ok(Claim::Published);
            }
            if !(replace_stale || mine == Some(tag.as_str())) {
                return Ok(Claim::Taken);
            }
            if let Some(t) = self.store.put_if_match(&file, bytes.clone(), &tag).await? {
                return Ok(Claim::Mine(t));
            }
        }
        Ok(Claim::Taken)
    }

    /// Create a commit record if absent, ahead of its publish (which then
    /// replaces it only with `claim_record` and its tag). `None`: a record
    /// of that commit is there already.
    pub async fn create_record(&self, c: &CommitRecord) -> Result<Option<String>> {
        let bytes = serde_json::to_vec_pretty(c)?;
        self.store.create_tagged(&commit_file(&c.id), bytes).await
    }

    /// Create version `next.version` if absent: the compare-and-swap of
    /// every publish. Its commit record must already be written.
    pub async fn publish_version(&self, next: &Manifest) -> Result<bool> {
        let bytes = serde_json::to_vec_pretty(next)?;
        if !self
            .store
            .create(&version_file(next.version), bytes)
            .await?
        {
            return Ok(false);
        }
        let m = Arc::new(next.clone());
        self.cache.lock().insert(next.version, m.clone());
        *self.latest.lock() = Some(m);
        // The hint only shortens the probe on open; losing it (or one that
        // lands after a later one) is harmless, so nobody waits for it.
        let hint = format!("{}\n{}\n", next.version, next.schema);
        let store = self.store.clone();
        super::background::spawn(async move {
            let _ = store.put(LATEST_HINT, hint.as_bytes()).await;
        });
        Ok(true)
    }

    /// A commit record, if that commit was really published.
    pub async fn commit(&self, id: &str) -> Result<Option<CommitRecord>> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(None);
        }
        let Some(bytes) = self.store.read(&commit_file(id)).await? else {
            return Ok(None);
        };
        let mut rec: CommitRecord = serde_json::from_slice(&bytes)
            .map_err(|e| OmniError::Storage(format!("commit record {id} is corrupt: {e}")))?;
        match self.read_version(rec.manifest_version).await? {
            Some(m) if m.change.commit.as_deref() == Some(id) => Ok(Some(rec)),
            Some(_) => Ok(None),
            // Removed by a cleanup, which recorded what it carried first.
            None => {
                let carried = self.retired_commit(rec.manifest_version).await?;
                rec.expired = carried.as_deref() == Some(id);
                Ok(rec.expired.then_some(rec))
            }
        }
    }
}

/// What `_graph/latest` says (see `Manifests::read_hint`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hint {
    pub version: u64,
    pub schema: Option<String>,
}

/// How a commit record write ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    /// Written: the record is this publisher's (its entity tag).
    Mine(String),
    /// A published version already carries this commit.
    Published,
    /// Another publisher's record, not yet published, stands there.
    Taken,
}

/// Races lost in a row on one commit record before giving up.
const MAX_RECORD_RACES: u32 = 8;

/// Check a new branch name: letters, digits and `/ _ . -`, no `..`, no empty
/// path segment, no leading or trailing `/`, and not a path prefix of (or
/// under) a live branch.
pub fn validate_branch_name<'a>(
    name: &str,
    live: impl IntoIterator<Item = &'a String>,
) -> Result<()> {
    let bad = |why: &str| {
        Err(OmniError::BadRequest(format!(
            "invalid branch name {name:?}: {why}"
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 200 {
        return bad("it is longer than 200 characters");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '.' | '-')))
    {
        return bad(&format!(
            "character {c:?} is not allowed (use letters, digits, '/', '_', '.', '-')"
        ));
    }
    if name.contains("..") {
        return bad("'..' could escape the graph's folder");
    }
    if name.starts_with('/') || name.ends_with('/') || name.contains("//") {
        return bad("path segments must not be empty (no leading, trailing or double '/')");
    }
    if name
        .split('/')
        .any(|s| s.starts_with('.') || s.ends_with(".lock"))
    {
        return bad("a segment may not start with '.' or end with '.lock'");
    }
    for other in live {
        if other == name {
            return Err(OmniError::AlreadyExists(format!("branch '{name}'")));
        }
        if other.starts_with(&format!("{name}/")) || name.starts_with(&format!("{other}/")) {
            return bad(&format!("it collides with the storage of branch '{other}'"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_that_could_escape_or_collide_are_refused() {
        let live = vec!["main".to_string(), "feature/x".to_string()];
        for bad in [
            "",
            "../x",
            "/abs",
            "a/",
            "a//b",
            "a b",
            "a$",
            "feature",
            "feature/x/y",
            "a/.hidden",
            "x.lock",
        ] {
            assert!(
                validate_branch_name(bad, &live).is_err(),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            validate_branch_name("main", &live),
            Err(OmniError::AlreadyExists(_))
        ));
        for good in ["dev", "feature/y", "release-1.2", "a_b/c.d"] {
            validate_branch_name(good, &live).unwrap();
        }
    }
}
