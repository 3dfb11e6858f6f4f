//! One function per command: open the graph the way the command needs
//! (read-only for reads), do the one thing, close read-write handles, print.

use std::io::Write;

use omnigraph::{BlobCell, LoadMode, OmniError, Target};
use serde::Serialize;

use super::access;
use super::args::{
    BaselineArgs, BlobCellArgs, BlobCmd, BranchCmd, ChangesCmd, Cleanup, Cmd, CommitCmd, Export,
    Gc, Graph, Init, Load, Merge, Mutate, Optimize, PolicyCmd, Poll, Query, SchemaCmd, Serve,
    Snapshot, StressWriter, query_inputs, target,
};
use super::progress::Progress;
use super::{demo, table};

type Result<T> = std::result::Result<T, OmniError>;

fn print_json<T: Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serialisable"));
}

/// Run one command. Each command's future is boxed: together they are too
/// deep for the compiler to lay out as one.
pub async fn run(cmd: Cmd) -> Result<()> {
    type Boxed<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + 'a>>;
    let fut: Boxed = match cmd {
        Cmd::Init(a) => Box::pin(init(a)),
        Cmd::Load(a) => Box::pin(load(a)),
        Cmd::Branch { cmd } => match cmd {
            BranchCmd::Create {
                name,
                from,
                graph,
                json,
            } => Box::pin(async move { branch_create(&name, &from, &graph, json).await }),
            BranchCmd::List { graph, json } => {
                Box::pin(async move { branch_list(&graph, json).await })
            }
            BranchCmd::Delete { name, graph, json } => {
                Box::pin(async move { branch_delete(&name, &graph, json).await })
            }
            BranchCmd::Merge(a) => Box::pin(branch_merge(a)),
        },
        Cmd::Snapshot(a) => Box::pin(snapshot(a)),
        Cmd::Query(a) => Box::pin(query(a)),
        Cmd::Mutate(a) => Box::pin(mutate(a)),
        Cmd::Commit { cmd } => match cmd {
            CommitCmd::List {
                graph,
                branch,
                limit,
                json,
            } => Box::pin(async move { commit_list(&graph, &branch, limit, json).await }),
            CommitCmd::Show { id, graph, json } => {
                Box::pin(async move { commit_show(&id, &graph, json).await })
            }
            CommitCmd::Changes {
                id,
                graph,
                type_name,
                json,
            } => Box::pin(async move { commit_changes(&id, &graph, type_name, json).await }),
        },
        Cmd::Changes { cmd } => match cmd {
            ChangesCmd::Poll(a) => Box::pin(changes_poll(a)),
            ChangesCmd::Baseline(a) => Box::pin(changes_baseline(a)),
        },
        Cmd::Export(a) => Box::pin(export(a)),
        Cmd::Blob { cmd } => match cmd {
            BlobCmd::Stat { cell, json } => Box::pin(blob_stat(cell, json)),
            BlobCmd::Get {
                cell,
                offset,
                length,
                out,
            } => Box::pin(blob_get(cell, offset, length, out)),
            BlobCmd::Policy {
                allow,
                revoke,
                graph,
                json,
            } => Box::pin(async move { blob_policy(&graph, allow, revoke, json).await }),
        },
        Cmd::Schema { cmd } => Box::pin(schema(cmd)),
        Cmd::Optimize(a) => Box::pin(optimize(a)),
        Cmd::Gc(a) => Box::pin(gc(a)),
        Cmd::Cleanup(a) => Box::pin(cleanup(a)),
        Cmd::StressWriter(a) => Box::pin(stress_writer(a)),
        Cmd::Serve(a) => Box::pin(serve(a)),
        Cmd::Demo { dir } => Box::pin(demo::run(dir)),
        Cmd::Policy { cmd } => Box::pin(async move { policy(cmd) }),
    };
    fut.await
}

fn read_schema(path: &std::path::Path) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| OmniError::BadRequest(format!("cannot read schema {}: {e}", path.display())))
}

