//! Shared fixtures: a schema, sample data, temporary graphs and a fingerprint
//! of a graph's visible state for "nothing changed" assertions.

use omnigraph::{Omnigraph, Target};

pub const SCHEMA: &str = r#"
node Person {
    name: String @key
    age: I32?
    email: String? @unique
    status: enum(active, retired)?
    tags: [String]?
    @range(age, 0..150)
    @check(email, "^[^@]+@[^@]+$")
}
node Company { name: String @key }
node Emp { org: String
    num: I64
    @key(org, num) }
node Doc {
    title: String
    published: Date?
    edited: DateTime?
    embedding: Vector(3)?
    body: Blob?
}
edge Knows: Person -> Person { since: Date? }
edge WorksAt: Person -> Company @card(0..1) { role: String? }
"#;

pub const PEOPLE: &str = r#"{"type":"Person","data":{"name":"Alice","age":34,"email":"alice@x.org","status":"active","tags":["a","b"]}}
{"type":"Person","data":{"name":"Bob","age":41}}
{"type":"Person","data":{"name":"Carol"}}
{"type":"Company","data":{"name":"Acme"}}
{"edge":"Knows","from":"Alice","to":"Bob","data":{"since":"2020-01-01"}}
{"edge":"Knows","from":"Bob","to":"Carol"}
{"edge":"WorksAt","from":"Alice","to":"Acme","data":{"role":"eng"}}
"#;

pub struct TestGraph {
    pub dir: tempfile::TempDir,
    pub g: Omnigraph,
}

impl TestGraph {
    pub fn uri(&self) -> String {
        self.dir.path().join("g.omni").to_string_lossy().to_string()
    }
}

pub async fn new_graph() -> TestGraph {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    TestGraph { dir, g }
}

pub async fn loaded_graph() -> TestGraph {
    let t = new_graph().await;
    t.g.load("main", PEOPLE, omnigraph::LoadMode::Overwrite)
        .await
        .unwrap();
    t
}

/// Rows per type on a branch.
pub async fn counts(g: &Omnigraph, branch: &str) -> Vec<(String, usize)> {
    g.snapshot(&Target::Branch(branch.into()))
        .await
        .unwrap()
        .types
        .into_iter()
        .map(|t| (t.name, t.rows))
        .collect()
}

pub async fn count(g: &Omnigraph, branch: &str, ty: &str) -> usize {
    counts(g, branch)
        .await
        .into_iter()
        .find(|(n, _)| n == ty)
        .map(|(_, c)| c)
        .unwrap()
}

/// Everything a user can observe of the graph: graph version, every branch
/// head, and every branch's exported contents.
pub async fn fingerprint(g: &Omnigraph) -> String {
    let version = g.snapshot(&Target::main()).await.unwrap().manifest_version;
    format!("graph version {version}\n{}", state(g).await)
}

/// Every branch's head commit and exported contents (not the graph version,
/// which recovery may advance without changing any branch's state).
pub async fn state(g: &Omnigraph) -> String {
    let mut out = String::new();
    for b in g.branch_list().await.unwrap() {
        let snap = g.snapshot(&Target::Branch(b.name.clone())).await.unwrap();
        out.push_str(&format!("{} {}\n", b.name, snap.head_commit));
        let mut dump = Vec::new();
        g.export(&Target::Branch(b.name), &mut dump).await.unwrap();
        out.push_str(&String::from_utf8(dump).unwrap());
    }
    out
}

/// Where a test's graph lives: a temporary folder, or a fresh prefix of the
/// local S3 server's bucket (which the test binary starts, `util::local_s3`).
pub enum Place {
    Local(tempfile::TempDir),
    S3 {
        prefix: String,
        /// For the test's own files (JSONL inputs).
        scratch: tempfile::TempDir,
    },
}

impl Place {
    pub fn local() -> Self {
        Place::Local(tempfile::tempdir().unwrap())
    }

    pub fn s3() -> Self {
        let bucket = std::env::var("OMNIGRAPH_TEST_S3").expect(
            "the S3 tests need the local S3 server, which the test binary starts (scripts/s3-env.sh): see its message above",
        );
        Place::S3 {
            prefix: format!("{bucket}/{}", omnigraph::util::ulid::new_ulid()),
            scratch: tempfile::tempdir().unwrap(),
        }
    }

