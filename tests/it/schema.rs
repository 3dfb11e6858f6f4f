//! Schema evolution end to end: plans that change nothing, applies that
//! reach every branch (shared tables included) in one commit, reads of
//! the past under the past's schema, refusals that leave every file as it
//! was, a concurrent apply, and crashes at every step of an apply.

use omnigraph::storage::substrate::CrashPoint;
use omnigraph::{LoadMode, OmniError, Omnigraph, OpenOptions, SchemaStepKind, StepWork, Target};
use serde_json::{Value, json};

use crate::common::*;

async fn rows(g: &Omnigraph, at: &Target, q: &str) -> omnigraph::Result<Vec<Value>> {
    let r = g.query(at, q, "q", &Value::Null).await?;
    Ok(omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(Value::Object)
        .collect())
}

/// The reference schema with a rename of a property and of a type, two
/// new properties (one filled), a dropped property and a new edge type.
fn evolved() -> String {
    let s = SCHEMA
        .replace(
            "    age: I32?\n",
            "    years: I32? @rename_from(\"age\")\n    nick: String?\n    level: I64 @default(3)\n",
        )
        .replace("    tags: [String]?\n", "")
        .replace("@range(age, 0..150)", "@range(years, 0..150)")
        .replace("node Company {", "node Firm @rename_from(\"Company\") {")
        .replace("Person -> Company", "Person -> Firm");
    format!("{s}edge Mentors: Person -> Person\n")
}

const PEOPLE_NOW: &str = "query q() { match { $p: Person } return { $p.name, $p.years, $p.nick, $p.level } order { $p.name } }";
const PEOPLE_THEN: &str =
    "query q() { match { $p: Person } return { $p.name, $p.age, $p.tags } order { $p.name } }";

#[tokio::test]
async fn an_apply_reaches_every_branch_in_one_commit_and_the_past_keeps_its_schema() {
    let t = loaded_graph().await;
    t.g.branch_create("dev", "main").await.unwrap();
    let before = t.g.snapshot(&Target::main()).await.unwrap();
    let then = Target::Version {
        version: before.manifest_version,
        branch: "main".into(),
    };
    let old_source = t.g.schema_source(None).await.unwrap();
    let old_catalog = t.g.catalog().await.unwrap();

    // A plan reports each step and what it costs, and writes nothing.
    let untouched = Untouched::of(&t).await;
    let plan = t.g.plan_schema(&evolved()).await.unwrap();
    untouched.check(&t, &"a plan").await;
    type Seen<'a> = (
        SchemaStepKind,
        &'a str,
        Option<&'a str>,
        StepWork,
        Option<u64>,
    );
    let kinds: Vec<Seen> = plan
        .steps
        .iter()
        .map(|s| {
            (
                s.step.kind,
                s.step.type_name.as_str(),
                s.step.property.as_deref(),
                s.step.work,
                s.rows,
            )
        })
        .collect();
    use SchemaStepKind as K;
    for want in [
        (
            K::RenameProperty,
            "Person",
            Some("years"),
            StepWork::Metadata,
            None,
        ),
        (
            K::AddProperty,
            "Person",
            Some("nick"),
            StepWork::Metadata,
            None,
        ),
        // Three people, counted once although main and dev share the table.
        (
            K::AddProperty,
            "Person",
            Some("level"),
            StepWork::Rewrite,
            Some(3),
        ),
        (
            K::DropProperty,
            "Person",
            Some("tags"),
            StepWork::Metadata,
            None,
        ),
        (K::RenameType, "Firm", None, StepWork::Metadata, None),
        (K::AddType, "Mentors", None, StepWork::Create, None),
    ] {
        assert!(kinds.contains(&want), "{want:?} not in {kinds:?}");
    }
    assert_eq!(plan.table_commits, 2, "Person, on main and on dev");

    let applied = t.g.apply_schema(&evolved()).await.unwrap();
    assert!(applied.changed);
    let commit = applied.commit.clone().unwrap();
    assert_eq!(t.g.commits("main", Some(1)).await.unwrap()[0].id, commit);
    assert_eq!(
        t.g.commits("main", Some(1)).await.unwrap()[0].kind,
        "schema_apply"
    );

    // Every branch reads the new schema, the shared table included.
    let want = json!([
        {"p.name": "Alice", "p.years": 34, "p.nick": null, "p.level": 3},
        {"p.name": "Bob", "p.years": 41, "p.nick": null, "p.level": 3},
        {"p.name": "Carol", "p.years": null, "p.nick": null, "p.level": 3},
    ]);
    for b in ["main", "dev"] {
        let at = Target::Branch(b.into());
        assert_eq!(
            Value::Array(rows(&t.g, &at, PEOPLE_NOW).await.unwrap()),
            want,
            "{b}"
        );
        let firms = rows(
            &t.g,
            &at,
            "query q() { match { $c: Firm\n $p worksAt $c } return { $p.name, $c.name } }",
        )
        .await
        .unwrap();
        assert_eq!(
            firms,
            vec![json!({"p.name": "Alice", "c.name": "Acme"})],
            "{b}"
        );
        // The old names are gone from the head.
        match rows(&t.g, &at, PEOPLE_THEN).await {
            Err(OmniError::Type { code, message, .. }) => {
                assert_eq!(code, "Q002");
                assert!(message.contains("age"), "{message}");
            }
            other => panic!("expected a type error, got {other:?}"),
        }
    }

    // The past type-checks against, and reads with, the past's schema.
    let past = rows(&t.g, &then, PEOPLE_THEN).await.unwrap();
    assert_eq!(
        past[0],
        json!({"p.name": "Alice", "p.age": 34, "p.tags": ["a", "b"]})
    );
    assert!(matches!(
        rows(&t.g, &then, PEOPLE_NOW).await,
        Err(OmniError::Type { .. })
    ));
    let by_commit = Target::Commit(before.head_commit.clone());
    assert_eq!(rows(&t.g, &by_commit, PEOPLE_THEN).await.unwrap(), past);
    assert_eq!(t.g.schema_source(Some(&then)).await.unwrap(), old_source);
    assert!(t.g.schema_source(None).await.unwrap().contains("node Firm"));
    let mut old_export = Vec::new();
    t.g.export(&then, &mut old_export).await.unwrap();
    let old_export = String::from_utf8(old_export).unwrap();
    assert!(old_export.contains("\"age\":34") && old_export.contains("\"type\":\"Company\""));
    let mut new_export = Vec::new();
    t.g.export(&Target::main(), &mut new_export).await.unwrap();
    let new_export = String::from_utf8(new_export).unwrap();
    assert!(new_export.contains("\"years\":34") && new_export.contains("\"type\":\"Firm\""));
    assert!(!new_export.contains("\"tags\""));
    let snap_then = t.g.snapshot(&then).await.unwrap();
    assert!(snap_then.types.iter().any(|x| x.name == "Company"));
    let snap_now = t.g.snapshot(&Target::main()).await.unwrap();
    let names: Vec<&str> = snap_now.types.iter().map(|x| x.name.as_str()).collect();
    assert!(names.contains(&"Firm") && names.contains(&"Mentors") && !names.contains(&"Company"));

    // Identity is stable through the renames.
    let new_catalog = t.g.catalog().await.unwrap();
    let (p0, p1) = (
        old_catalog.node("Person").unwrap(),
        new_catalog.node("Person").unwrap(),
    );
    assert_eq!(p0.id, p1.id);
    assert_eq!(
        p0.property("age").unwrap().id,
        p1.property("years").unwrap().id
    );
    assert_eq!(
        old_catalog.node("Company").unwrap().id,
        new_catalog.node("Firm").unwrap().id
    );
    let fresh = p1.property("level").unwrap().id;
    assert!(p0.properties.iter().all(|p| p.id < fresh));

    // Both branches take writes under the new schema, each on its own.
    let m = "query add($n: String) { insert Person { name: $n, years: 5, level: 9 } }";
    t.g.mutate("main", m, "add", &json!({"n": "Dan"}))
        .await
        .unwrap();
    let e = "query e() { insert Mentors { from: \"Alice\", to: \"Dan\" } }";
    t.g.mutate("main", e, "e", &Value::Null).await.unwrap();
    let u = "query u() { update Person set { level: 4, nick: \"al\" } where name = \"Alice\" }";
    t.g.mutate("dev", u, "u", &Value::Null).await.unwrap();
    assert_eq!(count(&t.g, "main", "Person").await, 4);
    assert_eq!(count(&t.g, "dev", "Person").await, 3);
    assert_eq!(count(&t.g, "main", "Mentors").await, 1);
    let alice = |b: &str| {
        let at = Target::Branch(b.into());
        let g = &t.g;
        async move { rows(g, &at, PEOPLE_NOW).await.unwrap()[0].clone() }
    };
    assert_eq!(alice("dev").await["p.level"], 4);
    assert_eq!(alice("main").await["p.level"], 3);
    // A required property is required of new rows: its default filled the old ones only.
    match t
        .g
        .mutate(
            "main",
            "query a() { insert Person { name: \"Eve\" } }",
            "a",
            &Value::Null,
        )
        .await
    {
        Err(OmniError::Invalid { at, message }) => {
            assert_eq!(at.property.as_deref(), Some("level"));
            assert!(message.contains("required"), "{message}");
        }
        other => panic!("expected a missing required property, got {other:?}"),
    }
    // The same schema again is no change.
    let again = t.g.apply_schema(&evolved()).await.unwrap();
    assert!(!again.changed && again.commit.is_none());
}

