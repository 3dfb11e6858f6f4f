//! The command line's arguments: every command takes the graph as `--store
//! URI` or as a positional URI; how a target and a query's inputs are read
//! from them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use omnigraph::{LoadMode, OmniError, Target};

#[derive(Parser)]
#[command(
    name = "omnigraph",
    version,
    about = "A typed property-graph database on Lance"
)]
pub struct Cli {
    /// Act as ACTOR: the author every commit records, and the actor a
    /// policy decides for (else OMNIGRAPH_ACTOR).
    #[arg(long = "as", value_name = "ACTOR", global = true)]
    pub actor: Option<String>,
    /// Enforce the policy in FILE: YAML rules, or Cedar in a `.cedar` file
    /// (else OMNIGRAPH_POLICY; `serve` reloads it on SIGHUP).
    #[arg(long = "policy", value_name = "FILE", global = true)]
    pub policy: Option<PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Args, Clone)]
pub struct Graph {
    /// The graph URI (a local path, memory://, s3://...).
    #[arg(long = "store", value_name = "URI")]
    store: Option<String>,
    /// The graph URI, as an alternative to --store.
    #[arg(value_name = "URI")]
    uri: Option<String>,
}

impl Graph {
    pub fn uri(&self) -> Result<&str, OmniError> {
        match (&self.store, &self.uri) {
            (Some(s), None) | (None, Some(s)) => Ok(s),
            (Some(a), Some(b)) if a == b => Ok(a),
            (Some(_), Some(_)) => Err(OmniError::BadRequest(
                "give the graph once: either --store URI or a positional URI".into(),
            )),
            (None, None) => Err(OmniError::BadRequest(
                "which graph? give --store URI or a positional URI".into(),
            )),
        }
    }
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create a graph with a schema.
    Init(Init),
    /// Load a JSONL file as one commit.
    Load(Load),
    /// Create, list and delete branches.
    Branch {
        #[command(subcommand)]
        cmd: BranchCmd,
    },
    /// Show a branch's state: graph version, head commit, rows and table versions per type.
    Snapshot(Snapshot),
    /// Run a read query.
    Query(Query),
    /// Run a mutation (insert / update / delete) as one commit.
    Mutate(Mutate),
    /// Commit history.
    Commit {
        #[command(subcommand)]
        cmd: CommitCmd,
    },
    /// Follow a branch's changes, commit by commit, from a cursor.
    Changes {
        #[command(subcommand)]
        cmd: ChangesCmd,
    },
    /// Write a branch (or snapshot) as JSONL to stdout.
    Export(Export),
    /// Read one Blob cell: its kind, length and ETag, or its bytes.
    Blob {
        #[command(subcommand)]
        cmd: BlobCmd,
    },
    /// Show, plan or apply the graph's schema.
    Schema {
        #[command(subcommand)]
        cmd: SchemaCmd,
    },
    /// Build or refresh every declared search index of a branch, as one commit.
    Optimize(Optimize),
    /// Remove index files no version records (left by crashed or losing
    /// optimizes and deleted branches); files of running processes stay.
    Gc(Gc),
    /// Remove old graph versions and the files only they (or crashed
    /// writes) hold, keeping every branch head and recent history.
    Cleanup(Cleanup),
    /// Test harness: print `OWNER <incarnation>`, then append write after
    /// write, printing `BEGIN <n>` before each and `ACK <n>` once it is
    /// acknowledged (the chaos tests kill this process at chosen moments).
    #[command(hide = true)]
    StressWriter(StressWriter),
    /// Serve graphs over HTTP (JSON, Arrow IPC, NDJSON), with bearer tokens.
    Serve(Serve),
    /// Create a small graph in a temporary folder and walk through the main features.
    Demo {
        /// Where to create the demo graph (default: a fresh temporary folder).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Check a policy file, test it against cases, explain a decision.
    Policy {
        #[command(subcommand)]
        cmd: PolicyCmd,
    },
}

#[derive(Args)]
pub struct Init {
    #[arg(long, value_name = "FILE")]
    pub schema: PathBuf,
    #[command(flatten)]
    pub graph: Graph,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct Load {
    #[arg(long, value_name = "FILE")]
    pub data: PathBuf,
    /// overwrite | append | merge
    #[arg(long)]
    pub mode: LoadMode,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Create --branch from this branch first if it does not exist.
    #[arg(long, value_name = "BRANCH")]
    pub from: Option<String>,
    #[command(flatten)]
    pub graph: Graph,
    #[arg(long)]
    pub json: bool,
}

/// Which state of the graph a read command reads.
#[derive(Args)]
pub struct At {
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// The state a commit published, instead of the branch head.
    #[arg(long, value_name = "COMMIT")]
    pub commit: Option<String>,
    /// The branch as of a graph manifest version.
    #[arg(long, value_name = "N")]
    pub version: Option<u64>,
}

impl At {
    pub fn target(self) -> Result<Target, OmniError> {
        target(self.branch, self.commit, self.version)
    }
}

#[derive(Args)]
pub struct Snapshot {
    #[command(flatten)]
    pub graph: Graph,
    #[command(flatten)]
    pub at: At,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct Optimize {
    #[command(flatten)]
    pub graph: Graph,
    #[arg(long, default_value = "main")]
    pub branch: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct Gc {
    #[command(flatten)]
    pub graph: Graph,
    /// List what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct Cleanup {
    #[command(flatten)]
    pub graph: Graph,
    /// Keep graph versions written within this long: a whole number and a
    /// unit s, m, h or d (7d, 12h, 30m, 0s).
    #[arg(long, default_value = "7d", value_name = "DURATION")]
    pub older_than: String,
    /// Keep, per branch, the graph versions of its newest N commits.
    #[arg(long, value_name = "N")]
    pub keep_versions: Option<usize>,
    /// Report what would be removed, and remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct Query {
    #[command(flatten)]
    pub input: QueryInput,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Read the state a commit published.
    #[arg(long = "snapshot", value_name = "COMMIT")]
    pub snapshot: Option<String>,
    /// Read the branch as of a graph manifest version.
    #[arg(long, value_name = "N")]
    pub version: Option<u64>,
    /// table | json | jsonl | csv
    #[arg(long, default_value = "table")]
    pub format: omnigraph::results::Format,
    /// Print the runtime cache's counters, and the object-store requests
    /// by kind, to stderr afterwards.
    #[arg(long, hide = true)]
    pub stats: bool,
    /// Print the plan instead of running it: each step, the filters pushed
    /// to storage, the indexes it reads and where each traversal's graph
    /// index comes from (cached, persisted, delta, rebuilt). With
    /// `--format json`, as a JSON array.
    #[arg(long, conflicts_with = "profile")]
    pub explain: bool,
    /// Run the query and print the plan with each step's rows and time to
    /// stderr after the result (the result is printed as usual).
    #[arg(long)]
    pub profile: bool,
}

#[derive(Args)]
pub struct Mutate {
    #[command(flatten)]
    pub input: QueryInput,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Only if the branch head is still this commit (exit code 4 if not).
    #[arg(long = "if-commit", value_name = "COMMIT")]
    pub if_commit: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct Export {
    #[command(flatten)]
    pub graph: Graph,
    #[command(flatten)]
    pub at: At,
}

#[derive(Args)]
pub struct StressWriter {
    /// Linger this long inside every commit (after its sidecar and each
    /// table commit): only in a build with fault injection.
    #[arg(long, default_value_t = 0)]
    pub dwell_ms: u64,
    #[command(flatten)]
    pub graph: Graph,
    /// Number of the first write.
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Stop after this many writes (default: write until killed).
    #[arg(long)]
    pub count: Option<u64>,
}

#[derive(Subcommand)]
pub enum BranchCmd {
    Create {
        name: String,
        #[arg(long, default_value = "main")]
        from: String,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
    List {
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
    Delete {
        name: String,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
    /// Merge a branch into another (exit code 5 on conflicts: nothing is written).
    Merge(Merge),
}

#[derive(clap::Args)]
pub struct Merge {
    /// The branch whose work comes in.
    pub source: String,
    #[arg(long, default_value = "main")]
    pub into: String,
    /// Delete the source branch after a successful merge (a failed delete
    /// is reported; the merge stands).
    #[arg(long)]
    pub delete_branch: bool,
    #[command(flatten)]
    pub graph: Graph,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum SchemaCmd {
    /// Print the accepted schema's source (as of a graph version with --version).
    Show {
        #[command(flatten)]
        graph: Graph,
        #[arg(long, value_name = "N")]
        version: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// The steps a new schema takes and what each does to the data; changes nothing.
    Plan {
        #[arg(long, value_name = "FILE")]
        schema: PathBuf,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
    /// Make a new schema the graph's, for every branch, as one commit.
    Apply {
        #[arg(long, value_name = "FILE")]
        schema: PathBuf,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
pub enum BlobCmd {
    /// The cell's kind and length, and a managed value's ETag.
    Stat {
        #[command(flatten)]
        cell: BlobCellArgs,
        #[arg(long)]
        json: bool,
    },
    /// The cell's bytes, to stdout or --out, read 4 MiB at a time.
    Get {
        #[command(flatten)]
        cell: BlobCellArgs,
        /// The first byte to read.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// How many bytes (clamped to the end of the blob, like an HTTP range).
        #[arg(long)]
        length: Option<u64>,
        /// Write the bytes to this file (whole or not at all) instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Show or change the URI bases external Blob references may point
    /// under (none by default; `file://` only when named).
    Policy {
        /// Allow references under this base (repeatable).
        #[arg(long, value_name = "URI")]
        allow: Vec<String>,
        /// Stop allowing this base (repeatable).
        #[arg(long, value_name = "URI")]
        revoke: Vec<String>,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
}

/// `TYPE ID PROPERTY` of a blob command, the graph and the state it reads.
#[derive(Args)]
pub struct BlobCellArgs {
    /// A node or edge type.
    #[arg(value_name = "TYPE")]
    pub type_name: String,
    /// The node's or edge's id.
    pub id: String,
    /// A Blob property of the type.
    pub property: String,
    /// The graph URI.
    #[arg(long = "store", value_name = "URI")]
    pub store: String,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Read the state a commit published.
    #[arg(long = "snapshot", visible_alias = "commit", value_name = "COMMIT")]
    pub snapshot: Option<String>,
    /// Read the branch as of a graph manifest version.
    #[arg(long, value_name = "N")]
    pub version: Option<u64>,
}

#[derive(Subcommand)]
pub enum ChangesCmd {
    /// The branch's commits after a cursor (or a start), oldest first, each
    /// with its entity changes; prints the cursor to resume from.
    Poll(Poll),
    /// Write the branch as it is at one head to FILE (the load format) and
    /// print the cursor that resumes the feed right after that head.
    Baseline(BaselineArgs),
}

#[derive(Args)]
pub struct BaselineArgs {
    #[command(flatten)]
    pub graph: Graph,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Written as FILE.partial, renamed to FILE once whole.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// The feed's filter the cursor binds (and the types written).
    #[command(flatten)]
    pub filter: FeedFilter,
    #[arg(long)]
    pub json: bool,
}

/// Which changes a feed keeps; a cursor binds it.
#[derive(Args)]
pub struct FeedFilter {
    /// Only this type's changes (repeatable).
    #[arg(long = "type", value_name = "TYPE")]
    pub types: Vec<String>,
    /// node | edge
    #[arg(long)]
    pub kind: Option<String>,
    /// insert | update | delete (repeatable).
    #[arg(long = "op", value_name = "OP")]
    pub ops: Vec<String>,
}

#[derive(Args)]
pub struct Poll {
    #[command(flatten)]
    pub graph: Graph,
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// now | beginning | after:COMMIT (without --cursor; default now).
    #[arg(long, conflicts_with = "cursor")]
    pub start: Option<String>,
    /// Resume after what the poll that printed it delivered.
    #[arg(long)]
    pub cursor: Option<String>,
    #[command(flatten)]
    pub filter: FeedFilter,
    /// At most this many commits (default 100).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Wait for new commits and print each block as one JSON line as it
    /// lands, then `{"cursor": ...}`, until interrupted.
    #[arg(long)]
    pub follow: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand)]
pub enum CommitCmd {
    List {
        #[command(flatten)]
        graph: Graph,
        #[arg(long, default_value = "main")]
        branch: String,
        #[arg(long)]
        limit: Option<usize>,
        #[arg(long)]
        json: bool,
    },
    /// One commit: id, parents, branch, manifest version, actor, time, summary.
    Show {
        id: String,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
    /// The entities a commit inserted, updated or deleted.
    Changes {
        id: String,
        #[command(flatten)]
        graph: Graph,
        /// Only this type's changes.
        #[arg(long = "type")]
        type_name: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn target(
    branch: String,
    commit: Option<String>,
    version: Option<u64>,
) -> Result<Target, OmniError> {
    match (commit, version) {
        (Some(_), Some(_)) => Err(OmniError::BadRequest(
            "give --commit or --version, not both".into(),
        )),
        (Some(c), None) => Ok(Target::Commit(c)),
        (None, Some(v)) => Ok(Target::Version { version: v, branch }),
        (None, None) => Ok(Target::Branch(branch)),
    }
}

/// Where a `query` or `mutate` finds its graph, its source and its
/// parameters.
#[derive(Args)]
pub struct QueryInput {
    #[arg(long = "store", value_name = "URI")]
    store: Option<String>,
    /// `[URI] [NAME]`: the graph (when --store is not given) and the
    /// query's name (optional when the source holds one query).
    #[arg(value_name = "URI_OR_NAME", num_args = 0..=2)]
    positional: Vec<String>,
    /// A .gq file holding the query.
    #[arg(long = "query", value_name = "FILE")]
    query_file: Option<PathBuf>,
    /// The query text itself.
    #[arg(short = 'e', long = "execute", value_name = "GQ")]
    execute: Option<String>,
    /// Parameters as a JSON object.
    #[arg(long, value_name = "JSON")]
    params: Option<String>,
}

/// The graph, the query source and its name, and the parameters.
pub fn query_inputs(
    input: QueryInput,
) -> Result<(String, String, String, serde_json::Value), OmniError> {
    let QueryInput {
        store,
        positional,
        query_file,
        execute,
        params,
    } = input;
    let (uri, name) = match (store, positional.as_slice()) {
        (Some(s), []) => (s, None),
        (Some(s), [n]) => (s, Some(n.clone())),
        (None, [u]) => (u.clone(), None),
        (None, [u, n]) => (u.clone(), Some(n.clone())),
        _ => {
            return Err(OmniError::BadRequest(
                "usage: omnigraph query|mutate (--store URI | URI) (--query FILE | -e GQ) [NAME]"
                    .into(),
            ));
        }
    };
    let source = match (query_file, execute) {
        (Some(f), None) => std::fs::read_to_string(&f)
            .map_err(|e| OmniError::BadRequest(format!("cannot read {}: {e}", f.display())))?,
        (None, Some(src)) => src,
        _ => {
            return Err(OmniError::BadRequest(
                "give --query FILE or -e 'query ...'".into(),
            ));
        }
    };
    let name = omnigraph::query_name(&source, name)?;
    let params: serde_json::Value = match params {
        Some(p) => serde_json::from_str(&p)
            .map_err(|e| OmniError::BadRequest(format!("--params is not JSON: {e}")))?,
        None => serde_json::Value::Null,
    };
    Ok((uri, source, name, params))
}

#[derive(Args)]
pub struct Serve {
    /// A graph to serve, as ID=URI (repeat for several).
    #[arg(long = "graph", value_name = "ID=URI", required = true)]
    pub graphs: Vec<String>,
    /// The address to listen on (port 0: any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// A JSON file `{"actor": "token", ...}` (else the OMNIGRAPH_TOKENS variable).
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// Serve without tokens: every request acts as this process's user.
    #[arg(long, conflicts_with = "tokens")]
    pub unauthenticated: bool,
    /// The largest JSON request body (a load's NDJSON body is streamed, not bounded by this).
    #[arg(long, value_name = "N", default_value_t = omnigraph::server::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
}

impl Serve {
    /// `(id, uri)` per `--graph`.
    pub fn graph_list(&self) -> Result<Vec<(String, String)>, OmniError> {
        self.graphs
            .iter()
            .map(|g| {
                g.split_once('=')
                    .filter(|(id, uri)| !id.is_empty() && !uri.is_empty())
                    .map(|(id, uri)| (id.to_string(), uri.to_string()))
                    .ok_or_else(|| {
                        OmniError::BadRequest(format!("--graph {g:?}: give it as ID=URI"))
                    })
            })
            .collect()
    }
}

#[derive(Subcommand)]
pub enum PolicyCmd {
    /// Compile a policy file and check it (exit 2 naming what is wrong).
    Validate {
        file: PathBuf,
        /// Print the Cedar the file compiles to.
        #[arg(long)]
        cedar: bool,
        #[arg(long)]
        json: bool,
    },
    /// Decide every case of a cases file (exit 1 if any is not as expected).
    Test {
        file: PathBuf,
        #[arg(long, value_name = "CASES.yaml")]
        cases: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// The decision for one call and the rule that made it.
    Explain {
        file: PathBuf,
        #[arg(long)]
        actor: String,
        #[arg(long)]
        action: String,
        /// The branch the call reads or writes.
        #[arg(long)]
        branch: Option<String>,
        /// The branch the call changes (a merge's target, the branch
        /// created or deleted, main for a schema apply).
        #[arg(long)]
        target_branch: Option<String>,
        #[arg(long)]
        json: bool,
    },
}