    pub fn uri(&self, name: &str) -> String {
        match self {
            Place::Local(d) => d.path().join(name).to_string_lossy().to_string(),
            Place::S3 { prefix, .. } => format!("{prefix}/{name}"),
        }
    }

    pub fn scratch(&self) -> &std::path::Path {
        match self {
            Place::Local(d) => d.path(),
            Place::S3 { scratch, .. } => scratch.path(),
        }
    }
}

/// The object names under a folder of a graph, on any store.
pub async fn stored(uri: &str, dir: &str) -> Vec<String> {
    let store = store(uri).await;
    store.list(dir).await.unwrap()
}

/// A recovery sidecar as found on storage.
pub struct Sidecar {
    pub op: String,
    /// The incarnation of the process that wrote it.
    pub owner: String,
    /// The operation's kind ("load", "compact", ...).
    pub kind: String,
}

/// The object store a graph lives on, opened the way the engine opens it.
pub async fn store(uri: &str) -> omnigraph::storage::objstore::Store {
    omnigraph::storage::objstore::Store::open(
        &omnigraph::storage::requests::StorageSession::default(),
        uri,
    )
    .await
    .unwrap()
}

/// Every recovery sidecar on storage.
pub async fn sidecars(uri: &str) -> Vec<Sidecar> {
    let store = store(uri).await;
    let mut out = Vec::new();
    for name in store.list("_graph/recovery").await.unwrap() {
        if !name.ends_with(".json") {
            continue;
        }
        // Deleted between the listing and the read: resolved meanwhile.
        let Some(bytes) = store
            .read(&format!("_graph/recovery/{name}"))
            .await
            .unwrap()
        else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let field = |f: &str| {
            v[f].as_str()
                .unwrap_or_else(|| panic!("a sidecar's {f}"))
                .to_string()
        };
        out.push(Sidecar {
            op: field("op"),
            owner: field("owner"),
            kind: field("kind"),
        });
    }
    out
}

/// Every graph version's change note: (kind, op).
pub async fn changes(uri: &str) -> Vec<(String, String)> {
    let store = store(uri).await;
    let mut names = store.list("_graph/versions").await.unwrap();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let bytes = store
            .read(&format!("_graph/versions/{name}"))
            .await
            .unwrap()
            .expect("a listed version exists");
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        out.push((
            v["change"]["kind"].as_str().unwrap().to_string(),
            v["change"]["op"].as_str().unwrap().to_string(),
        ));
    }
    out
}

/// Every write was published once: no operation names two versions that
/// changed a branch's tables (a commit, or a recovery's re-point), however
/// many processes raced to resolve it.
pub async fn assert_each_write_published_once(uri: &str) {
    let mut seen = std::collections::BTreeMap::new();
    for (v, (kind, op)) in changes(uri).await.into_iter().enumerate() {
        if (kind == "commit" || kind == "repoint")
            && let Some(first) = seen.insert(op.clone(), v)
        {
            panic!("operation {op} published twice: versions {first} and {v}");
        }
    }
}