#[tokio::test]
async fn a_dropped_then_added_property_is_a_new_property() {
    let t = loaded_graph().await;
    let without = SCHEMA
        .replace("    age: I32?\n", "")
        .replace("    @range(age, 0..150)\n", "");
    t.g.apply_schema(&without).await.unwrap();
    let with = SCHEMA.replace("@range(age, 0..150)", "");
    t.g.apply_schema(&with).await.unwrap();
    let r = rows(
        &t.g,
        &Target::main(),
        "query q() { match { $p: Person } return { $p.name, $p.age } order { $p.name } }",
    )
    .await
    .unwrap();
    assert_eq!(
        r[0],
        json!({"p.name": "Alice", "p.age": null}),
        "the old column's values must not come back"
    );
    let c = t.g.catalog().await.unwrap();
    // Person had ids 1..=5 (age was 2): the new age is the sixth.
    assert_eq!(c.node("Person").unwrap().property("age").unwrap().id, 6);
}

/// Each change the data cannot follow is a typed error naming what is
/// wrong, with every file of the graph as it was.
#[tokio::test]
async fn refused_changes_say_why_and_write_nothing() {
    let t = loaded_graph().await;
    let cases: Vec<(String, &str, &str)> = vec![
        (
            SCHEMA.replace("node Company {", "node Company {{"),
            "ParseError",
            "line",
        ),
        (
            SCHEMA.replace("age: I32?", "age: I32?\n    rank: I32"),
            "SchemaError",
            "Person.rank is a new required property",
        ),
        (
            SCHEMA.replace("enum(active, retired)?", "enum(retired)?"),
            "InvalidData",
            "the existing Person \"Alice\"",
        ),
        (
            SCHEMA.replace("@range(age, 0..150)", "@range(age, 0..40)"),
            "InvalidData",
            "the existing Person \"Bob\"",
        ),
        (
            SCHEMA.replace("age: I32?", "age: I32"),
            "InvalidData",
            "the existing Person \"Carol\" (branch main): required property is missing",
        ),
        (
            SCHEMA.replace("node Company { name: String @key }", ""),
            "SchemaError",
            "node type Company cannot be dropped: edge type WorksAt still references it",
        ),
        (
            SCHEMA
                .replace("node Company {", "node Firm @rename_from(\"Corp\") {")
                .replace("-> Company", "-> Firm"),
            "SchemaError",
            "the schema has no type Corp",
        ),
        (
            SCHEMA.replace(
                "age: I32?",
                "age: I32?\n    years: I32? @rename_from(\"age\")",
            ),
            "SchemaError",
            "the new schema still declares Person.age",
        ),
        (
            SCHEMA.replace("age: I32?", "age: I64?"),
            "SchemaError",
            "Person.age cannot change type from I32 to I64",
        ),
        (
            SCHEMA.replace("Person -> Company", "Company -> Person"),
            "SchemaError",
            "cannot change its endpoints",
        ),
        // A node's @key is its identity (ids are derived from it): adding,
        // dropping or moving one is refused, not applied.
        (
            SCHEMA.replace(
                "node Company { name: String @key }",
                "node Company { name: String }",
            ),
            "SchemaError",
            "the @key of Company cannot change",
        ),
        (
            SCHEMA.replace(
                "    title: String\n    published",
                "    title: String @key\n    published",
            ),
            "SchemaError",
            "the @key of Doc cannot change",
        ),
        (
            SCHEMA.replace("@key(org, num)", "@key(org)"),
            "SchemaError",
            "the @key of Emp cannot change (from (org, num) to (org))",
        ),
    ];
    // Two more that need data to break them: a duplicate for @unique, a
    // source with two edges for @card.
    t.g.mutate(
        "main",
        "query m() { update Person set { status: \"active\" } where name = \"Bob\" }",
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    t.g.mutate(
        "main",
        "query m() { insert Knows { from: \"Alice\", to: \"Carol\" } }",
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    let mut cases = cases;
    cases.push((
        SCHEMA.replace(
            "    status: enum(active, retired)?\n",
            "    status: enum(active, retired)? @unique\n",
        ),
        "InvalidData",
        "has the same value as \"Alice\", so @unique(status) does not hold",
    ));
    cases.push((
        SCHEMA.replace(
            "edge Knows: Person -> Person {",
            "edge Knows: Person -> Person @card(0..1) {",
        ),
        "InvalidData",
        "the source \"Alice\" (branch main) has 2 Knows edges, outside @card(0..1)",
    ));
    let untouched = Untouched::of(&t).await;
    for (src, kind, says) in &cases {
        for what in ["plan", "apply"] {
            let r = match what {
                "plan" => t.g.plan_schema(src).await.map(|_| ()),
                _ => t.g.apply_schema(src).await.map(|_| ()),
            };
            let e = r.expect_err(&format!("{what} should refuse: {says}"));
            assert_eq!(e.kind(), *kind, "{what} {says}: {e}");
            assert!(
                e.to_string().contains(says),
                "{what}: {e}\nshould say: {says}"
            );
            untouched.check(&t, &format!("{what} {says}")).await;
        }
    }
}

#[tokio::test]
async fn an_apply_planned_against_a_schema_that_moved_on_is_refused() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let other = Omnigraph::open(&uri).await.unwrap();
    let a = SCHEMA.replace("age: I32?", "age: I32?\n    a: String?");
    let b = SCHEMA.replace("age: I32?", "age: I32?\n    b: String?");
    // The first apply holds the exclusive schema gate, stalled before its
    // publish, while the second plans against the schema both started from.
    t.g.substrate()
        .stall_before_publish(std::time::Duration::from_secs(2));
    let first = tokio::spawn({
        let g = t.g.clone();
        let a = a.clone();
        async move { g.apply_schema(&a).await }
    });
    while stored(&uri, "_graph/recovery").await.is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let second = other.apply_schema(&b).await;
    let first = first.await.unwrap().unwrap();
    assert!(first.changed);
    match second {
        Err(OmniError::SchemaChanged { compiled, accepted }) => {
            assert_ne!(compiled, accepted);
            assert_eq!(accepted, first.schema);
        }
        other => panic!("expected SchemaChanged, got {other:?}"),
    }
    let c = t.g.catalog().await.unwrap();
    let p = c.node("Person").unwrap();
    assert!(p.property("a").is_some() && p.property("b").is_none());
    other.close().await;
}

/// Crash an apply that changes Person on main and on a branch (two table
/// commits) at `point`, reopen (once the crashed process's lease would
/// have lapsed, on S3), and return the schema and state before and after.
pub async fn crash_an_apply(place: Place, point: CrashPoint) -> (String, String, Omnigraph, Place) {
    let uri = place.uri("g.omni");
    let g = Omnigraph::init_with(&uri, SCHEMA, crate::recovery::test_options())
        .await
        .unwrap();
    g.load("main", PEOPLE, omnigraph::LoadMode::Overwrite)
        .await
        .unwrap();
    g.branch_create("dev", "main").await.unwrap();
    let old = format!(
        "{}{}",
        g.schema_source(None).await.unwrap(),
        state(&g).await
    );
    g.substrate().crash_at(point);
    let r = g.apply_schema(&evolved()).await;
    assert!(g.substrate().halted(), "the crash point was reached: {r:?}");
    drop(g);
    if matches!(place, Place::S3 { .. }) {
        tokio::time::sleep(crate::recovery::TEST_LEASE * 2).await;
    }
    let g = Omnigraph::open_with(&uri, crate::recovery::test_options())
        .await
        .unwrap();
    let now = format!(
        "{}{}",
        g.schema_source(None).await.unwrap(),
        state(&g).await
    );
    let left = stored(&uri, "_graph/recovery").await;
    assert!(left.is_empty(), "sidecars left: {left:?}");
    (old, now, g, place)
}

async fn assert_new_schema_works(g: &Omnigraph) {
    for b in ["main", "dev"] {
        let r = rows(g, &Target::Branch(b.into()), PEOPLE_NOW)
            .await
            .unwrap();
        assert_eq!(
            r[0],
            json!({"p.name": "Alice", "p.years": 34, "p.nick": null, "p.level": 3})
        );
    }
    let m = "query add() { insert Person { name: \"Dan\", years: 5, level: 9 } }";
    g.mutate("dev", m, "add", &Value::Null).await.unwrap();
}

async fn assert_old_schema_works(g: &Omnigraph) {
    for b in ["main", "dev"] {
        rows(g, &Target::Branch(b.into()), PEOPLE_THEN)
            .await
            .unwrap();
    }
    let m = "query add() { insert Person { name: \"Dan\", age: 5 } }";
    g.mutate("dev", m, "add", &Value::Null).await.unwrap();
    // And the apply can be made again.
    assert!(g.apply_schema(&evolved()).await.unwrap().changed);
    assert_new_schema_works(g).await;
}

#[tokio::test]
async fn an_apply_that_crashes_before_its_sidecar_leaves_the_old_schema() {
    // Its forks and the new type's table exist; nothing names them.
    let (old, now, g, _place) =
        crash_an_apply(Place::local(), CrashPoint::BeforeSidecarWrite).await;
    assert_eq!(old, now);
    assert_old_schema_works(&g).await;
}

#[tokio::test]
async fn an_apply_that_crashes_before_any_table_commit_rolls_back() {
    let (old, now, g, _place) = crash_an_apply(Place::local(), CrashPoint::AfterSidecarWrite).await;
    assert_eq!(old, now);
    assert_eq!(g.recovery_report().rolled_back.len(), 1);
    assert_old_schema_works(&g).await;
}

#[tokio::test]
async fn an_apply_that_crashes_between_its_table_commits_rolls_back() {
    let (old, now, g, _place) =
        crash_an_apply(Place::local(), CrashPoint::AfterTableCommit(1)).await;
    assert_eq!(old, now, "half an apply must not be visible");
    assert_eq!(g.recovery_report().rolled_back.len(), 1);
    assert_old_schema_works(&g).await;
}

#[tokio::test]
async fn an_apply_that_crashes_after_its_table_commits_rolls_forward() {
    an_apply_that_crashes_after_its_table_commits_rolls_forward_in(Place::local()).await;
}

pub async fn an_apply_that_crashes_after_its_table_commits_rolls_forward_in(place: Place) {
    let (old, now, g, _place) = crash_an_apply(place, CrashPoint::AfterTableCommit(2)).await;
    assert_ne!(old, now);
    assert!(now.starts_with(&omnigraph_normalised(&evolved())), "{now}");
    assert_eq!(g.recovery_report().rolled_forward.len(), 1);
    assert_new_schema_works(&g).await;
}

#[tokio::test]
async fn an_apply_that_crashes_after_its_publish_stands() {
    let (_, now, g, _place) = crash_an_apply(Place::local(), CrashPoint::AfterPublish).await;
    assert!(now.starts_with(&omnigraph_normalised(&evolved())), "{now}");
    assert_eq!(g.recovery_report().already_published.len(), 1);
    assert_new_schema_works(&g).await;
}

pub fn omnigraph_normalised(s: &str) -> String {
    omnigraph::write::schema_apply::normalise(s)
}

#[tokio::test]
async fn the_schema_commands_print_plan_and_apply() {
    let t = loaded_graph().await;
    let uri = t.uri();
    t.g.clone().close().await;
    let file = t.dir.path().join("v2.pg");
    std::fs::write(&file, evolved()).unwrap();
    let bad = t.dir.path().join("bad.pg");
    std::fs::write(&bad, SCHEMA.replace("age: I32?", "age: I64?")).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
            .arg("schema")
            .args(args)
            .args(["--store", &uri])
            .output()
            .unwrap()
    };
    let ok = |out: &std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout.clone()).unwrap()
    };
    let shown = ok(&run(&["show"]));
    assert_eq!(shown, omnigraph_normalised(SCHEMA));
    let plan: Value = serde_json::from_str(&ok(&run(&[
        "plan",
        "--schema",
        file.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    assert_eq!(plan["changes"], true);
    assert!(plan["steps"].as_array().unwrap().iter().any(|s| s
        == &json!({
            "kind": "add_property", "type": "Person", "property": "level",
            "detail": "a new property; existing rows get 3", "work": "rewrite", "rows": 3
        })));
    let refused = run(&["apply", "--schema", bad.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("error[SchemaError]"));
    let applied: Value = serde_json::from_str(&ok(&run(&[
        "apply",
        "--schema",
        file.to_str().unwrap(),
        "--json",
    ])))
    .unwrap();
    assert_eq!(applied["changed"], true);
    assert!(applied["commit"].is_string());
    assert_eq!(ok(&run(&["show"])), omnigraph_normalised(&evolved()));
    let version = (applied["manifest_version"].as_u64().unwrap() - 1).to_string();
    assert_eq!(
        ok(&run(&["show", "--version", &version])),
        omnigraph_normalised(SCHEMA)
    );
    let again = ok(&run(&["apply", "--schema", file.to_str().unwrap()]));
    assert!(again.contains("no change"), "{again}");
}

/// A search index is recorded under its column's name: it must follow a
/// rename, and a new column under the old name must not inherit it.
#[tokio::test]
async fn a_search_index_follows_its_column_through_a_rename() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let v1 = "node Doc {\n    slug: String @key\n    body: String? @index\n}\n";
    let g = Omnigraph::init(&uri, v1).await.unwrap();
    g.load(
        "main",
        "{\"type\":\"Doc\",\"data\":{\"slug\":\"a\",\"body\":\"graph search\"}}\n{\"type\":\"Doc\",\"data\":{\"slug\":\"b\",\"body\":\"vector lance\"}}\n",
        omnigraph::LoadMode::Overwrite,
    )
    .await
    .unwrap();
    g.optimize("main").await.unwrap();
    // A name a property has now is that property: the rename, then a new
    // property under the old name, are two applies.
    let v2 =
        "node Doc {\n    slug: String @key\n    text: String? @index @rename_from(\"body\")\n}\n";
    assert!(g.apply_schema(v2).await.unwrap().changed);
    let v3 = "node Doc {\n    slug: String @key\n    text: String? @index\n    body: String?\n}\n";
    assert!(g.apply_schema(v3).await.unwrap().changed);
    let search = |prop: &str| {
        format!(
            "query q($t: String) {{ match {{ $d: Doc }} return {{ $d.slug, bm25($d.{prop}, $t) as s }} order {{ s desc }} limit 5 }}"
        )
    };
    let found =
        |rows: Vec<Value>| -> Vec<Value> { rows.iter().map(|r| r["d.slug"].clone()).collect() };
    let r = g
        .query(
            &Target::main(),
            &search("text"),
            "q",
            &json!({"t": "graph"}),
        )
        .await
        .unwrap();
    let r = omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(Value::Object)
        .collect();
    assert_eq!(found(r), vec![json!("a")]);
    let r = g
        .query(
            &Target::main(),
            &search("body"),
            "q",
            &json!({"t": "graph"}),
        )
        .await
        .unwrap();
    let r: Vec<Value> = omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(Value::Object)
        .collect();
    assert!(
        found(r).is_empty(),
        "the new body column is empty; an old index answered"
    );
}

/// A graph made before schemas evolved has a catalog without the next-id
/// counters: its ids continue from the highest one.
#[tokio::test]
async fn a_catalog_written_before_evolution_continues_its_ids() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let id = t.g.snapshot(&Target::main()).await.unwrap().schema_id;
    t.g.clone().close().await;
    let path = std::path::Path::new(&uri).join(format!("_graph/schema/{id}.catalog.json"));
    let mut catalog: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    catalog.as_object_mut().unwrap().remove("next_type_id");
    for t in catalog["types"].as_array_mut().unwrap() {
        t.as_object_mut().unwrap().remove("next_prop_id");
    }
    std::fs::write(&path, serde_json::to_vec(&catalog).unwrap()).unwrap();
    let g = Omnigraph::open(&uri).await.unwrap();
    let src = format!(
        "{}edge Likes: Person -> Person\n",
        SCHEMA.replace("age: I32?", "age: I32?\n    nick: String?")
    );
    assert!(g.apply_schema(&src).await.unwrap().changed);
    let c = g.catalog().await.unwrap();
    assert_eq!(c.node("Person").unwrap().property("nick").unwrap().id, 6);
    let max_type = c
        .types
        .iter()
        .filter(|t| t.name != "Likes")
        .map(|t| t.id)
        .max()
        .unwrap();
    assert_eq!(c.edge("Likes").unwrap().id, max_type + 1);
    assert_eq!(count(&g, "main", "Person").await, 3);
}

/// A branch made before an apply merges after it: the apply re-versions
/// the tables of both lines without moving a row, so a type whose rows
/// changed on one side only is taken from that side.
#[tokio::test]
async fn a_branch_made_before_an_apply_merges_after_it() {
    let t = loaded_graph().await;
    t.g.branch_create("dev", "main").await.unwrap();
    let m = |q: &'static str| q;
    t.g.mutate(
        "dev",
        m("query m() { insert Person { name: \"Dan\" } }"),
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    t.g.mutate(
        "dev",
        m("query m() { insert Company { name: \"Beta\" } }"),
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    let v2 = SCHEMA
        .replace("age: I32?", "age: I32?\n    nick: String?")
        .replace(
            "node Company { name: String @key }",
            "node Company { name: String @key\n    size: I32? }",
        );
    t.g.apply_schema(&v2).await.unwrap();
    t.g.mutate(
        "dev",
        m("query m() { update Person set { nick: \"d\" } where name = \"Dan\" }"),
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    let merged = t.g.merge("dev", "main").await.unwrap();
    assert_eq!(merged.name(), "merged");
    let nick = "query q() { match { $p: Person { name: \"Dan\" } } return { $p.nick } }";
    assert_eq!(
        rows(&t.g, &Target::main(), nick).await.unwrap(),
        vec![json!({"p.nick": "d"})]
    );
    assert_eq!(count(&t.g, "main", "Company").await, 2);
    // Rows changed on both sides since a base under another schema: refused.
    t.g.branch_create("two", "main").await.unwrap();
    t.g.mutate(
        "two",
        m("query m() { insert Person { name: \"Eve\" } }"),
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    // (An apply that leaves Person's table alone, a new edge type, keeps
    // it an ordinary three-way merge; one that changes its layout does not.)
    let v3 = v2.replace("nick: String?", "nick: String?\n    mood: String?");
    t.g.apply_schema(&v3).await.unwrap();
    t.g.mutate(
        "main",
        m("query m() { insert Person { name: \"Fay\" } }"),
        "m",
        &Value::Null,
    )
    .await
    .unwrap();
    match t.g.merge("two", "main").await {
        Err(OmniError::BadRequest(msg)) => {
            assert!(msg.contains("Person changed on both branches"), "{msg}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The remaining steps applied end to end on a loaded graph with a second
/// branch that has its own write, each with the data checked before and
/// after, and the past read under the past's schema: dropping a type,
/// adding and removing enum values, and required to nullable and back
/// (with the scan that refuses a null).
#[tokio::test(flavor = "multi_thread")]
async fn drop_type_enum_values_and_nullability_apply_end_to_end() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("dev", "main").await.unwrap();
    g.load(
        "dev",
        r#"{"type":"Person","data":{"name":"Dan","age":20}}"#,
        omnigraph::LoadMode::Append,
    )
    .await
    .unwrap();
    let works = "query q() { match { $p: Person  $p worksAt $c } return { $p.name, $c.name } }";
    let before = g.snapshot(&Target::main()).await.unwrap().manifest_version;
    let past = Target::Version {
        version: before,
        branch: "main".into(),
    };

    // Drop a type: gone from every branch's schema, readable in the past.
    let dropped = SCHEMA.replace(
        "edge WorksAt: Person -> Company @card(0..1) { role: String? }\n",
        "",
    );
    assert_ne!(dropped, SCHEMA);
    g.apply_schema(&dropped).await.unwrap();
    for b in ["main", "dev"] {
        let e = rows(g, &Target::Branch(b.into()), works).await.unwrap_err();
        assert!(matches!(e, OmniError::Type { .. }), "{b}: {e}");
    }
    assert_eq!(
        rows(g, &past, works).await.unwrap(),
        [json!({"p.name": "Alice", "c.name": "Acme"})]
    );
    let dev_people = "query q() { match { $p: Person } return { $p.name } order { $p.name } }";
    assert_eq!(
        rows(g, &Target::Branch("dev".into()), dev_people)
            .await
            .unwrap()
            .len(),
        4
    );

    // Add an enum value: refused before, accepted after.
    let away = r#"{"type":"Person","data":{"name":"Eve","status":"away"}}"#;
    let e = g
        .load("main", away, omnigraph::LoadMode::Append)
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::Invalid { .. }), "{e}");
    let more = dropped.replace("enum(active, retired)", "enum(active, retired, away)");
    g.apply_schema(&more).await.unwrap();
    g.load("main", away, omnigraph::LoadMode::Append)
        .await
        .unwrap();

    // Remove an enum value no row holds; a row holding it is refused after.
    let fewer = more.replace("enum(active, retired, away)", "enum(active, away)");
    g.apply_schema(&fewer).await.unwrap();
    let retired = r#"{"type":"Person","data":{"name":"Fay","status":"retired"}}"#;
    let e = g
        .load("main", retired, omnigraph::LoadMode::Append)
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::Invalid { .. }), "{e}");
    let statuses =
        "query q() { match { $p: Person } return { $p.name, $p.status } order { $p.name } }";
    let now = rows(g, &Target::main(), statuses).await.unwrap();
    assert_eq!(
        now.iter()
            .filter(|r| r["p.status"] == json!("away"))
            .count(),
        1
    );

    // Nullable to required: refused while a row is null, applied once none
    // is; back to nullable, a row without it is accepted again.
    let required = fewer.replace("    age: I32?\n", "    age: I32\n");
    assert_ne!(required, fewer);
    let e = g.apply_schema(&required).await.unwrap_err();
    assert!(e.to_string().contains("age"), "{e}");
    let set = "query s($n: String, $a: I32) { update Person set { age: $a } where name = $n }";
    for n in ["Carol", "Eve"] {
        g.mutate("main", set, "s", &json!({ "n": n, "a": 50 }))
            .await
            .unwrap();
    }
    // Every branch is scanned: dev's Carol is still null.
    let e = g.apply_schema(&required).await.unwrap_err();
    assert!(e.to_string().contains("branch dev"), "{e}");
    g.mutate("dev", set, "s", &json!({ "n": "Carol", "a": 51 }))
        .await
        .unwrap();
    g.apply_schema(&required).await.unwrap();
    let ageless = r#"{"type":"Person","data":{"name":"Gus"}}"#;
    let e = g
        .load("main", ageless, omnigraph::LoadMode::Append)
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::Invalid { .. }), "{e}");
    g.apply_schema(&fewer).await.unwrap();
    g.load("main", ageless, omnigraph::LoadMode::Append)
        .await
        .unwrap();
    let ages = "query q() { match { $p: Person } return { $p.name, $p.age } order { $p.name } }";
    let now = rows(g, &Target::main(), ages).await.unwrap();
    assert_eq!(now.len(), 5, "{now:?}");
    assert_eq!(now.last().unwrap()["p.age"], Value::Null);
    // The first version still reads its rows under its own schema.
    assert_eq!(rows(g, &past, ages).await.unwrap().len(), 3);
}

/// Dropping a constraint lets data through that it refused; adding it back
/// is refused while a row (on any branch) breaks it, and applies once none
/// does: for a range, a pattern check and a unique key.
#[tokio::test(flavor = "multi_thread")]
async fn constraints_drop_and_add_back_end_to_end() {
    let t = loaded_graph().await;
    let g = &t.g;
    let del = "query d($n: String) { delete Person where name = $n }";
    for (what, constraint, bad, clash) in [
        (
            "range",
            "    @range(age, 0..150)\n",
            r#"{"type":"Person","data":{"name":"Old","age":200}}"#,
            "Old",
        ),
        (
            "check",
            "    @check(email, \"^[^@]+@[^@]+$\")\n",
            r#"{"type":"Person","data":{"name":"Odd","email":"no-at-sign"}}"#,
            "Odd",
        ),
        (
            "unique",
            "    email: String? @unique\n",
            r#"{"type":"Person","data":{"name":"Twin","email":"alice@x.org"}}"#,
            "Twin",
        ),
    ] {
        let without = match what {
            "unique" => SCHEMA.replace(constraint, "    email: String?\n"),
            _ => SCHEMA.replace(constraint, ""),
        };
        assert_ne!(without, SCHEMA, "{what}");
        let e = g
            .load("main", bad, omnigraph::LoadMode::Append)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), "InvalidData", "{what}: {e}");
        g.apply_schema(&without).await.unwrap();
        g.load("main", bad, omnigraph::LoadMode::Append)
            .await
            .unwrap();
        let e = g.apply_schema(SCHEMA).await.unwrap_err();
        assert!(e.to_string().contains(clash), "{what}: {e}");
        g.mutate("main", del, "d", &json!({ "n": clash }))
            .await
            .unwrap();
        g.apply_schema(SCHEMA).await.unwrap();
        let e = g
            .load("main", bad, omnigraph::LoadMode::Append)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), "InvalidData", "{what}: {e}");
    }
}

