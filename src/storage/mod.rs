//! The only code that talks to Lance and the object store: the graph's
//! layout, its manifest, its tables, recovery sidecars, and the substrate the
//! protocol actors run their storage requests on.
//!
//! Layout under the graph URI:
//! ```text
//! _graph/versions/<n>.json     graph manifest versions (immutable; publish = create-if-absent)
//! _graph/latest                hint: the newest version number and its schema id
//! _graph/commits/<id>.json     commit records
//! _graph/schema/<id>.pg        each accepted schema's source, and <id>.catalog.json (every manifest version names its own)
//! _graph/recovery/<op>.json    recovery sidecars of in-flight writes
//! _graph/policy/external-blobs-<n>.json  the external-blob policy, version n (the highest holds)
//! _graph/locks/<gate>.lock     cross-process gate locks (local paths)
//! _graph/owners/<proc>.lock    liveness lock of each read-write process (local paths)
//! _graph/locks/<gate>.json     gate leases (object stores)
//! _graph/owners/<proc>.json    liveness lease of each read-write process (object stores)
//! nodes/<Type>.lance           one Lance dataset per node type
//! edges/<Type>.lance           one Lance dataset per edge type
//! _indexes/<table>/<prop>-<ulid>.<writer>.{text,ivf}  search index files (recorded in their table's metadata)
//! _indexes/graph/<table>-<ulid>.<writer>.adj        graph index files (recorded alike; see `index_files`)
//! _indexes/<table>/id-<ulid>.<writer>.ids          a node table's id order (recorded alike)
//! ```

pub mod background;
pub mod blob;
pub mod external;
pub mod filecache;
pub mod index_files;
pub mod leases;
pub mod locks;
pub mod manifest;
pub mod objstore;
pub mod pinned;
pub mod requests;
pub mod retention;
pub mod scan;
pub mod sidecar;
pub mod stage;
pub mod substrate;
pub mod tables;

use std::collections::BTreeMap;
use std::sync::Arc;

use requests::StorageSession;

use crate::compiler::catalog::{Catalog, TypeDef};
use crate::error::{OmniError, Result};
use manifest::{BranchRecord, ChangeNote, CommitRecord, MAIN, Manifest, Manifests, TableRef};
use objstore::Store;
use omnigraph_actors::{CommitId, Head};
use tables::{Table, Tables};

/// Which state of the graph a read (or a write's snapshot) sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The head of a branch, now.
    Branch(String),
    /// The state a commit published.
    Commit(String),
    /// A branch as of a graph manifest version.
    Version { version: u64, branch: String },
}

impl Target {
    pub fn main() -> Self {
        Target::Branch(MAIN.to_string())
    }
}

/// One consistent state of one branch: what a read uses from start to end,
/// with the schema its manifest version accepted (a read of the past
/// type-checks against the past's catalog).
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub manifest: Arc<Manifest>,
    pub branch: String,
    pub record: BranchRecord,
    pub schema: Arc<Schema>,
}

/// One accepted schema: its identity, its normalised source and the
/// catalog compiled from it (with the stable ids of its history).
#[derive(Debug)]
pub struct Schema {
    pub id: String,
    pub source: String,
    pub catalog: Arc<Catalog>,
}

impl Snapshot {
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.schema.catalog
    }

    pub fn head(&self) -> Head {
        Head {
            commit: CommitId(self.record.head.clone()),
            version: self.record.updated_at,
        }
    }

    pub fn table(&self, t: &TypeDef) -> Result<&TableRef> {
        self.record.tables.get(&t.table_key()).ok_or_else(|| {
            OmniError::Storage(format!(
                "branch '{}' has no table for {}",
                self.branch, t.name
            ))
        })
    }
}

/// Everything about one graph's storage, shared by the substrate and reads.
pub struct GraphStorage {
    pub store: Store,
    pub manifests: Manifests,
    pub tables: Tables,
    /// Schemas read so far, by identity (immutable files, so never stale).
    schemas: parking_lot::Mutex<std::collections::HashMap<String, Arc<Schema>>>,
}

/// A schema's identity: its source and its catalog, since the same source
/// accepted after another history compiles to other stable ids. A graph
/// made before schemas evolved named its first schema by its source alone.
fn schema_id(source: &str, catalog: &Catalog) -> Result<String> {
    let mut bytes = source.as_bytes().to_vec();
    bytes.push(0);
    bytes.extend(serde_json::to_vec(catalog)?);
    Ok(crate::util::hash::sha256_hex(&bytes, 16))
}

fn schema_files(id: &str) -> (String, String) {
    (
        format!("_graph/schema/{id}.pg"),
        format!("_graph/schema/{id}.catalog.json"),
    )
}