fn print_steps(steps: &[omnigraph::PlannedStep]) {
    for s in steps {
        let what = match &s.step.property {
            Some(p) => format!("{}.{p}", s.step.type_name),
            None => s.step.type_name.clone(),
        };
        let cost = match (s.step.work, s.rows) {
            (omnigraph::StepWork::Metadata, _) => "metadata only".to_string(),
            (omnigraph::StepWork::Create, _) => "creates an empty table".to_string(),
            (omnigraph::StepWork::Scan, n) => format!("scans {} rows", n.unwrap_or(0)),
            (omnigraph::StepWork::Rewrite, n) => {
                format!("writes the column for {} rows", n.unwrap_or(0))
            }
        };
        let kind = serde_json::to_value(s.step.kind).expect("serialisable");
        println!(
            "  {:<18} {what}: {} ({cost})",
            kind.as_str().unwrap_or_default(),
            s.step.detail
        );
    }
}

async fn schema(cmd: SchemaCmd) -> Result<()> {
    match cmd {
        SchemaCmd::Show {
            graph,
            version,
            json,
        } => {
            let g = access::open_read_only(graph.uri()?).await?;
            let target = version.map(|v| Target::Version {
                version: v,
                branch: "main".into(),
            });
            let source = g.schema_source(target.as_ref()).await?;
            if json {
                print_json(&serde_json::json!({ "version": version, "source": source }));
            } else {
                print!("{source}");
            }
            Ok(())
        }
        SchemaCmd::Plan {
            schema,
            graph,
            json,
        } => {
            let src = read_schema(&schema)?;
            let g = access::open_read_only(graph.uri()?).await?;
            let plan = g.plan_schema(&src).await?;
            if json {
                print_json(&plan);
            } else if !plan.changes {
                println!("no change: the graph already has this schema");
            } else {
                println!(
                    "{} steps, {} table commits:",
                    plan.steps.len(),
                    plan.table_commits
                );
                print_steps(&plan.steps);
            }
            Ok(())
        }
        SchemaCmd::Apply {
            schema,
            graph,
            json,
        } => {
            let src = read_schema(&schema)?;
            let g = access::open(graph.uri()?).await?;
            let r = g.apply_schema(&src).await;
            g.close().await;
            let r = r?;
            if json {
                print_json(&r);
            } else if !r.changed {
                println!("no change: the graph already has this schema");
            } else {
                println!(
                    "applied schema {} in {} steps (commit {}, graph version {})",
                    r.schema,
                    r.steps.len(),
                    r.commit.as_deref().unwrap_or("-"),
                    r.manifest_version
                );
                print_steps(&r.steps);
            }
            Ok(())
        }
    }
}

async fn init(a: Init) -> Result<()> {
    let src = std::fs::read_to_string(&a.schema).map_err(|e| {
        OmniError::BadRequest(format!("cannot read schema {}: {e}", a.schema.display()))
    })?;
    let g = access::init(a.graph.uri()?, &src).await?;
    let snap = g.snapshot(&Target::main()).await;
    let uri = g.uri().to_string();
    g.close().await;
    let snap = snap?;
    if a.json {
        print_json(&snap);
    } else {
        println!(
            "initialised {} with {} types (commit {})",
            uri,
            snap.types.len(),
            snap.head_commit
        );
    }
    Ok(())
}