/// An edge's cardinality dropped and added back: a second edge loads
/// without it; adding it back is refused naming the source that breaks
/// it, and applies once that source has one edge again.
#[tokio::test(flavor = "multi_thread")]
async fn a_cardinality_drops_and_adds_back_end_to_end() {
    let t = loaded_graph().await;
    let g = &t.g;
    let second = "{\"type\":\"Company\",\"data\":{\"name\":\"Beta\"}}\n{\"edge\":\"WorksAt\",\"from\":\"Alice\",\"to\":\"Beta\"}";
    let e = g
        .load("main", second, omnigraph::LoadMode::Append)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "InvalidData", "{e}");
    let without = SCHEMA.replace("Person -> Company @card(0..1) {", "Person -> Company {");
    assert_ne!(without, SCHEMA);
    g.apply_schema(&without).await.unwrap();
    g.load("main", second, omnigraph::LoadMode::Append)
        .await
        .unwrap();
    let e = g.apply_schema(SCHEMA).await.unwrap_err();
    assert!(e.to_string().contains("Alice"), "{e}");
    let del = "query d($n: String) { delete Company where name = $n }";
    g.mutate("main", del, "d", &json!({ "n": "Beta" }))
        .await
        .unwrap();
    g.apply_schema(SCHEMA).await.unwrap();
    let e = g
        .load("main", second, omnigraph::LoadMode::Append)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "InvalidData", "{e}");
}