/// Give a branch record the tables of schema `to`, coming from `from`: a
/// type's table (and its line) keeps its folder and versions under the
/// type's new key when it was renamed (matched by stable id, so swapped
/// names are no puzzle), a dropped type's table leaves the branch (its
/// data stays for reads of the past), and each new type's empty table is
/// shared from the main line.
pub fn retarget(
    rec: &mut BranchRecord,
    from: &Catalog,
    to: &Catalog,
    created: &[omnigraph_actors::NewTable],
) {
    let key_now = |key: &str| {
        let old = from.by_table_key(key)?;
        to.types
            .iter()
            .find(|t| t.id == old.id)
            .map(TypeDef::table_key)
    };
    rec.tables = std::mem::take(&mut rec.tables)
        .into_iter()
        .filter_map(|(k, r)| key_now(&k).map(|k| (k, r)))
        .collect();
    rec.lines = std::mem::take(&mut rec.lines)
        .into_iter()
        .filter_map(|(k, l)| key_now(&k).map(|k| (k, l)))
        .collect();
    for c in created {
        rec.tables.insert(
            c.table.clone(),
            TableRef {
                dir: c.dir.clone(),
                lance_branch: None,
                version: c.version,
                incarnation: c.incarnation,
                manifest_size: None,
            },
        );
    }
}

/// A new graph's first manifest version and its commit: `main` with every
/// table empty at `refs`.
fn first_version(
    id: &str,
    refs: BTreeMap<String, TableRef>,
    actor: &str,
    types: usize,
) -> (Manifest, CommitRecord) {
    let commit = crate::util::ulid::new_ulid();
    let mut branches = BTreeMap::new();
    branches.insert(
        MAIN.to_string(),
        BranchRecord {
            head: commit.clone(),
            updated_at: 1,
            incarnation: 0,
            parent: None,
            tables: refs,
            lines: BTreeMap::new(),
        },
    );
    let m = Manifest {
        format: manifest::FORMAT,
        version: 1,
        schema: id.to_string(),
        branches,
        change: ChangeNote {
            kind: "init".into(),
            branch: MAIN.into(),
            commit: Some(commit.clone()),
            op: commit.clone(),
        },
    };
    let record = CommitRecord {
        id: commit,
        parents: Vec::new(),
        branch: MAIN.into(),
        manifest_version: 1,
        actor: actor.to_string(),
        timestamp: chrono::Utc::now().to_rfc3339(),
        kind: "init".into(),
        summary: serde_json::json!({ "types": types }),
        expired: false,
    };
    (m, record)
}

/// The storage library's and the query engine's failures, kept whole as
/// the source of the engine's own error (their types stay out of it).
impl From<lance::Error> for OmniError {
    fn from(e: lance::Error) -> Self {
        OmniError::Backend(crate::error::BackendError::new(e))
    }
}

impl From<datafusion::error::DataFusionError> for OmniError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        OmniError::Backend(crate::error::BackendError::new(e))
    }
}

impl GraphStorage {
    /// Create a new graph with the given (already compiled) schema.
    pub async fn init(
        session: StorageSession,
        uri: &str,
        source: &str,
        catalog: Catalog,
        actor: &str,
    ) -> Result<Self> {
        let uri = objstore::normalize_uri(uri)?;
        let store = Store::open(&session, &uri).await?;
        let manifests = Manifests::new(store.clone());
        if manifests.exists().await? {
            return Err(OmniError::AlreadyExists(format!("a graph at {uri}")));
        }
        let tables = Tables::new(store.clone(), session.0);
        let mut refs = BTreeMap::new();
        for t in &catalog.types {
            let version = tables
                .create(&t.table_dir(), tables::table_schema(t))
                .await?;
            refs.insert(
                t.table_key(),
                TableRef {
                    dir: t.table_dir(),
                    lance_branch: None,
                    version,
                    incarnation: rand::random(),
                    manifest_size: None,
                },
            );
        }
        let g = Self {
            store,
            manifests,
            tables,
            schemas: Default::default(),
        };
        let types = catalog.types.len();
        let schema = g.put_schema(source, catalog).await?;
        let (m, record) = first_version(&schema.id, refs, actor, types);
        if !g.manifests.publish(&m, Some(&record)).await? {
            return Err(OmniError::AlreadyExists(format!("a graph at {uri}")));
        }
        Ok(g)
    }

    /// Write a schema's files (create-once, content-addressed: a schema
    /// nobody publishes is harmless) and return it.
    pub async fn put_schema(&self, source: &str, catalog: Catalog) -> Result<Arc<Schema>> {
        let id = schema_id(source, &catalog)?;
        let (pg, json) = schema_files(&id);
        self.store.put(&pg, source.as_bytes()).await?;
        self.store
            .put(&json, &serde_json::to_vec_pretty(&catalog)?)
            .await?;
        let schema = Arc::new(Schema {
            id: id.clone(),
            source: source.to_string(),
            catalog: Arc::new(catalog),
        });
        self.schemas.lock().insert(id, schema.clone());
        Ok(schema)
    }