async fn load(a: Load) -> Result<()> {
    let g = access::open(a.graph.uri()?).await?;
    let file = std::fs::File::open(&a.data)
        .map_err(|e| OmniError::BadRequest(format!("cannot read {}: {e}", a.data.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let progress = std::sync::Arc::new(Progress::new(total));
    let p = progress.clone();
    let reader = std::io::BufReader::with_capacity(1 << 20, file);
    let result = g
        .load_from(&a.branch, a.from.as_deref(), reader, a.mode, move |b| {
            p.update(b)
        })
        .await;
    progress.bar.finish_and_clear();
    g.close().await;
    let report = result?;
    if a.json {
        print_json(&report);
    } else {
        table::print_load(&report);
    }
    Ok(())
}

async fn branch_create(name: &str, from: &str, graph: &Graph, json: bool) -> Result<()> {
    let g = access::open(graph.uri()?).await?;
    let b = g.branch_create(name, from).await;
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
    Ok(())
}

async fn branch_list(graph: &Graph, json: bool) -> Result<()> {
    let g = access::open_read_only(graph.uri()?).await?;
    let list = g.branch_list().await?;
    if json {
        print_json(&list);
    } else {
        table::print_branches(&list);
    }
    Ok(())
}

async fn branch_delete(name: &str, graph: &Graph, json: bool) -> Result<()> {
    let g = access::open(graph.uri()?).await?;
    let r = g.branch_delete(name).await;
    g.close().await;
    r?;
    if json {
        print_json(&serde_json::json!({ "deleted": name }));
    } else {
        println!("deleted branch {name}");
    }
    Ok(())
}

async fn branch_merge(a: Merge) -> Result<()> {
    let g = access::open(a.graph.uri()?).await?;
    let started = std::time::Instant::now();
    let merged = g.merge(&a.source, &a.into).await;
    let deleted = match (&merged, a.delete_branch) {
        (Ok(_), true) => Some(g.branch_delete(&a.source).await),
        _ => None,
    };
    g.close().await;
    let outcome = match merged {
        Ok(o) => o,
        Err(OmniError::MergeConflicts(c)) => {
            if a.json {
                print_json(&serde_json::json!({ "outcome": "conflicts", "conflicts": c }));
            } else {
                table::print_conflicts(&c);
            }
            return Err(OmniError::MergeConflicts(c));
        }
        Err(e) => return Err(e),
    };
    let delete_error = match &deleted {
        Some(Err(e)) => Some(format!("error[{}]: {e}", e.kind())),
        _ => None,
    };
    if a.json {
        let mut v = serde_json::to_value(&outcome)?;
        if let Some(d) = &deleted {
            v["branch_deleted"] = serde_json::json!(d.is_ok());
            if let Some(e) = &delete_error {
                v["delete_error"] = serde_json::json!(e);
            }
        }
        print_json(&v);
    } else {
        println!(
            "{} {} into {}: {} ({:.2} s)",
            outcome.name(),
            a.source,
            a.into,
            outcome.commit(),
            started.elapsed().as_secs_f64()
        );
        match &deleted {
            Some(Ok(())) => println!("deleted branch {}", a.source),
            Some(Err(_)) => {}
            None => {}
        }
    }
    if let Some(e) = delete_error {
        // The merge stands; the branch stays.
        eprintln!(
            "the merge succeeded but deleting branch {} failed: {e}",
            a.source
        );
    }
    Ok(())
}

async fn optimize(a: Optimize) -> Result<()> {
    let g = access::open(a.graph.uri()?).await?;
    let started = std::time::Instant::now();
    let r = g.optimize(&a.branch).await;
    g.close().await;
    let r = r?;
    if a.json {
        print_json(&r);
    } else {
        table::print_optimize(&r);
        println!("({:.1} s)", started.elapsed().as_secs_f64());
    }
    Ok(())
}

async fn gc(a: Gc) -> Result<()> {
    let g = access::open(a.graph.uri()?).await?;
    let r = g.gc(a.dry_run).await;
    g.close().await;
    let r = r?;
    if a.json {
        print_json(&r);
    } else {
        table::print_gc(&r);
    }
    Ok(())
}

async fn cleanup(a: Cleanup) -> Result<()> {
    let policy = omnigraph::RetentionPolicy {
        older_than: omnigraph::parse_duration(&a.older_than)?,
        keep_versions: a.keep_versions,
        dry_run: a.dry_run,
    };
    let g = access::open(a.graph.uri()?).await?;
    let r = g.cleanup(policy).await;
    g.close().await;
    let r = r?;
    if a.json {
        print_json(&r);
    } else {
        table::print_cleanup(&r, a.dry_run);
    }
    Ok(())
}

async fn snapshot(a: Snapshot) -> Result<()> {
    let g = access::open_read_only(a.graph.uri()?).await?;
    let snap = g.snapshot(&a.at.target()?).await?;
    if a.json {
        print_json(&snap);
    } else {
        table::print_snapshot(&snap);
    }
    Ok(())
}

async fn query(a: Query) -> Result<()> {
    let (uri, source, name, params) = query_inputs(a.input)?;
    let g = access::open_read_only(&uri).await?;
    // The process reads the graph as its open found it (one look at the head).
    let at = g.as_opened(&target(a.branch, a.snapshot, a.version)?);
    let json = !matches!(a.format, omnigraph::results::Format::Table);
    if a.explain {
        let steps = g.explain(&at, &source, &name, &params).await?;
        match json {
            true => print_json(&steps),
            false => print!("{}", omnigraph::results::explain(&steps)),
        }
        return Ok(());
    }
    let (result, steps) = match a.profile {
        true => {
            let (r, s) = g.query_profiled(&at, &source, &name, &params).await?;
            (r, Some(s))
        }
        false => (g.query(&at, &source, &name, &params).await?, None),
    };
    match a.format {
        omnigraph::results::Format::Table => table::print_result(&result)?,
        f => {
            let mut out = std::io::BufWriter::new(std::io::stdout());
            omnigraph::results::write(&result, f, &mut out)?;
            out.flush()?;
        }
    }
    if let Some(steps) = steps {
        match json {
            true => eprintln!("{}", serde_json::to_string(&steps)?),
            false => eprint!("{}", omnigraph::results::explain(&steps)),
        }
    }
    if a.stats {
        eprintln!("{}", g.cache_stats());
        eprintln!("object store: {}", g.requests());
        for step in &result.search {
            let sides = step
                .sides
                .map(|[a, b]| format!(" (the sides contributed {a} and {b})"))
                .unwrap_or_default();
            eprintln!(
                "search: {}({}) {}: {} rows in, {} out{sides}",
                step.function, step.property, step.method, step.rows_in, step.rows_out
            );
        }
    }
    Ok(())
}

async fn mutate(a: Mutate) -> Result<()> {
    let (uri, source, name, params) = query_inputs(a.input)?;
    let g = access::open(&uri).await?;
    let r = g
        .mutate_if(&a.branch, &source, &name, &params, a.if_commit.as_deref())
        .await;
    g.close().await;
    let r = r?;
    if a.json {
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
        table::table(&["type", "kind", "rows affected"], &rows);
    }
    Ok(())
}

async fn commit_list(graph: &Graph, branch: &str, limit: Option<usize>, json: bool) -> Result<()> {
    let g = access::open_read_only(graph.uri()?).await?;
    let commits = g.commits(branch, limit).await?;
    if json {
        print_json(&commits);
    } else {
        table::print_commits(&commits);
    }
    Ok(())
}

async fn commit_show(id: &str, graph: &Graph, json: bool) -> Result<()> {
    let g = access::open_read_only(graph.uri()?).await?;
    let c = g.commit(id).await?;
    if json {
        print_json(&c);
    } else {
        table::print_commit(&c);
    }
    Ok(())
}

async fn commit_changes(
    id: &str,
    graph: &Graph,
    type_name: Option<String>,
    json: bool,
) -> Result<()> {
    let g = access::open_read_only(graph.uri()?).await?;
    let changes = g.commit_changes(id, type_name.as_deref()).await?;
    if json {
        print_json(&changes);
    } else {
        table::print_changes(&changes);
    }
    Ok(())
}

/// How long a following poll waits before asking again, once caught up.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(10);

async fn changes_poll(a: Poll) -> Result<()> {
    let g = access::open_read_only(a.graph.uri()?).await?;
    let req = omnigraph::ChangeRequest {
        branch: a.branch,
        cursor: a.cursor,
        start: a.start.as_deref().unwrap_or("now").parse()?,
        types: a.filter.types,
        kind: a.filter.kind,
        ops: a.filter.ops,
        limit: a.limit,
    };
    if !a.follow {
        let page = g.changes(&req).await?;
        match a.json {
            true => print_json(&page),
            false => table::print_feed(&page),
        }
        return Ok(());
    }
    let blocks = g.watch(req, FOLLOW_POLL).await?;
    let mut blocks = std::pin::pin!(blocks);
    while let Some(b) = futures::StreamExt::next(&mut blocks).await {
        let b = b?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", serde_json::to_string(&b)?)?;
        writeln!(out, "{}", serde_json::json!({ "cursor": b.cursor }))?;
        out.flush()?;
    }
    Ok(())
}

async fn changes_baseline(a: BaselineArgs) -> Result<()> {
    let g = access::open_read_only(a.graph.uri()?).await?;
    let req = omnigraph::ChangeRequest {
        branch: a.branch,
        types: a.filter.types,
        kind: a.filter.kind,
        ops: a.filter.ops,
        ..Default::default()
    };
    let mut partial = a.out.clone().into_os_string();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let written = async {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&partial)?);
        let b = g.changes_baseline(&req, &mut file).await?;
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        Ok::<_, OmniError>(b)
    }
    .await;
    let b = match written {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &a.out)?;
    match a.json {
        true => print_json(&b),
        false => println!(
            "snapshot {} ({} lines in {})\ncursor {}",
            b.snapshot_commit_id,
            b.lines,
            a.out.display(),
            b.cursor
        ),
    }
    Ok(())
}

async fn export(a: Export) -> Result<()> {
    let g = access::open_read_only(a.graph.uri()?).await?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout());
    g.export(&a.at.target()?, &mut out).await?;
    out.flush()?;
    Ok(())
}