/// A mutation compiles against the schema its handle last saw, without a
/// read; a schema another process applied since is found all the same:
/// one that adds what the text names (the compile fails on the old one)
/// and one that leaves the text valid (the prepare finds it moved).
#[tokio::test]
async fn a_mutation_meets_a_schema_another_process_applied() {
    let t = loaded_graph().await;
    let other = Omnigraph::open(&t.uri()).await.unwrap();
    // Both handles know the loaded graph's schema.
    let insert = "query m($n: String) { insert Person { name: $n } }";
    t.g.mutate("main", insert, "m", &json!({"n": "Known"}))
        .await
        .unwrap();
    let nick = SCHEMA.replace("age: I32?", "age: I32?\n    nick: String?");
    other.apply_schema(&nick).await.unwrap();
    let named = "query m($n: String) { insert Person { name: $n, nick: \"n\" } }";
    t.g.mutate("main", named, "m", &json!({"n": "Nicked"}))
        .await
        .unwrap();
    let wide = nick.replace("nick: String?", "nick: String?\n    wide: I64?");
    other.apply_schema(&wide).await.unwrap();
    t.g.mutate("main", insert, "m", &json!({"n": "After"}))
        .await
        .unwrap();
    let q = "query q() { match { $p: Person { nick: \"n\" } } return { $p.name } }";
    let rows =
        t.g.query(&Target::main(), q, "q", &Value::Null)
            .await
            .unwrap();
    let names: Vec<Value> = omnigraph::exec::output::rows(&rows)
        .unwrap()
        .into_iter()
        .map(|row| row.into_iter().next().expect("one column").1)
        .collect();
    assert_eq!(names, vec![json!("Nicked")]);
    // A text the newest schema refuses too is refused, naming the property.
    let bad = "query m($n: String) { insert Person { name: $n, nope: 1 } }";
    let e =
        t.g.mutate("main", bad, "m", &json!({"n": "X"}))
            .await
            .unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    other.close().await;
}

