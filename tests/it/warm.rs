//! Warm structures across writes: a handle that keeps reading while the
//! graph is written (node inserts, updates of plain and indexed
//! properties, deletes, edge inserts and deletes, a merge, a schema step, a
//! cleanup, a compaction, a load) answers every query exactly as a fresh
//! handle on the same graph does, the first time after each write (when
//! its ids and columns are carried from the version it holds) and again
//! after.

use omnigraph::{LoadMode, Omnigraph, RetentionPolicy, Target};
use serde_json::{Value, json};

const SCHEMA: &str = "node Person { handle: String @key\n name: String @index\n age: I32? }\nedge Knows: Person -> Person { since: I32? }";

/// The same schema with one more property.
const SCHEMA_CITY: &str = "node Person { handle: String @key\n name: String @index\n age: I32?\n city: String? }\nedge Knows: Person -> Person { since: I32? }";

const QUERIES: &str = r#"
query lookup($h: String) { match { $p: Person { handle: $h } } return { $p.name, $p.age } }
query node($h: String) { match { $p: Person { handle: $h } } return { $p } }
query out($h: String) { match { $p: Person { handle: $h }
    $p knows $f } return { $f.handle, $f.name, $f.age } }
query into($h: String) { match { $p: Person { handle: $h }
    $f knows $p } return { $f.handle } }
query named($n: String) { match { $p: Person { name: $n } } return { $p.handle, $p.age } }
query older() { match { $p: Person
    $p.age > 40 } return { $p.handle, $p.name } }
query lonely() { match { $p: Person
    not { $p knows $_ } } return { count($p) } }
query everyone() { match { $p: Person } return { $p.handle, $p.name, $p.age } }
query two() { match { $p: Person { handle: "p1" }
    $p knows{2,2} $x } return { $x.handle } }
"#;

const PERSONS: usize = 120;

fn jsonl() -> String {
    let mut s = String::new();
    for i in 0..PERSONS {
        s.push_str(&format!(
            "{{\"type\":\"Person\",\"data\":{{\"handle\":\"p{i}\",\"name\":\"n{}\",\"age\":{}}}}}\n",
            i % 40,
            (i * 7) % 80
        ));
    }
    for i in 0..PERSONS {
        for k in [1, 3, 17] {
            let j = (i * k + 5) % PERSONS;
            if i != j {
                s.push_str(&format!(
                    "{{\"edge\":\"Knows\",\"from\":\"p{i}\",\"to\":\"p{j}\",\"data\":{{\"since\":{}}}}}\n",
                    2000 + (i + k) % 20
                ));
            }
        }
    }
    s
}

/// Every query with every parameter it is asked with, each answer's rows
/// sorted (the queries have no order).
fn asks() -> Vec<(&'static str, Value)> {
    let handles = [
        "p0", "p1", "p3", "p5", "p7", "p30", "p119", "new1", "new2", "side1", "l3",
    ];
    let mut v = Vec::new();
    for h in handles {
        for q in ["lookup", "node", "out", "into"] {
            v.push((q, json!({ "h": h })));
        }
    }
    for n in ["n3", "n5", "renamed", "n39"] {
        v.push(("named", json!({ "n": n })));
    }
    for q in ["older", "lonely", "everyone", "two"] {
        v.push((q, Value::Null));
    }
    v
}

async fn answers(db: &Omnigraph, target: &Target) -> Vec<String> {
    let mut out = Vec::new();
    for (q, params) in asks() {
        let r = db
            .query(target, QUERIES, q, &params)
            .await
            .unwrap_or_else(|e| panic!("{q} {params}: {e}"));
        let mut rows: Vec<String> = omnigraph::exec::output::rows(&r)
            .unwrap()
            .into_iter()
            .map(|row| serde_json::to_string(&row).unwrap())
            .collect();
        rows.sort();
        out.push(format!("{q} {params}: {}", rows.join(" ")));
    }
    out
}

/// The warm handle answers as a fresh one, the first time and again.
async fn check(warm: &Omnigraph, uri: &str, what: &str) {
    let fresh = Omnigraph::open_read_only(uri).await.unwrap();
    let want = answers(&fresh, &Target::main()).await;
    for pass in ["first", "second"] {
        let got = answers(warm, &Target::main()).await;
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w, "after {what}, {pass} read");
        }
    }
}

async fn mutate(db: &Omnigraph, branch: &str, body: &str) {
    db.mutate(
        branch,
        &format!("query m() {{ {body} }}"),
        "m",
        &Value::Null,
    )
    .await
    .unwrap_or_else(|e| panic!("{body}: {e}"));
}

