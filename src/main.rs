//! The `omnigraph` command line: every command takes the graph as `--store
//! URI` or as a positional URI; `--json` gives machine output, errors go to
//! stderr with a non-zero exit code.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use omnigraph::{LoadMode, OmniError, Omnigraph, Target};
use serde::Serialize;

mod cli_demo;
mod cli_table;

#[derive(Parser)]
#[command(
    name = "omnigraph",
    version,
    about = "A typed property-graph database on Lance"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Clone)]
struct Graph {
    /// The graph URI (a local path, memory://, s3://...).
    #[arg(long = "store", value_name = "URI")]
    store: Option<String>,
    /// The graph URI, as an alternative to --store.
    #[arg(value_name = "URI")]
    uri: Option<String>,
}

impl Graph {
    fn uri(&self) -> Result<&str, OmniError> {
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
enum Cmd {
    /// Create a graph with a schema.
    Init {
        #[arg(long, value_name = "FILE")]
        schema: PathBuf,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
    /// Load a JSONL file as one commit.
    Load {
        #[arg(long, value_name = "FILE")]
        data: PathBuf,
        /// overwrite | append | merge
        #[arg(long)]
        mode: LoadMode,
        #[arg(long, default_value = "main")]
        branch: String,
        /// Create --branch from this branch first if it does not exist.
        #[arg(long, value_name = "BRANCH")]
        from: Option<String>,
        #[command(flatten)]
        graph: Graph,
        #[arg(long)]
        json: bool,
    },
    /// Create, list and delete branches.
    Branch {
        #[command(subcommand)]
        cmd: BranchCmd,
    },
    /// Show a branch's state: graph version, head commit, rows and table versions per type.
    Snapshot {
        #[command(flatten)]
        graph: Graph,
        #[arg(long, default_value = "main")]
        branch: String,
        /// The state a commit published, instead of the branch head.
        #[arg(long, value_name = "COMMIT")]
        commit: Option<String>,
        /// The branch as of a graph manifest version.
        #[arg(long, value_name = "N")]
        version: Option<u64>,
        #[arg(long)]
        json: bool,
    },
    /// Run a read query.
    Query {
        #[command(flatten)]
        input: QueryInput,
        #[arg(long, default_value = "main")]
        branch: String,
        /// Read the state a commit published.
        #[arg(long = "snapshot", value_name = "COMMIT")]
        snapshot: Option<String>,
        /// Read the branch as of a graph manifest version.
        #[arg(long, value_name = "N")]
        version: Option<u64>,
        /// table | json | jsonl | csv
        #[arg(long, default_value = "table")]
        format: omnigraph::exec::output::Format,
        /// Print the runtime cache's counters, and the object-store requests
        /// by kind, to stderr afterwards.
        #[arg(long, hide = true)]
        stats: bool,
    },
    /// Run a mutation (insert / update / delete) as one commit.
    Mutate {
        #[command(flatten)]
        input: QueryInput,
        #[arg(long, default_value = "main")]
        branch: String,
        /// Only if the branch head is still this commit (exit code 4 if not).
        #[arg(long = "if-commit", value_name = "COMMIT")]
        if_commit: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Commit history.
    Commit {
        #[command(subcommand)]
        cmd: CommitCmd,
    },
    /// Write a branch (or snapshot) as JSONL to stdout.
    Export {
        #[command(flatten)]
        graph: Graph,
        #[arg(long, default_value = "main")]
        branch: String,
        #[arg(long, value_name = "COMMIT")]
        commit: Option<String>,
        #[arg(long, value_name = "N")]
        version: Option<u64>,
    },
    /// Test harness: append write after write and print `ACK <n>` after each
    /// acknowledged one (the chaos test kills this process at random moments).
    #[command(hide = true)]
    StressWriter {
        #[command(flatten)]
        graph: Graph,
        /// Number of the first write.
        #[arg(long, default_value_t = 0)]
        start: u64,
    },
    /// Create a small graph in a temporary folder and walk through the main features.
    Demo {
        /// Where to create the demo graph (default: a fresh temporary folder).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BranchCmd {
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
}

#[derive(Subcommand)]
enum CommitCmd {
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
}

fn target(
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
struct QueryInput {
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
fn query_inputs(
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
    let name = match name {
        Some(n) => n,
        None => {
            let file = omnigraph::compiler::query::parser::parse(&source)?;
            match file.queries.as_slice() {
                [one] => one.name.clone(),
                many => {
                    let names: Vec<&str> = many.iter().map(|q| q.name.as_str()).collect();
                    return Err(OmniError::BadRequest(format!(
                        "which query? name one of: {}",
                        names.join(", ")
                    )));
                }
            }
        }
    };
    let params: serde_json::Value = match params {
        Some(p) => serde_json::from_str(&p)
            .map_err(|e| OmniError::BadRequest(format!("--params is not JSON: {e}")))?,
        None => serde_json::Value::Null,
    };
    Ok((uri, source, name, params))
}

fn print_json<T: Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serialisable"));
}

fn exit_code(e: &OmniError) -> i32 {
    match e {
        OmniError::Parse { .. }
        | OmniError::Schema { .. }
        | OmniError::Type { .. }
        | OmniError::BadRequest(_)
        | OmniError::ReadOnly(_) => 2,
        OmniError::ReadSetChanged
        | OmniError::Contended { .. }
        | OmniError::PreconditionFailed { .. } => 4,
        _ => 1,
    }
}

/// A progress bar on stderr that appears only once a load takes a moment.
struct Progress {
    bar: indicatif::ProgressBar,
    started: Instant,
}

impl Progress {
    fn new(total: u64) -> Self {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(total),
            indicatif::ProgressDrawTarget::hidden(),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        bar.set_message("reading");
        Self {
            bar,
            started: Instant::now(),
        }
    }

    fn update(&self, bytes: u64) {
        if self.bar.is_hidden()
            && self.started.elapsed() > Duration::from_millis(300)
            && std::io::stderr().is_terminal()
        {
            self.bar
                .set_draw_target(indicatif::ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
        self.bar.set_position(bytes);
    }
}

async fn run(cmd: Cmd) -> Result<(), OmniError> {
    match cmd {
        Cmd::Init {
            schema,
            graph,
            json,
        } => {
            let src = std::fs::read_to_string(&schema).map_err(|e| {
                OmniError::BadRequest(format!("cannot read schema {}: {e}", schema.display()))
            })?;
            let g = Omnigraph::init(graph.uri()?, &src).await?;
            let snap = g.snapshot(&Target::main()).await;
            let uri = g.uri().to_string();
            g.close().await;
            let snap = snap?;
            if json {
                print_json(&snap);
            } else {
                println!(
                    "initialised {} with {} types (commit {})",
                    uri,
                    snap.types.len(),
                    snap.head_commit
                );
            }
        }
        Cmd::Load {
            data,
            mode,
            branch,
            from,
            graph,
            json,
        } => {
            let g = Omnigraph::open(graph.uri()?).await?;
            let file = std::fs::File::open(&data).map_err(|e| {
                OmniError::BadRequest(format!("cannot read {}: {e}", data.display()))
            })?;
            let total = file.metadata().map(|m| m.len()).unwrap_or(0);
            let progress = std::sync::Arc::new(Progress::new(total));
            let p = progress.clone();
            let reader = std::io::BufReader::with_capacity(1 << 20, file);
            let result = g
                .load_from(&branch, from.as_deref(), reader, mode, move |b| p.update(b))
                .await;
            progress.bar.finish_and_clear();
            g.close().await;
            let report = result?;
            if json {
                print_json(&report);
            } else {
                cli_table::print_load(&report);
            }
        }
        Cmd::Branch { cmd } => match cmd {
            BranchCmd::Create {
                name,
                from,
                graph,
                json,
            } => {
                let g = Omnigraph::open(graph.uri()?).await?;
                let b = g.branch_create(&name, &from).await;
                g.close().await;
                let b = b?;
                if json {
                    print_json(&b);
                } else {
                    println!(
                        "created branch {} from {} at commit {}",
                        b.name, from, b.head
                    );
                }
            }
            BranchCmd::List { graph, json } => {
                let g = Omnigraph::open_read_only(graph.uri()?).await?;
                let list = g.branch_list().await?;
                if json {
                    print_json(&list);
                } else {
                    cli_table::print_branches(&list);
                }
            }
            BranchCmd::Delete { name, graph, json } => {
                let g = Omnigraph::open(graph.uri()?).await?;
                let r = g.branch_delete(&name).await;
                g.close().await;
                r?;
                if json {
                    print_json(&serde_json::json!({ "deleted": name }));
                } else {
                    println!("deleted branch {name}");
                }
            }
        },
        Cmd::Snapshot {
            graph,
            branch,
            commit,
            version,
            json,
        } => {
            let g = Omnigraph::open_read_only(graph.uri()?).await?;
            let snap = g.snapshot(&target(branch, commit, version)?).await?;
            if json {
                print_json(&snap);
            } else {
                cli_table::print_snapshot(&snap);
            }
        }
        Cmd::Query {
            input,
            branch,
            snapshot,
            version,
            format,
            stats,
        } => {
            let (uri, source, name, params) = query_inputs(input)?;
            let g = Omnigraph::open_read_only(&uri).await?;
            let result = g
                .query(&target(branch, snapshot, version)?, &source, &name, &params)
                .await?;
            match format {
                omnigraph::exec::output::Format::Table => cli_table::print_result(&result)?,
                f => {
                    let mut out = std::io::BufWriter::new(std::io::stdout());
                    omnigraph::exec::output::write(&result, f, &mut out)?;
                    out.flush()?;
                }
            }
            if stats {
                eprintln!("{}", g.cache_stats());
                eprintln!("object store: {}", g.requests());
            }
        }
        Cmd::Mutate {
            input,
            branch,
            if_commit,
            json,
        } => {
            let (uri, source, name, params) = query_inputs(input)?;
            let g = Omnigraph::open(&uri).await?;
            let r = g
                .mutate_if(&branch, &source, &name, &params, if_commit.as_deref())
                .await;
            g.close().await;
            let r = r?;
            if json {
                print_json(&r);
            } else {
                println!(
                    "mutation {name} on {}: commit {} at graph version {}",
                    r.branch, r.commit, r.manifest_version
                );
                let mut rows = Vec::new();
                for (t, n) in &r.nodes {
                    rows.push(vec![t.clone(), "node".into(), n.to_string()]);
                }
                for (t, n) in &r.edges {
                    rows.push(vec![t.clone(), "edge".into(), n.to_string()]);
                }
                cli_table::table(&["type", "kind", "rows affected"], &rows);
            }
        }
        Cmd::Commit {
            cmd:
                CommitCmd::List {
                    graph,
                    branch,
                    limit,
                    json,
                },
        } => {
            let g = Omnigraph::open_read_only(graph.uri()?).await?;
            let commits = g.commits(&branch, limit).await?;
            if json {
                print_json(&commits);
            } else {
                cli_table::print_commits(&commits);
            }
        }
        Cmd::Export {
            graph,
            branch,
            commit,
            version,
        } => {
            let g = Omnigraph::open_read_only(graph.uri()?).await?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout());
            g.export(&target(branch, commit, version)?, &mut out)
                .await?;
            out.flush()?;
        }
        Cmd::StressWriter { graph, start } => {
            let g = Omnigraph::open(graph.uri()?).await?;
            let mut out = std::io::stdout();
            for n in start.. {
                // One write touches two node rows and an edge between them:
                // a partial commit would show as a node without its partner.
                let jsonl = format!(
                    "{{\"type\":\"Person\",\"data\":{{\"name\":\"p{n}\"}}}}\n{{\"type\":\"Person\",\"data\":{{\"name\":\"q{n}\"}}}}\n{{\"edge\":\"Knows\",\"from\":\"p{n}\",\"to\":\"q{n}\"}}"
                );
                g.load("main", &jsonl, LoadMode::Append).await?;
                writeln!(out, "ACK {n}")?;
                out.flush()?;
            }
        }
        Cmd::Demo { dir } => cli_demo::run(dir).await?,
    }
    Ok(())
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OMNIGRAPH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,lance=error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(run(cli.cmd));
    if let Err(e) = result {
        eprintln!("error[{}]: {e}", e.kind());
        std::process::exit(exit_code(&e));
    }
}