/// A fresh process reads the schema the hint names beside the newest
/// version; a hint that names an older schema (written before an apply,
/// or lost after one), none (the older form) or one that is not there
/// still opens, on the accepted schema.
#[tokio::test]
async fn an_open_whose_hint_names_an_older_schema_reads_the_accepted_one() {
    let t = loaded_graph().await;
    let uri = t.uri();
    omnigraph::storage::background::settle().await;
    let s = store(&uri).await;
    let before = s.read("_graph/latest").await.unwrap().unwrap();
    let text = String::from_utf8(before.to_vec()).unwrap();
    let old_id = t.g.snapshot(&Target::main()).await.unwrap().schema_id;
    assert!(
        text.contains(&old_id),
        "the hint names the schema: {text:?}"
    );
    let grown = SCHEMA.replace("age: I32?", "age: I32?\n    nick: String?");
    let applied = t.g.apply_schema(&grown).await.unwrap();
    omnigraph::storage::background::settle().await;
    let version = text.split_whitespace().next().unwrap().to_string();
    for stale in [
        text.clone(),
        version.clone(),
        format!("{version} nosuchschema"),
    ] {
        s.put("_graph/latest", stale.as_bytes()).await.unwrap();
        let r = Omnigraph::open_read_only(&uri).await.unwrap();
        let opened = r.snapshot(&r.as_opened(&Target::main())).await.unwrap();
        assert_eq!(opened.schema_id, applied.schema, "opened on {stale:?}");
        assert_ne!(opened.schema_id, old_id);
    }
}