    /// The schema with this identity, as its files hold it.
    pub async fn schema(&self, id: &str) -> Result<Arc<Schema>> {
        if let Some(s) = self.schemas.lock().get(id) {
            return Ok(s.clone());
        }
        let (pg, json) = schema_files(id);
        // Both files are named by the id: one round trip for the two.
        let (source, catalog_bytes) =
            futures::try_join!(self.store.read(&pg), self.store.read(&json))?;
        let source = source
            .ok_or_else(|| OmniError::Storage(format!("schema {id} is missing from the graph")))?;
        let catalog_bytes = catalog_bytes
            .ok_or_else(|| OmniError::Storage(format!("catalog {id} is missing from the graph")))?;
        let catalog: Catalog = serde_json::from_slice(&catalog_bytes)
            .map_err(|e| OmniError::Storage(format!("catalog {id} is corrupt: {e}")))?;
        let schema = Arc::new(Schema {
            id: id.to_string(),
            source: String::from_utf8_lossy(&source).into_owned(),
            catalog: Arc::new(catalog),
        });
        self.schemas.lock().insert(id.to_string(), schema.clone());
        Ok(schema)
    }

    /// The schema the graph accepts now (other processes apply too).
    pub async fn current_schema(&self) -> Result<Arc<Schema>> {
        let latest = self.manifests.refresh().await?;
        self.schema(&latest.schema).await
    }

    /// The schema of the newest graph version this process knows, without
    /// a read: for a write that is pinned to the schema it compiled against
    /// (one another process replaced meanwhile is `SchemaChanged` at its
    /// prepare, and the write compiles again against `current_schema`).
    pub async fn known_schema(&self) -> Result<Arc<Schema>> {
        let latest = self.manifests.latest().await?;
        self.schema(&latest.schema).await
    }

    /// Open an existing graph.
    pub async fn open(session: StorageSession, uri: &str) -> Result<Self> {
        let uri = objstore::normalize_uri(uri)?;
        let store = Store::open(&session, &uri).await?;
        let manifests = Manifests::new(store.clone());
        let tables = Tables::new(store.clone(), session.0);
        let g = Self {
            store,
            manifests,
            tables,
            schemas: Default::default(),
        };
        // Whether a graph is here is asked beside the read of the hint;
        // the newest version is then read beside the schema the hint names
        // (two round trips, not three). A graph whose accepted schema
        // cannot be read is not opened.
        let (exists, hint) = futures::join!(g.manifests.exists(), g.manifests.read_hint());
        if !exists? {
            return Err(OmniError::NotFound(format!("no graph at {uri}")));
        }
        let hint = hint?;
        let hinted = async {
            match &hint.schema {
                Some(id) => g.schema(id).await.ok(),
                None => None,
            }
        };
        let (latest, hinted) = futures::join!(g.manifests.refresh_from(Some(&hint)), hinted);
        let latest = latest?;
        if hinted.is_none_or(|s| s.id != latest.schema) {
            // An older hint, or a schema applied since it was written.
            g.schema(&latest.schema).await?;
        }
        Ok(g)
    }

    /// Resolve a target to one snapshot.
    pub async fn snapshot(&self, target: &Target) -> Result<Snapshot> {
        let (manifest, branch) = match target {
            // Other processes publish too: a branch's head is read fresh.
            Target::Branch(b) => (self.manifests.refresh().await?, b.clone()),
            Target::Version { version, branch } => {
                (self.version(*version, branch).await?, branch.clone())
            }
            Target::Commit(id) => {
                let rec = self
                    .manifests
                    .commit(id)
                    .await?
                    .ok_or_else(|| OmniError::NotFound(format!("commit {id}")))?;
                (
                    self.version(rec.manifest_version, &rec.branch).await?,
                    rec.branch,
                )
            }
        };
        let record = manifest
            .branches
            .get(&branch)
            .cloned()
            .ok_or_else(|| match target {
                Target::Branch(_) => OmniError::NotFound(format!("branch '{branch}'")),
                _ => OmniError::NotFound(format!(
                    "branch '{branch}' at graph version {}",
                    manifest.version
                )),
            })?;
        let schema = self.schema(&manifest.schema).await?;
        Ok(Snapshot {
            manifest,
            branch,
            record,
            schema,
        })
    }

    /// Graph version `v`, read for `branch`: one a cleanup removed is
    /// `VersionExpired`, naming the oldest version kept for that branch.
    pub async fn version(&self, v: u64, branch: &str) -> Result<Arc<Manifest>> {
        match self.manifests.at(v).await {
            Err(OmniError::NotFound(_)) => Err(self.manifests.missing(v, branch).await),
            other => other,
        }
    }

    /// A table as a snapshot sees it.
    pub async fn read_table(&self, snap: &Snapshot, t: &TypeDef) -> Result<Table> {
        self.open_table(snap.table(t)?).await
    }

    /// A table version this process has open already, without a request.
    pub fn cached_table(&self, t: &TableRef) -> Option<Table> {
        self.tables.cached(t).map(Table)
    }

    /// A table version exactly as a manifest named it.
    pub async fn open_table(&self, t: &TableRef) -> Result<Table> {
        Ok(Table(self.tables.open(t).await?))
    }
}