async fn blob_policy(
    graph: &Graph,
    allow: Vec<String>,
    revoke: Vec<String>,
    json: bool,
) -> Result<()> {
    let policy = if allow.is_empty() && revoke.is_empty() {
        access::open_read_only(graph.uri()?)
            .await?
            .external_blob_policy()
            .await?
    } else {
        // Every base is checked first: a bad one changes nothing.
        for base in &allow {
            omnigraph::BlobPolicy::default()
                .with_allowed(base)
                .map_err(OmniError::BadRequest)?;
        }
        for base in &revoke {
            omnigraph::parse_blob_base(base).map_err(OmniError::BadRequest)?;
        }
        let g = access::open(graph.uri()?).await?;
        let mut changed = Ok(omnigraph::BlobPolicy::default());
        for base in &allow {
            changed = g.allow_external_blobs(base).await;
            if changed.is_err() {
                break;
            }
        }
        if changed.is_ok() {
            for base in &revoke {
                changed = g.revoke_external_blobs(base).await;
                if changed.is_err() {
                    break;
                }
            }
        }
        g.close().await;
        changed?
    };
    if json {
        print_json(&policy);
    } else if policy.allow.is_empty() {
        println!("no external blob references are allowed");
    } else {
        for base in &policy.allow {
            println!("allowed  {base}");
        }
    }
    Ok(())
}