/// What a query of every person and every WorksAt edge returns on each
/// branch: the data a schema step must leave as it was.
async fn people_and_jobs(g: &Omnigraph, branches: &[&str]) -> Vec<Vec<Value>> {
    let all = "query q() { match { $p: Person } return { $p.name, $p.age, $p.email, $p.status } order { $p.name } }";
    let jobs = "query q() { match { $p: Person  $p worksAt $c } return { $p.name, $c.name } order { $p.name, $c.name } }";
    let mut out = Vec::new();
    for b in branches {
        for q in [all, jobs] {
            out.push(rows(g, &Target::Branch(b.to_string()), q).await.unwrap());
        }
    }
    out
}

/// Each constraint step (a range, a pattern check, a unique value, an
/// edge cardinality, an enum value removed) on a graph with two branches:
/// the loosening applies to both and the past keeps its schema; the
/// tightening is refused while a row on the other branch breaks it,
/// naming the row and its branch, with every file of the graph as it was;
/// once that row is gone it applies, the data of both branches as before
/// it, and the rule holds on both again.
#[tokio::test(flavor = "multi_thread")]
async fn constraint_steps_on_two_branches_refuse_cleanly_and_keep_the_past() {
    let enum_wider = SCHEMA.replace("enum(active, retired)", "enum(active, retired, away)");
    // (what, the loosened schema, dev's breaking rows, the row named, how
    // dev's row goes, the tightened schema)
    let cases: Vec<(&str, String, &str, &str, &str, String)> = vec![
        (
            "range",
            SCHEMA.replace("    @range(age, 0..150)\n", ""),
            r#"{"type":"Person","data":{"name":"Old","age":200}}"#,
            "Old",
            "query d() { delete Person where name = \"Old\" }",
            SCHEMA.to_string(),
        ),
        (
            "check",
            SCHEMA.replace("    @check(email, \"^[^@]+@[^@]+$\")\n", ""),
            r#"{"type":"Person","data":{"name":"Odd","email":"no-at-sign"}}"#,
            "Odd",
            "query d() { delete Person where name = \"Odd\" }",
            SCHEMA.to_string(),
        ),
        (
            "unique",
            SCHEMA.replace("    email: String? @unique\n", "    email: String?\n"),
            r#"{"type":"Person","data":{"name":"Twin","email":"alice@x.org"}}"#,
            "Twin",
            "query d() { delete Person where name = \"Twin\" }",
            SCHEMA.to_string(),
        ),
        (
            "card",
            SCHEMA.replace("Person -> Company @card(0..1) {", "Person -> Company {"),
            "{\"type\":\"Company\",\"data\":{\"name\":\"Beta\"}}\n{\"edge\":\"WorksAt\",\"from\":\"Alice\",\"to\":\"Beta\"}",
            "Alice",
            "query d() { delete Company where name = \"Beta\" }",
            SCHEMA.to_string(),
        ),
        (
            "enum",
            enum_wider.clone(),
            r#"{"type":"Person","data":{"name":"Eve","status":"away"}}"#,
            "Eve",
            "query d() { update Person set { status: \"active\" } where name = \"Eve\" }",
            SCHEMA.to_string(),
        ),
    ];
    for (what, loose, breaking, named, mend, strict) in cases {
        assert_ne!(loose, strict, "{what}");
        let t = loaded_graph().await;
        let g = &t.g;
        g.branch_create("dev", "main").await.unwrap();
        let past = Target::Version {
            version: g.snapshot(&Target::main()).await.unwrap().manifest_version,
            branch: "main".into(),
        };
        let then = people_and_jobs(g, &["main"]).await;
        // Refused before the loosening, on either branch.
        for b in ["main", "dev"] {
            let e = g
                .load(b, breaking, omnigraph::LoadMode::Append)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), "InvalidData", "{what} on {b}: {e}");
        }
        g.apply_schema(&loose).await.unwrap();
        g.load("dev", breaking, omnigraph::LoadMode::Append)
            .await
            .unwrap();
        let before = people_and_jobs(g, &["main", "dev"]).await;
        assert_ne!(
            before[0..2],
            before[2..4],
            "{what}: dev holds the breaking rows"
        );

        let untouched = Untouched::of(&t).await;
        let e = g.apply_schema(&strict).await.unwrap_err();
        assert_eq!(e.kind(), "InvalidData", "{what}: {e}");
        let says = e.to_string();
        assert!(
            says.contains(named) && says.contains("(branch dev)"),
            "{what}: {says}"
        );
        untouched.check(&t, &format!("the {what} step")).await;

        g.mutate("dev", mend, "d", &Value::Null).await.unwrap();
        let mended = people_and_jobs(g, &["main", "dev"]).await;
        g.apply_schema(&strict).await.unwrap();
        assert_eq!(
            people_and_jobs(g, &["main", "dev"]).await,
            mended,
            "{what}: the step changed no row"
        );
        for b in ["main", "dev"] {
            let e = g
                .load(b, breaking, omnigraph::LoadMode::Append)
                .await
                .unwrap_err();
            assert_eq!(e.kind(), "InvalidData", "{what} after, on {b}: {e}");
        }
        // The version before every step reads as it did, by its schema.
        let all = "query q() { match { $p: Person } return { $p.name, $p.age, $p.email, $p.status } order { $p.name } }";
        assert_eq!(rows(g, &past, all).await.unwrap(), then[0], "{what}");
    }
}