/// Every file of a local graph with its size, lock files apart (taking a
/// gate creates one; they hold no data).
pub fn files(root: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    fn walk(
        root: &std::path::Path,
        dir: &std::path::Path,
        out: &mut std::collections::BTreeMap<String, u64>,
    ) {
        for e in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap()) {
            let path = e.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .to_string();
            if e.file_type().unwrap().is_dir() {
                walk(root, &path, out);
            } else if !rel.ends_with(".lock") {
                out.insert(rel, e.metadata().unwrap().len());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// What a refused write must leave as it was: everything a user can
/// observe, and every file of the graph, so no staged data, fork or
/// sidecar is left behind either.
pub struct Untouched {
    visible: String,
    files: std::collections::BTreeMap<String, u64>,
}

impl Untouched {
    pub async fn of(t: &TestGraph) -> Self {
        // The hints of the writes before this one are not its files, nor
        // is the sidecar a write before it deletes after its answer.
        omnigraph::storage::background::settle().await;
        let recovery = t.dir.path().join("g.omni").join("_graph").join("recovery");
        for _ in 0..5_000 {
            let left = std::fs::read_dir(&recovery)
                .map(|d| {
                    d.flatten()
                        .any(|e| e.path().extension().is_some_and(|x| x == "json"))
                })
                .unwrap_or(false);
            if !left {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        Self {
            visible: fingerprint(&t.g).await,
            files: files(&t.dir.path().join("g.omni")),
        }
    }

    /// Assert that an allowed write changed the graph's files.
    pub fn assert_written(&self, t: &TestGraph, what: &dyn std::fmt::Display) {
        let now = files(&t.dir.path().join("g.omni"));
        assert_ne!(self.files, now, "{what} was allowed and wrote nothing");
    }

    pub async fn check(&self, t: &TestGraph, what: &dyn std::fmt::Display) {
        assert_eq!(
            self.visible,
            fingerprint(&t.g).await,
            "a refused write changed the graph: {what}"
        );
        omnigraph::storage::background::settle().await;
        let now = files(&t.dir.path().join("g.omni"));
        let added: Vec<&String> = now
            .keys()
            .filter(|k| !self.files.contains_key(*k))
            .collect();
        let changed: Vec<&String> = now
            .iter()
            .filter(|(k, n)| self.files.get(*k).is_some_and(|m| m != *n))
            .map(|(k, _)| k)
            .collect();
        let removed: Vec<&String> = self
            .files
            .keys()
            .filter(|k| !now.contains_key(*k))
            .collect();
        assert!(
            added.is_empty() && changed.is_empty() && removed.is_empty(),
            "a refused write left files behind: {what}\nadded {added:?}\nchanged {changed:?}\nremoved {removed:?}"
        );
    }
}

/// The names of every person on main, in order.
pub async fn person_names(g: &Omnigraph) -> Vec<serde_json::Value> {
    let r = g
        .query(
            &Target::main(),
            "query q() { match { $p: Person } return { $p.name } order { $p.name } }",
            "q",
            &serde_json::Value::Null,
        )
        .await
        .unwrap();
    omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(|row| row.into_iter().next().expect("one column").1)
        .collect()
}

/// A small deterministic generator (the tests' own, not the engine's).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// Uniform in [-1, 1], in steps of 0.001.
    pub fn unit(&mut self) -> f64 {
        (self.next() % 2001) as f64 / 1000.0 - 1.0
    }
}

/// Run the `omnigraph` binary with `args`.
pub fn cli(args: &[&str]) -> std::process::Output {
    cli_with(&[], args)
}

/// Run the `omnigraph` binary with `args` and these environment variables.
pub fn cli_with(env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap()
}

/// A CLI run that must have succeeded: its stdout.
pub fn cli_ok(args: &[&str]) -> String {
    cli_ok_with(&[], args)
}

/// [`cli_ok`] with these environment variables.
pub fn cli_ok_with(env: &[(&str, &str)], args: &[&str]) -> String {
    let out = cli_with(env, args);
    assert!(
        out.status.success(),
        "omnigraph {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Leave a sidecar of process `owner` in the local graph at `uri`, as an
/// intent still unresolved (one whose late table commit landed after a
/// takeover, before recovery ran); returns its path.
pub fn unresolved_intent_of(uri: &str, owner: &str) -> std::path::PathBuf {
    let op = "01M98ZZZZZZZZZZZZZZZZZZZZZ";
    let sidecar = std::path::Path::new(uri).join(format!("_graph/recovery/{op}.json"));
    let intent = serde_json::json!({
        "op": op, "owner": owner, "kind": "load",
        "branch": "main", "expected_commit": "c", "expected_version": 1,
        "commit": "c2", "tables": []
    });
    std::fs::create_dir_all(sidecar.parent().unwrap()).unwrap();
    std::fs::write(&sidecar, serde_json::to_vec(&intent).unwrap()).unwrap();
    sidecar
}

/// A child process killed and reaped when dropped: a test that fails
/// leaves none running to starve the tests after it.
pub struct Reaped(pub std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Reaped {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}