/// Open the graph read-only and read the cell the arguments name.
async fn read_blob(a: BlobCellArgs) -> Result<omnigraph::Blob> {
    let g = access::open_read_only(&a.store).await?;
    let at = target(a.branch, a.snapshot, a.version)?;
    g.read_blob_at(&at, &BlobCell::new(&a.type_name, &a.id, &a.property))
        .await
}

async fn blob_stat(a: BlobCellArgs, json: bool) -> Result<()> {
    let v = read_blob(a).await?.stat();
    if json {
        print_json(&v);
    } else {
        table::print_blob_stat(&v);
    }
    Ok(())
}

/// The bytes `offset..offset+length` (clamped to the end), in bounded
/// reads; to `out` through a temporary file renamed at the end, so a
/// failed read leaves no partial file.
async fn blob_get(
    a: BlobCellArgs,
    offset: u64,
    length: Option<u64>,
    out: Option<std::path::PathBuf>,
) -> Result<()> {
    let reader = read_blob(a).await?.into_reader();
    let range = omnigraph::blob_range::clamp(offset, length, reader.len())?;
    let (mut sink, partial): (Box<dyn Write>, _) = match &out {
        None => (Box::new(std::io::stdout().lock()), None),
        Some(path) => {
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".partial");
            let tmp = std::path::PathBuf::from(tmp);
            let f = std::fs::File::create(&tmp).map_err(|e| {
                OmniError::BadRequest(format!("cannot write {}: {e}", tmp.display()))
            })?;
            (Box::new(f), Some((tmp, path.clone())))
        }
    };
    let written = async {
        for step in omnigraph::blob_range::steps(range) {
            sink.write_all(&reader.read_range(step).await?)?;
        }
        sink.flush()?;
        Ok::<_, OmniError>(())
    }
    .await;
    // A reader that stopped reading (`| head -c N`) is not a failure.
    let written = match written {
        Err(OmniError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe && out.is_none() => {
            Ok(())
        }
        other => other,
    };
    drop(sink);
    match (written, partial) {
        (Ok(()), Some((tmp, path))) => std::fs::rename(&tmp, &path)
            .map_err(|e| OmniError::BadRequest(format!("cannot write {}: {e}", path.display()))),
        (Ok(()), None) => Ok(()),
        (Err(e), partial) => {
            if let Some((tmp, _)) = partial {
                let _ = std::fs::remove_file(tmp);
            }
            Err(e)
        }
    }
}