/// What `q` returns on main and on dev.
async fn on_both(g: &Omnigraph, q: &str) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    for b in ["main", "dev"] {
        out.push(rows(g, &Target::Branch(b.into()), q).await.unwrap());
    }
    out
}

/// `@index` added and dropped: each step is metadata only and changes no
/// answer; the next optimize builds the added index on each branch it
/// runs on, and after the drop builds it no more (rows written since
/// would make it stale); the past reads as it did.
#[tokio::test(flavor = "multi_thread")]
async fn an_index_added_and_dropped_end_to_end() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("dev", "main").await.unwrap();
    g.load(
        "dev",
        r#"{"type":"Person","data":{"name":"Dan","age":20}}"#,
        omnigraph::LoadMode::Append,
    )
    .await
    .unwrap();
    let past = Target::Version {
        version: g.snapshot(&Target::main()).await.unwrap().manifest_version,
        branch: "main".into(),
    };
    let by_age =
        "query q() { match { $p: Person\n $p.age > 30 } return { $p.name } order { $p.name } }";
    let before = on_both(g, by_age).await;
    let age_index = |r: &omnigraph::OptimizeReport| {
        r.indexes
            .iter()
            .filter(|i| i["type"] == "Person" && i["property"] == "age")
            .count()
    };
    g.optimize("main").await.unwrap();

    let indexed = SCHEMA.replace("    age: I32?\n", "    age: I32? @index\n");
    assert_ne!(indexed, SCHEMA);
    let plan = g.plan_schema(&indexed).await.unwrap();
    let kinds: Vec<(SchemaStepKind, StepWork)> = plan
        .steps
        .iter()
        .map(|s| (s.step.kind, s.step.work))
        .collect();
    assert_eq!(kinds, [(SchemaStepKind::AddIndex, StepWork::Metadata)]);
    g.apply_schema(&indexed).await.unwrap();
    assert_eq!(on_both(g, by_age).await, before);
    for b in ["main", "dev"] {
        let r = g.optimize(b).await.unwrap();
        assert_eq!(age_index(&r), 1, "{b}: {r:?}");
        let kind = r.indexes.iter().find(|i| i["property"] == "age").unwrap();
        assert_eq!(kind["kind"], "btree", "{b}: {kind}");
    }
    assert_eq!(
        on_both(g, by_age).await,
        before,
        "an index changes no answer"
    );

    let plan = g.plan_schema(SCHEMA).await.unwrap();
    let kinds: Vec<(SchemaStepKind, StepWork)> = plan
        .steps
        .iter()
        .map(|s| (s.step.kind, s.step.work))
        .collect();
    assert_eq!(kinds, [(SchemaStepKind::DropIndex, StepWork::Metadata)]);
    g.apply_schema(SCHEMA).await.unwrap();
    assert_eq!(on_both(g, by_age).await, before);
    // New rows would make an age index stale: none is built again.
    for b in ["main", "dev"] {
        g.load(
            b,
            r#"{"type":"Person","data":{"name":"Zoe","age":25}}"#,
            omnigraph::LoadMode::Append,
        )
        .await
        .unwrap();
        let r = g.optimize(b).await.unwrap();
        assert_eq!(age_index(&r), 0, "{b}: {r:?}");
    }
    assert_eq!(on_both(g, by_age).await, before, "Zoe is not over 30");
    let all = "query q() { match { $p: Person } return { $p.name } order { $p.name } }";
    assert_eq!(rows(g, &past, all).await.unwrap().len(), 3);

    // A refused index step writes nothing: a Blob cannot be indexed.
    let untouched = Untouched::of(&t).await;
    let blob_indexed = SCHEMA.replace("    body: Blob?\n", "    body: Blob? @index\n");
    assert_ne!(blob_indexed, SCHEMA);
    let e = g.apply_schema(&blob_indexed).await.unwrap_err();
    assert_eq!(e.kind(), "SchemaError", "{e}");
    untouched.check(&t, &"an index on a Blob").await;
}