fn carries(db: &Omnigraph) -> u64 {
    db.cache_stats()["node_carries"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_handle_answers_as_a_fresh_one_after_every_kind_of_write() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g").to_string_lossy().to_string();
    let db = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    db.load("main", &jsonl(), LoadMode::Overwrite)
        .await
        .unwrap();
    check(&db, &uri, "the load").await;
    // Small writes carry the warm structures; each step is checked. The
    // node writes are carried from the version before (edge writes leave
    // the node table as it was).
    let steps: [(&str, &str); 7] = [
        (
            "a node insert",
            r#"insert Person { handle: "new1", name: "n3", age: 99 }"#,
        ),
        (
            "an update",
            r#"update Person set { age: 41 } where handle = "p3""#,
        ),
        (
            "an update of an indexed property",
            r#"update Person set { name: "renamed" } where handle = "p5""#,
        ),
        ("a node delete", r#"delete Person where handle = "p7""#),
        (
            "an edge insert",
            r#"insert Knows { from: "new1", to: "p1", since: 1999 }"#,
        ),
        ("an edge delete", r#"delete Knows where since = 2003"#),
        (
            "a second node insert",
            r#"insert Person { handle: "new2", name: "n5", age: 50 }
               insert Knows { from: "p0", to: "new2" }"#,
        ),
    ];
    for (what, body) in steps {
        let before = carries(&db);
        let handed = db.cache_stats()["rows_handed"].as_u64().unwrap();
        mutate(&db, "main", body).await;
        check(&db, &uri, what).await;
        if body.contains("Person") {
            assert!(
                carries(&db) > before,
                "after {what} no node table was carried"
            );
        }
        // A row written alone is taken from its writer, not read.
        if what == "a node insert" || what == "an update" {
            assert!(
                db.cache_stats()["rows_handed"].as_u64().unwrap() > handed,
                "after {what} the written row was read back"
            );
        }
    }

    // Writes with only point reads between them: each version carries
    // from the one carried before it, the base staying where it was.
    let chained = db.cache_stats()["node_carries_chained"].as_u64().unwrap();
    for (k, body) in [
        r#"insert Person { handle: "c1", name: "n7", age: 45 }"#,
        r#"update Person set { age: 46 } where handle = "c1""#,
        r#"update Person set { age: 12 } where handle = "p11""#,
        r#"delete Person where handle = "p12""#,
        r#"insert Person { handle: "c2", name: "n7", age: 47 }"#,
        r#"delete Person where handle = "c1""#,
    ]
    .iter()
    .enumerate()
    {
        mutate(&db, "main", body).await;
        for h in ["c1", "c2", "p11", "p12", "p13", "new1", "p119"] {
            for q in ["lookup", "out", "into"] {
                let params = json!({ "h": h });
                let warm = db
                    .query(&Target::main(), QUERIES, q, &params)
                    .await
                    .unwrap();
                let fresh = Omnigraph::open_read_only(&uri).await.unwrap();
                let want = fresh
                    .query(&Target::main(), QUERIES, q, &params)
                    .await
                    .unwrap();
                let rows = |r: &omnigraph::QueryResult| {
                    let mut v: Vec<String> = omnigraph::exec::output::rows(r)
                        .unwrap()
                        .iter()
                        .map(|row| serde_json::to_string(row).unwrap())
                        .collect();
                    v.sort();
                    v
                };
                assert_eq!(rows(&warm), rows(&want), "chained write {k}: {q} {h}");
            }
        }
    }
    assert!(
        db.cache_stats()["node_carries_chained"].as_u64().unwrap() > chained,
        "no version carried from the one before it"
    );
    check(&db, &uri, "chained writes").await;

    db.branch_create("side", "main").await.unwrap();
    mutate(
        &db,
        "side",
        r#"insert Person { handle: "side1", name: "n39", age: 3 }
           update Person set { age: 77 } where handle = "p30""#,
    )
    .await;
    db.merge("side", "main").await.unwrap();
    check(&db, &uri, "a merge").await;

    db.apply_schema(SCHEMA_CITY).await.unwrap();
    check(&db, &uri, "a schema step").await;
    mutate(
        &db,
        "main",
        r#"insert Person { handle: "l3", name: "n1", city: "x" }"#,
    )
    .await;
    check(&db, &uri, "an insert after the schema step").await;

    db.cleanup(RetentionPolicy {
        older_than: std::time::Duration::ZERO,
        keep_versions: Some(1),
        dry_run: false,
    })
    .await
    .unwrap();
    check(&db, &uri, "a cleanup").await;

    db.optimize("main").await.unwrap();
    check(&db, &uri, "a compaction").await;
    mutate(&db, "main", r#"delete Person where handle = "p0""#).await;
    check(&db, &uri, "a delete after the compaction").await;

    let more: String = (0..5)
        .map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"handle\":\"m{i}\",\"name\":\"n3\",\"age\":{}}}}}\n", 60 + i))
        .collect();
    let handed = db.cache_stats()["rows_handed"].as_u64().unwrap();
    db.load("main", &more, LoadMode::Append).await.unwrap();
    check(&db, &uri, "an appending load").await;
    assert!(
        db.cache_stats()["rows_handed"].as_u64().unwrap() > handed,
        "the rows an append wrote were read back"
    );
}