async fn stress_writer(a: StressWriter) -> Result<()> {
    let g = access::open(a.graph.uri()?).await?;
    let mut out = std::io::stdout();
    // Its sidecars carry this owner: a harness that kills it can tell
    // which in-flight write was its.
    let owner = g.owner().expect("a read-write handle");
    if a.dwell_ms > 0 {
        #[cfg(feature = "fault-injection")]
        g.substrate()
            .dwell_inside_commit(std::time::Duration::from_millis(a.dwell_ms));
        #[cfg(not(feature = "fault-injection"))]
        return Err(OmniError::BadRequest(
            "--dwell-ms needs a build with fault injection".into(),
        ));
    }
    writeln!(out, "OWNER {owner}")?;
    let end = a.count.map_or(u64::MAX, |c| a.start.saturating_add(c));
    for n in a.start..end {
        writeln!(out, "BEGIN {n}")?;
        out.flush()?;
        // One write touches two node rows and an edge between them: a
        // partial commit would show as a node without its partner.
        let jsonl = format!(
            "{{\"type\":\"Person\",\"data\":{{\"name\":\"p{n}\"}}}}\n{{\"type\":\"Person\",\"data\":{{\"name\":\"q{n}\"}}}}\n{{\"edge\":\"Knows\",\"from\":\"p{n}\",\"to\":\"q{n}\"}}"
        );
        g.load("main", &jsonl, LoadMode::Append).await?;
        writeln!(out, "ACK {n}")?;
        out.flush()?;
    }
    Ok(())
}

/// The tokens `--tokens FILE` or `OMNIGRAPH_TOKENS` holds; none (with
/// `--unauthenticated`), or a refusal to start without them.
fn serve_tokens(a: &Serve) -> Result<Option<omnigraph::server::auth::Tokens>> {
    use omnigraph::server::auth::Tokens;
    if a.unauthenticated {
        return Ok(None);
    }
    if let Some(path) = &a.tokens {
        let text = std::fs::read_to_string(path).map_err(|e| {
            OmniError::BadRequest(format!(
                "cannot read the tokens file {}: {e}",
                path.display()
            ))
        })?;
        return Tokens::parse(&text, &path.display().to_string()).map(Some);
    }
    match std::env::var("OMNIGRAPH_TOKENS") {
        Ok(text) if !text.trim().is_empty() => Tokens::parse(&text, "OMNIGRAPH_TOKENS").map(Some),
        _ => Err(OmniError::BadRequest(
            "no tokens: give --tokens FILE or OMNIGRAPH_TOKENS (JSON {\"actor\": \"token\"}), or --unauthenticated to serve without them".into(),
        )),
    }
}