/// A write on a branch right after a schema apply that rewrote the
/// branch's rows, in the process that applied it and with its gates'
/// locks kept: the head the branch's owner knew from before the apply is
/// not the one the write captures (it would meet the old schema and fail
/// with `SchemaChanged`).
#[tokio::test]
async fn a_branch_takes_writes_right_after_an_apply_that_rewrote_it() {
    let place = Place::s3();
    let opts = || OpenOptions {
        lock_linger: std::time::Duration::from_secs(60),
        ..OpenOptions::default()
    };
    let g = Omnigraph::init_with(&place.uri("g.omni"), SCHEMA, opts())
        .await
        .unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.branch_create("dev", "main").await.unwrap();
    let insert = "query m($n: String) { insert Person { name: $n } }";
    for n in ["a", "b"] {
        g.mutate("dev", insert, "m", &json!({ "n": n }))
            .await
            .unwrap();
    }
    let evolved = SCHEMA.replace(
        "    age: I32?\n",
        "    age: I32?\n    level: I64 @default(3)\n",
    );
    assert_ne!(evolved, SCHEMA);
    g.apply_schema(&evolved).await.unwrap();
    let insert = "query m($n: String) { insert Person { name: $n, level: 1 } }";
    g.mutate("dev", insert, "m", &json!({ "n": "c" }))
        .await
        .unwrap();
    g.load(
        "dev",
        "{\"type\": \"Person\", \"data\": {\"name\": \"d\", \"level\": 2}}\n",
        LoadMode::Append,
    )
    .await
    .unwrap();
    assert_eq!(
        count(&g, "dev", "Person").await,
        count(&g, "main", "Person").await + 4
    );
    g.close().await;
}
