//! `omnigraph demo`: a guided run on a small embedded graph, showing what a
//! user does on day one. Everything it does is also a CLI command.

use std::path::PathBuf;

use omnigraph::{LoadMode, OmniError, Omnigraph, Target};

use super::table;

pub const SCHEMA: &str = r#"// A small social and work graph.
node Person {
    name: String @key
    age: I32?
    email: String? @unique
    status: enum(active, retired)
    @range(age, 0..150)
}

node Company { name: String @key }

edge Knows: Person -> Person { since: Date? }
edge WorksAt: Person -> Company @card(0..1) { role: String? }
"#;

pub const DATA: &str = r#"{"type": "Person", "data": {"name": "Alice", "age": 34, "email": "alice@example.com", "status": "active"}}
{"type": "Person", "data": {"name": "Bob", "age": 41, "status": "active"}}
{"type": "Person", "data": {"name": "Carol", "age": 67, "status": "retired"}}
{"type": "Company", "data": {"name": "Acme"}}
{"edge": "Knows", "from": "Alice", "to": "Bob", "data": {"since": "2019-04-01"}}
{"edge": "Knows", "from": "Bob", "to": "Carol"}
{"edge": "WorksAt", "from": "Alice", "to": "Acme", "data": {"role": "engineer"}}
"#;

pub const QUERIES: &str = r#"
query friends_of($name: String) {
    match { $p: Person { name: $name }
            $p knows{1,2} $f }
    return { $f.name, $f.age as age }
    order { age desc }
}
query by_status() {
    match { $p: Person }
    return { $p.status, count($p) as people, avg($p.age) as avg_age }
    order { people desc }
}
query onboard($name: String, $org: String) {
    insert Person { name: $name, age: 30, status: "active" }
    insert Company { name: $org }
    insert WorksAt { from: $name, to: $org, role: "new hire" }
}
"#;

const FEATURE: &str = r#"{"type": "Person", "data": {"name": "Dan", "age": 29, "status": "active"}}
{"edge": "Knows", "from": "Dan", "to": "Alice"}
"#;

fn step(title: &str) {
    println!("\n== {title}");
}

// A script: the demo's steps in the order a user sees them.
pub async fn run(dir: Option<PathBuf>) -> Result<(), OmniError> {
    let base = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!(
            "omnigraph-demo-{}",
            omnigraph::util::ulid::new_ulid()
        )),
    };
    std::fs::create_dir_all(&base)?;
    let uri = base.join("graph.omni");
    let uri = uri.to_string_lossy().to_string();

    step(&format!("init {uri}"));
    println!("{SCHEMA}");
    let g = Omnigraph::init(&uri, SCHEMA).await?;

    step("load (overwrite) 4 nodes and 3 edges into main");
    let r = g.load("main", DATA, LoadMode::Overwrite).await?;
    table::print_load(&r);

    step("merge: Bob's age changes (upsert by key)");
    let r = g
        .load(
            "main",
            r#"{"type": "Person", "data": {"name": "Bob", "age": 42, "status": "active"}}"#,
            LoadMode::Merge,
        )
        .await?;
    table::print_load(&r);

    step("bad input is refused with a typed error, and nothing changes");
    let bad = r#"{"type": "Person", "data": {"name": "Eve", "age": 200, "status": "active"}}"#;
    match g.load("main", bad, LoadMode::Append).await {
        Err(e) => println!("error[{}]: {e}", e.kind()),
        Ok(_) => println!("unexpectedly accepted"),
    }

    step("query: who Alice reaches in one or two hops");
    println!("{}", QUERIES.trim());
    table::print_result(
        &g.query(
            &Target::main(),
            QUERIES,
            "friends_of",
            &serde_json::json!({"name": "Alice"}),
        )
        .await?,
    )?;

    step("query: people per status (an aggregate)");
    table::print_result(
        &g.query(
            &Target::main(),
            QUERIES,
            "by_status",
            &serde_json::Value::Null,
        )
        .await?,
    )?;

    step("mutation: onboard Mina at Initech (three inserts, one commit)");
    let m = g
        .mutate(
            "main",
            QUERIES,
            "onboard",
            &serde_json::json!({"name": "Mina", "org": "Initech"}),
        )
        .await?;
    println!(
        "commit {} at graph version {}: nodes {:?}, edges {:?}",
        m.commit, m.manifest_version, m.nodes, m.edges
    );

    step(
        "optimize: build the indexes (a BTREE on every table's id, an id order per node type, a graph index per edge type), one commit",
    );
    table::print_optimize(&g.optimize("main").await?);

    step("branch feature/dan from main, and append on it");
    g.branch_create("feature/dan", "main").await?;
    let r = g.load("feature/dan", FEATURE, LoadMode::Append).await?;
    table::print_load(&r);

    step("the branch sees Dan; main does not");
    table::print_snapshot(&g.snapshot(&Target::Branch("feature/dan".into())).await?);
    println!();
    table::print_snapshot(&g.snapshot(&Target::main()).await?);

    step("main moves too (Bob's age), then feature/dan merges into main");
    g.load(
        "main",
        r#"{"type": "Person", "data": {"name": "Bob", "age": 43, "status": "active"}}"#,
        LoadMode::Merge,
    )
    .await?;
    let merged = g.merge("feature/dan", "main").await?;
    println!("{}: commit {}", merged.name(), merged.commit());
    table::print_commit(&g.commit(merged.commit()).await?);
    println!();
    table::print_changes(&g.commit_changes(merged.commit(), None).await?);

    step("branches");
    table::print_branches(&g.branch_list().await?);

    step("history of main");
    let commits = g.commits("main", None).await?;
    table::print_commits(&commits);

    step("time travel: main as its first load left it");
    let first_load = &commits[commits.len() - 2];
    table::print_snapshot(&g.snapshot(&Target::Commit(first_load.id.clone())).await?);

    step("export main as JSONL");
    let mut out = Vec::new();
    g.export(&Target::main(), &mut out).await?;
    print!("{}", String::from_utf8_lossy(&out));

    step("gc: index files no version records (every optimize here committed, so none)");
    table::print_gc(&g.gc(false).await?);

    println!("\nThe demo graph is at {uri}; try `omnigraph snapshot {uri}`.");
    Ok(())
}