async fn serve(a: Serve) -> Result<()> {
    let tokens = serve_tokens(&a)?;
    let graphs = a.graph_list()?;
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| OmniError::BadRequest(format!("cannot listen on {}: {e}", a.listen)))?;
    let state = omnigraph::server::ServerState::open(omnigraph::server::Config {
        graphs,
        tokens,
        policy: access::policy(),
        max_body_bytes: a.max_body_bytes,
    })
    .await?;
    if let Some(path) = access::policy_path() {
        reload_on_hangup(state.clone(), path)?;
    }
    let addr = listener.local_addr()?;
    println!("OMNIGRAPH_LISTEN_ADDR={addr}");
    std::io::stdout().flush()?;
    omnigraph::server::serve(listener, state, stop_signal()?).await
}

/// On each SIGHUP (heard on a thread of its own), put the policy file in
/// force again; one that does not load leaves the old one, logged.
fn reload_on_hangup(state: omnigraph::server::Shared, path: std::path::PathBuf) -> Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])?;
    std::thread::spawn(move || {
        for _ in signals.forever() {
            match state.reload_policy(&path) {
                Ok(()) => tracing::warn!(policy = %path.display(), "policy reloaded"),
                Err(e) => {
                    tracing::error!(policy = %path.display(), "policy not reloaded, the old one stays: {e}")
                }
            }
        }
    });
    Ok(())
}

/// Resolves at the first SIGTERM or SIGINT (heard on a thread of its own).
fn stop_signal() -> Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            tracing::info!(signal = sig, "stop requested");
            let _ = tx.send(());
        }
    });
    Ok(async move {
        let _ = rx.await;
    })
}

fn policy(cmd: PolicyCmd) -> Result<()> {
    use omnigraph::policy::{Action, Call, Policy, file};
    match cmd {
        PolicyCmd::Validate { file, cedar, json } => {
            let p = Policy::load(&file)?;
            match (json, cedar) {
                (true, _) => print_json(&serde_json::json!({
                    "valid": true,
                    "rules": p.rules(),
                    "cedar": p.cedar(),
                })),
                (false, true) => print!("{}", p.cedar()),
                (false, false) => println!("{}: valid, {} rules", file.display(), p.rules()),
            }
        }
        PolicyCmd::Test { file, cases, json } => {
            let p = Policy::load(&file)?;
            let text = std::fs::read_to_string(&cases).map_err(|e| {
                OmniError::BadRequest(format!("cannot read the cases {}: {e}", cases.display()))
            })?;
            let results = file::run_cases(&p, &text, &cases.display().to_string())?;
            let failed = results.iter().filter(|r| !r.passed).count();
            if json {
                print_json(&serde_json::json!({
                    "passed": results.len() - failed,
                    "failed": failed,
                    "cases": results,
                }));
            } else {
                for r in &results {
                    let got = if r.decision.allowed { "allow" } else { "deny" };
                    let mark = if r.passed { "ok  " } else { "FAIL" };
                    println!("{mark} {}: {got} ({})", r.id, r.decision.reason());
                }
                println!("{} passed, {failed} failed", results.len() - failed);
            }
            if failed > 0 {
                std::io::stdout().flush()?;
                std::process::exit(1);
            }
        }
        PolicyCmd::Explain {
            file,
            actor,
            action,
            branch,
            target_branch,
            json,
        } => {
            let p = Policy::load(&file)?;
            let action: Action = action.parse()?;
            let d = p.decide(&Call {
                actor: Some(&actor),
                action,
                branch: branch.as_deref(),
                target_branch: target_branch.as_deref(),
            });
            let decision = if d.allowed { "allow" } else { "deny" };
            if json {
                print_json(&serde_json::json!({
                    "decision": decision,
                    "rules": d.rules,
                    "reason": d.reason(),
                }));
            } else {
                println!("{decision}: {}", d.reason());
            }
        }
    }
    Ok(())
}
