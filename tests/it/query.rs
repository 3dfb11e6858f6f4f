//! Read queries end to end: semantics, scoped reads and time travel,
//! snapshot isolation under a concurrent writer, graph-index reuse, errors.

use omnigraph::{LoadMode, OmniError, Omnigraph, Target};
use serde_json::{Value, json};

use crate::common::*;

async fn rows(
    g: &Omnigraph,
    target: &Target,
    src: &str,
    params: Value,
) -> Vec<serde_json::Map<String, Value>> {
    let file = omnigraph::compiler::query::parser::parse(src).unwrap();
    let name = file.queries[0].name.clone();
    let r = g.query(target, src, &name, &params).await.unwrap();
    omnigraph::exec::output::rows(&r).unwrap()
}

fn col(rows: &[serde_json::Map<String, Value>], c: &str) -> Vec<Value> {
    rows.iter().map(|r| r[c].clone()).collect()
}

const GRAPH: &str = r#"{"type":"Person","data":{"name":"a","age":30}}
{"type":"Person","data":{"name":"b","age":40}}
{"type":"Person","data":{"name":"c"}}
{"type":"Person","data":{"name":"d","age":40}}
{"type":"Company","data":{"name":"acme"}}
{"edge":"Knows","from":"a","to":"b","data":{"since":"2020-01-01"}}
{"edge":"Knows","from":"a","to":"b","data":{"since":"2021-01-01"}}
{"edge":"Knows","from":"b","to":"c"}
{"edge":"Knows","from":"c","to":"a"}
{"edge":"Knows","from":"c","to":"d"}
{"edge":"WorksAt","from":"a","to":"acme"}
{"edge":"WorksAt","from":"d","to":"acme"}
"#;

async fn graph() -> TestGraph {
    let t = new_graph().await;
    t.g.load("main", GRAPH, LoadMode::Overwrite).await.unwrap();
    t
}

#[tokio::test]
async fn traversal_semantics() {
    let t = graph().await;
    let m = Target::main();
    // One hop collapses parallel edges (reachability, set semantics).
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $p: Person { name: \"a\" }\n $p knows $f } return { $f.name } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "f.name"), vec![json!("b")]);
    // Each destination once, at its first hop; the start is visited at hop 0.
    let r = rows(&t.g, &m, "query q() { match { $p: Person { name: \"a\" }\n $p knows{1,3} $x } return { $x.name } order { $x.name } }", Value::Null).await;
    assert_eq!(col(&r, "x.name"), vec![json!("b"), json!("c"), json!("d")]);
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $p: Person { name: \"a\" }\n $p knows{2,2} $x } return { $x.name } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "x.name"), vec![json!("c")]);
    let r = rows(&t.g, &m, "query q() { match { $p: Person { name: \"a\" }\n $p knows{2,} $x } return { count($x) as n } }", Value::Null).await;
    assert_eq!(col(&r, "n"), vec![json!(2)]);
    // Undirected: either direction.
    let r = rows(&t.g, &m, "query q() { match { $p: Person { name: \"a\" }\n $p <knows> $f } return { $f.name } order { $f.name } }", Value::Null).await;
    assert_eq!(col(&r, "f.name"), vec![json!("b"), json!("c")]);
    // Edge binding keeps parallel edges, and edge properties can be filtered.
    let r = rows(&t.g, &m, "query q() { match { $p: Person { name: \"a\" }\n $p $w:knows $f } return { $f.name, $w.since } order { $w.since } }", Value::Null).await;
    assert_eq!(
        col(&r, "w.since"),
        vec![json!("2020-01-01"), json!("2021-01-01")]
    );
    let r = rows(&t.g, &m, "query q() { match { $p: Person\n $p $w:knows $f\n $w.since > date(\"2020-06-01\") } return { $p.name } }", Value::Null).await;
    assert_eq!(col(&r, "p.name"), vec![json!("a")]);
    // Traversal into a bound variable, and backwards from a bound target.
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $c: Company\n $p worksAt $c } return { $p.name } order { $p.name } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "p.name"), vec![json!("a"), json!("d")]);
    // Anti-join.
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $p: Person\n not { $p knows $_ } } return { $p.name } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "p.name"), vec![json!("d")]);
}

/// A pattern whose first binding matches nothing answers no rows, whatever
/// follows it (a traversal, a multi-hop, an edge binding, a node return).
#[tokio::test]
async fn a_traversal_from_a_key_no_node_has_answers_no_rows() {
    let t = graph().await;
    let m = Target::main();
    for q in [
        "query q() { match { $p: Person { name: \"zz\" }\n $p knows $f } return { $f.name } }",
        "query q() { match { $p: Person { name: \"zz\" }\n $f knows $p } return { $f.name, $p.age } }",
        "query q() { match { $p: Person { name: \"zz\" }\n $p knows{1,3} $x } return { $x } }",
        "query q() { match { $p: Person { name: \"zz\" }\n $p $w:knows $f } return { $w.since, $f.name } }",
    ] {
        assert_eq!(rows(&t.g, &m, q, Value::Null).await, Vec::new(), "{q}");
    }
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $p: Person { name: \"zz\" }\n $p knows $f } return { count($f) } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "count(f)"), vec![json!(0)]);
}

#[tokio::test]
async fn aggregates_order_nulls_and_limit() {
    let t = graph().await;
    let m = Target::main();
    let r = rows(&t.g, &m, "query q() { match { $p: Person } return { $p.age as age, count($p) as n } order { n desc, age } }", Value::Null).await;
    assert_eq!(col(&r, "age"), vec![json!(40), Value::Null, json!(30)]);
    assert_eq!(col(&r, "n"), vec![json!(2), json!(1), json!(1)]);
    let r = rows(&t.g, &m, "query q() { match { $p: Person } return { sum($p.age) as s, avg($p.age) as a, min($p.name) as lo, max($p.age) as hi } }", Value::Null).await;
    assert_eq!(r[0]["s"], json!(110));
    assert!((r[0]["a"].as_f64().unwrap() - 110.0 / 3.0).abs() < 1e-9);
    assert_eq!(
        (r[0]["lo"].clone(), r[0]["hi"].clone()),
        (json!("a"), json!(40))
    );
    // NULL sorts smallest: first ascending, last descending; ties by id.
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $p: Person } return { $p.name, $p.age } order { $p.age } }",
        Value::Null,
    )
    .await;
    assert_eq!(
        col(&r, "p.name"),
        vec![json!("c"), json!("a"), json!("b"), json!("d")]
    );
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $p: Person } return { $p.name } order { $p.age desc } limit 3 }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "p.name"), vec![json!("b"), json!("d"), json!("a")]);
    // Aggregates over nothing: one row.
    let r = rows(
        &t.g,
        &m,
        "query q() { match { $p: Person { name: \"zz\" } } return { count($p) as n } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "n"), vec![json!(0)]);
}

#[tokio::test]
async fn parameters_and_optional_filters() {
    let t = graph().await;
    let q = "query q($min: I32?, $names: [String]?) { match { $p: Person\n $p.age >= $min } return { $p.name } order { $p.name } }";
    let r = rows(&t.g, &Target::main(), q, json!({"min": 35})).await;
    assert_eq!(col(&r, "p.name"), vec![json!("b"), json!("d")]);
    // An absent optional parameter drops its filter.
    let r = rows(&t.g, &Target::main(), q, json!({})).await;
    assert_eq!(r.len(), 4);
    let q =
        "query q($n: String) { match { $p: Person\n $p.name starts_with $n } return { $p.name } }";
    let r = rows(&t.g, &Target::main(), q, json!({"n": "c"})).await;
    assert_eq!(col(&r, "p.name"), vec![json!("c")]);
}

#[tokio::test]
async fn reads_are_scoped_to_a_branch_commit_or_version() {
    let t = graph().await;
    let first = t.g.snapshot(&Target::main()).await.unwrap();
    t.g.branch_create("f", "main").await.unwrap();
    t.g.load(
        "f",
        "{\"type\":\"Person\",\"data\":{\"name\":\"e\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    t.g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"z\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    let q = "query q() { match { $p: Person } return { count($p) as n } }";
    let n = |r: Vec<serde_json::Map<String, Value>>| r[0]["n"].clone();
    assert_eq!(
        n(rows(&t.g, &Target::main(), q, Value::Null).await),
        json!(5)
    );
    assert_eq!(
        n(rows(&t.g, &Target::Branch("f".into()), q, Value::Null).await),
        json!(5)
    );
    assert_eq!(
        n(rows(
            &t.g,
            &Target::Commit(first.head_commit.clone()),
            q,
            Value::Null
        )
        .await),
        json!(4)
    );
    let at =
        t.g.run_query_at(first.manifest_version, "main", q, "q", &Value::Null)
            .await
            .unwrap();
    assert_eq!(at.manifest_version, first.manifest_version);
    assert_eq!(
        omnigraph::exec::output::rows(&at).unwrap()[0]["n"],
        json!(4)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_reads_one_snapshot_while_a_writer_commits() {
    let t = graph().await;
    let base =
        t.g.snapshot(&Target::main())
            .await
            .unwrap()
            .manifest_version;
    let writer = {
        let g = t.g.clone();
        tokio::spawn(async move {
            for i in 0..15 {
                g.load(
                    "main",
                    &format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"w{i}\"}}}}"),
                    LoadMode::Append,
                )
                .await
                .unwrap();
            }
        })
    };
    // Every commit adds exactly one Person, so a consistent snapshot at
    // graph version v has 4 + (v - base) of them.
    let q = "query q() { match { $p: Person\n $p.name != \"nobody\" } return { count($p) as n } }";
    // Snapshots never go back in time, and the last one sees every write.
    let mut last = base;
    loop {
        let done = writer.is_finished();
        let r =
            t.g.query(&Target::main(), q, "q", &Value::Null)
                .await
                .unwrap();
        let n = omnigraph::exec::output::rows(&r).unwrap()[0]["n"]
            .as_i64()
            .unwrap();
        assert_eq!(
            n as u64,
            4 + (r.manifest_version - base),
            "count does not match its snapshot"
        );
        assert!(
            r.manifest_version >= last,
            "a later query read an older snapshot"
        );
        last = r.manifest_version;
        if done {
            break;
        }
    }
    writer.await.unwrap();
    assert_eq!(
        last,
        base + 15,
        "the query after the writer finished missed writes"
    );
}

#[tokio::test]
async fn the_graph_index_is_built_once_and_shared_across_snapshots() {
    let t = graph().await;
    let q = "query q() { match { $p: Person { name: \"a\" }\n $p knows{1,2} $x } return { count($x) as n } }";
    let builds = |g: &Omnigraph| g.cache_stats()["graph_index_builds"].as_u64().unwrap();
    rows(&t.g, &Target::main(), q, Value::Null).await;
    assert_eq!(builds(&t.g), 1);
    rows(&t.g, &Target::main(), q, Value::Null).await;
    assert_eq!(builds(&t.g), 1, "the second query reuses the index");
    // A branch whose tables are still main's reuses it too.
    t.g.branch_create("f", "main").await.unwrap();
    rows(&t.g, &Target::Branch("f".into()), q, Value::Null).await;
    assert_eq!(builds(&t.g), 1);
    // Only the traversed edge type is indexed (WorksAt is never built).
    assert_eq!(t.g.cache_stats()["graph_index_edges_built"], json!(5));
    // A write to the edge table makes a new physical version: its index
    // is the one built plus the edge appended, not another build.
    let before = rows(&t.g, &Target::main(), q, Value::Null).await;
    t.g.load(
        "main",
        "{\"edge\":\"Knows\",\"from\":\"a\",\"to\":\"d\"}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    let after = rows(&t.g, &Target::main(), q, Value::Null).await;
    assert_eq!(builds(&t.g), 1);
    assert_eq!(t.g.cache_stats()["graph_index_overlays"], json!(1));
    let n = |r: &[serde_json::Map<String, Value>]| r[0]["n"].as_i64().unwrap();
    assert_eq!(n(&after), n(&before) + 1, "{before:?} -> {after:?}");
}

#[tokio::test]
async fn a_first_one_hop_probes_the_edges_and_agrees_with_the_index() {
    let t = graph().await;
    // A self-loop never reaches its own start at one hop.
    t.g.load(
        "main",
        "{\"edge\":\"Knows\",\"from\":\"a\",\"to\":\"a\"}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    let cases = [
        ("$p: Person { name: \"a\" }\n $p knows $x", vec!["b"]),
        ("$p: Person { name: \"a\" }\n $x knows $p", vec!["c"]),
        (
            "$p: Person { name: \"c\" }\n $p <knows> $x",
            vec!["a", "b", "d"],
        ),
        (
            "$p: Person { name: \"c\" }\n $p knows $x\n $x.age > 35",
            vec!["d"],
        ),
        ("$p: Person { name: \"a\" }\n $p knows{1,1} $x", vec!["b"]),
        ("$c: Company\n $x worksAt $c", vec!["a", "d"]),
    ];
    for (pattern, want) in cases {
        let q = format!(
            "query q() {{ match {{ {pattern} }} return {{ $x.name }} order {{ $x.name }} }}"
        );
        // A fresh process: the first traversal probes, the second builds.
        let g = Omnigraph::open(&t.uri()).await.unwrap();
        let probed = col(&rows(&g, &Target::main(), &q, Value::Null).await, "x.name");
        assert_eq!(g.cache_stats()["edge_probes"], json!(1), "{pattern}");
        assert_eq!(g.cache_stats()["graph_index_builds"], json!(0), "{pattern}");
        let indexed = col(&rows(&g, &Target::main(), &q, Value::Null).await, "x.name");
        assert_eq!(g.cache_stats()["graph_index_builds"], json!(1), "{pattern}");
        let want: Vec<Value> = want.into_iter().map(|w| json!(w)).collect();
        assert_eq!(probed, want, "{pattern}");
        assert_eq!(indexed, want, "{pattern}");
    }
}

#[tokio::test]
async fn bad_queries_get_typed_errors() {
    let t = graph().await;
    let m = Target::main();
    let err = |src: &'static str, name: &'static str, params: Value| {
        let g = t.g.clone();
        let m = m.clone();
        async move { g.query(&m, src, name, &params).await.unwrap_err() }
    };
    assert!(matches!(
        err("query q( { }", "q", Value::Null).await,
        OmniError::Parse { line: 1, .. }
    ));
    let code = |e: OmniError| match e {
        OmniError::Type { code, .. } => code,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        code(
            err(
                "query q() { match { $p: Robot } return { $p } }",
                "q",
                Value::Null
            )
            .await
        ),
        "Q001"
    );
    assert_eq!(
        code(
            err(
                "query q() { match { $p: Person } return { $p } }",
                "other",
                Value::Null
            )
            .await
        ),
        "Q016"
    );
    let q = "query q($n: String) { match { $p: Person { name: $n } } return { $p.name } }";
    assert_eq!(code(err(q, "q", json!({})).await), "Q014");
    assert_eq!(code(err(q, "q", json!({"n": 5})).await), "Q012");
    assert_eq!(code(err(q, "q", json!({"n": "a", "x": 1})).await), "Q010");
    let q = "query q() { match { $p: Person } return { $p.name } }";
    assert!(matches!(
        t.g.query(&Target::Branch("nope".into()), q, "q", &Value::Null)
            .await,
        Err(OmniError::NotFound(_))
    ));
    assert!(matches!(
        t.g.query(&Target::Commit("NOPE".into()), q, "q", &Value::Null)
            .await,
        Err(OmniError::NotFound(_))
    ));
    assert!(matches!(
        t.g.run_query_at(999, "main", q, "q", &Value::Null).await,
        Err(OmniError::NotFound(_))
    ));
}

const NAMED: &str = r#"
interface Named { name: String @key }
node Person implements Named { age: I32? }
node Company implements Named { founded: I32? }
node Tag { label: String @key }
edge WorksAt: Person -> Company
"#;

const NAMED_DATA: &str = r#"{"type":"Person","data":{"name":"Ann","age":30}}
{"type":"Person","data":{"name":"Acme","age":5}}
{"type":"Person","data":{"name":"Bo"}}
{"type":"Company","data":{"name":"Acme","founded":1990}}
{"type":"Company","data":{"name":"Zeta"}}
{"type":"Tag","data":{"label":"x"}}
{"edge":"WorksAt","from":"Ann","to":"Acme"}
"#;

/// `$x: Named` binds every node type that implements `Named`: one row per
/// node across the types, the interface's properties usable everywhere, and
/// traversals typed by each concrete type.
#[tokio::test]
async fn an_interface_binds_every_type_that_implements_it() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, NAMED).await.unwrap();
    g.load("main", NAMED_DATA, LoadMode::Overwrite)
        .await
        .unwrap();
    let m = Target::main();
    // Every Person and Company, once each; a keyed id shared by a Person and
    // a Company is two rows.
    let r = rows(
        &g,
        &m,
        "query q() { match { $x: Named } return { $x.name } order { $x.name } }",
        Value::Null,
    )
    .await;
    assert_eq!(
        col(&r, "x.name"),
        vec![
            json!("Acme"),
            json!("Acme"),
            json!("Ann"),
            json!("Bo"),
            json!("Zeta")
        ]
    );
    // Filters, order and limit act on the union.
    let r = rows(
        &g,
        &m,
        "query q() { match { $x: Named\n $x.name starts_with \"A\" } return { $x.name } order { $x.name desc } limit 2 }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "x.name"), vec![json!("Ann"), json!("Acme")]);
    // Aggregates count across the types.
    let r = rows(
        &g,
        &m,
        "query q() { match { $x: Named { name: \"Acme\" } } return { count($x) as n } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "n"), vec![json!(2)]);
    // A traversal only matches the types that are its endpoints.
    let r = rows(
        &g,
        &m,
        "query q() { match { $x: Named\n $x worksAt $c } return { $x.name, $c.name } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "x.name"), vec![json!("Ann")]);
    let r = rows(
        &g,
        &m,
        "query q() { match { $p: Person\n $p worksAt $x\n $x: Named } return { $x.name } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "x.name"), vec![json!("Acme")]);
    // A whole node shows the interface's properties.
    let r = rows(
        &g,
        &m,
        "query q() { match { $x: Named { name: \"Zeta\" } } return { $x } }",
        Value::Null,
    )
    .await;
    assert_eq!(col(&r, "x"), vec![json!({"id": "Zeta", "name": "Zeta"})]);
    // Only the interface's properties are visible through it.
    let e = g
        .query(
            &m,
            "query q() { match { $x: Named } return { $x.age } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap_err();
    match e {
        OmniError::Type {
            code: "Q002",
            message,
            ..
        } => {
            assert!(message.contains("Named has no property 'age'"), "{message}")
        }
        other => panic!("expected Q002, got {other:?}"),
    }
    // No type can match: the traversal's error.
    let e = g
        .query(
            &m,
            "query q() { match { $x: Named\n $c: Tag\n $x worksAt $c } return { $x.name } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::Type { code: "Q004", .. }), "{e:?}");
    // An interface inside not { } is refused, named.
    let e = g
        .query(
            &m,
            "query q() { match { $p: Person\n not { $p worksAt $x\n $x: Named } } return { $p.name } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::Type { code: "Q015", .. }), "{e:?}");
}

/// Every comparison a warm table version evaluates over its cached
/// columns (row by row for a few candidates, with Arrow's kernel over the
/// whole column for many) gives exactly the rows the first, pushed-down
/// scan gave, and the rows a naive evaluation here picks.
#[tokio::test]
async fn filters_on_a_warm_table_agree_with_the_pushed_down_scan_and_a_naive_check() {
    const S: &str = "node R { k: String @key\n i: I32?\n l: I64?\n u: U64?\n e: enum(x, y, z)?\n b: Bool?\n d: Date? }";
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, S).await.unwrap();
    let mut data = String::new();
    // Per row: key, the integer behind i / l / u / d, enum, bool.
    type Row<'a> = (String, Option<i64>, Option<&'a str>, Option<bool>);
    let mut naive: Vec<Row> = Vec::new();
    for n in 0..600 {
        let i = (n % 7 != 3).then_some((n as i64 * 37) % 101 - 50);
        let e = ["x", "y", "z"].get(n % 4).copied();
        let b = (n % 5 != 0).then_some(n % 2 == 0);
        let mut row = json!({ "k": format!("k{n:03}") });
        if let Some(i) = i {
            row["i"] = json!(i);
            row["l"] = json!(i * 1_000_000_007);
            row["u"] = json!(i + 50);
            row["d"] = json!(format!("2020-01-{:02}", i.rem_euclid(28) + 1));
        }
        if let Some(e) = e {
            row["e"] = json!(e);
        }
        if let Some(b) = b {
            row["b"] = json!(b);
        }
        data.push_str(&json!({ "type": "R", "data": row }).to_string());
        data.push('\n');
        naive.push((format!("k{n:03}"), i, e, b));
    }
    g.load("main", &data, LoadMode::Overwrite).await.unwrap();
    let keys = |r: &omnigraph::QueryResult| -> Vec<String> {
        omnigraph::exec::output::rows(r)
            .unwrap()
            .iter()
            .map(|m| m["r.k"].as_str().unwrap().to_string())
            .collect()
    };
    let ops = ["=", "!=", "<", "<=", ">", ">="];
    let accepts = |op: &str, o: std::cmp::Ordering| match op {
        "=" => o.is_eq(),
        "!=" => o.is_ne(),
        "<" => o.is_lt(),
        "<=" => o.is_le(),
        ">" => o.is_gt(),
        _ => o.is_ge(),
    };
    let mut checked = 0;
    for op in ops {
        for (filter, want) in [
            (
                format!("$r.i {op} 7"),
                naive
                    .iter()
                    .filter(|r| r.1.is_some_and(|i| accepts(op, i.cmp(&7))))
                    .map(|r| r.0.clone())
                    .collect::<Vec<_>>(),
            ),
            (
                format!("-3 {op} $r.i"),
                naive
                    .iter()
                    .filter(|r| r.1.is_some_and(|i| accepts(op, (-3i64).cmp(&i))))
                    .map(|r| r.0.clone())
                    .collect(),
            ),
            (
                format!("$r.l {op} 7000000049"),
                naive
                    .iter()
                    .filter(|r| {
                        r.1.is_some_and(|i| accepts(op, (i * 1_000_000_007).cmp(&7_000_000_049)))
                    })
                    .map(|r| r.0.clone())
                    .collect(),
            ),
            (
                format!("$r.u {op} 57"),
                naive
                    .iter()
                    .filter(|r| r.1.is_some_and(|i| accepts(op, (i + 50).cmp(&57))))
                    .map(|r| r.0.clone())
                    .collect(),
            ),
            (
                format!("$r.e {op} \"y\""),
                naive
                    .iter()
                    .filter(|r| r.2.is_some_and(|e| accepts(op, e.cmp("y"))))
                    .map(|r| r.0.clone())
                    .collect(),
            ),
            (
                format!("$r.k {op} \"k300\""),
                naive
                    .iter()
                    .filter(|r| accepts(op, r.0.as_str().cmp("k300")))
                    .map(|r| r.0.clone())
                    .collect(),
            ),
            (
                format!("$r.b {op} true"),
                naive
                    .iter()
                    .filter(|r| r.3.is_some_and(|b| accepts(op, b.cmp(&true))))
                    .map(|r| r.0.clone())
                    .collect(),
            ),
            (
                format!("$r.d {op} date(\"2020-01-15\")"),
                naive
                    .iter()
                    .filter(|r| {
                        r.1.is_some_and(|i| accepts(op, (i.rem_euclid(28) + 1).cmp(&15)))
                    })
                    .map(|r| r.0.clone())
                    .collect(),
            ),
        ] {
            // Booleans compare only for (in)equality.
            if filter.contains("$r.b") && !matches!(op, "=" | "!=") {
                continue;
            }
            let q = format!(
                "query q() {{ match {{ $r: R\n {filter} }} return {{ $r.k }} order {{ $r.k }} }}"
            );
            // A fresh handle: the first scan of the version pushes down.
            let cold = Omnigraph::open_read_only(&uri).await.unwrap();
            let pushed = keys(
                &cold
                    .query(&Target::main(), &q, "q", &Value::Null)
                    .await
                    .unwrap(),
            );
            let warm = keys(
                &cold
                    .query(&Target::main(), &q, "q", &Value::Null)
                    .await
                    .unwrap(),
            );
            assert_eq!(pushed, want, "{filter}: the pushed-down scan");
            assert_eq!(warm, want, "{filter}: the warm table");
            checked += 1;
        }
    }
    assert_eq!(checked, 44);
}

/// A key lookup on a cold type reads just its matching rows: nothing of
/// the type's columns is loaded or cached, and every answer equals the one
/// the whole-column path gives once the type is warm.
#[tokio::test]
async fn a_cold_key_lookup_reads_only_its_rows_and_answers_as_the_warm_path() {
    let t = graph().await;
    let uri = t.uri();
    t.g.clone().close().await;
    let queries: [(&str, Value); 6] = [
        (
            "query q($n: String) { match { $p: Person { name: $n } } return { $p.name, $p.age } }",
            json!({"n": "b"}),
        ),
        (
            "query q($n: String) { match { $p: Person { name: $n } } return { $p } }",
            json!({"n": "a"}),
        ),
        (
            "query q($n: String) { match { $p: Person { name: $n }\n $p.age > 35 } return { $p.name } }",
            json!({"n": "a"}),
        ),
        (
            "query q($n: String) { match { $p: Person { name: $n } } return { count($p) as n, avg($p.age) as a } }",
            json!({"n": "d"}),
        ),
        (
            "query q($n: String) { match { $p: Person { name: $n } } return { $p.name } }",
            json!({"n": "nobody"}),
        ),
        (
            "query q($i: String) { match { $p: Person\n $p.id = $i } return { $p.name, $p.id } }",
            json!({"i": "c"}),
        ),
    ];
    let mut cold = Vec::new();
    for (q, params) in &queries {
        // A fresh process's view: a new read-only handle per query.
        let g = Omnigraph::open_read_only(&uri).await.unwrap();
        cold.push(rows(&g, &Target::main(), q, params.clone()).await);
        let stats = g.cache_stats();
        assert_eq!(stats["column_loads"], 0, "{q}: {stats}");
        assert_eq!(
            stats["bytes"], 0,
            "{q}: nothing of the view is cached: {stats}"
        );
    }
    let g = Omnigraph::open_read_only(&uri).await.unwrap();
    // Warm the type: a scan loads its ids.
    rows(
        &g,
        &Target::main(),
        "query w() { match { $p: Person } return { count($p) } }",
        Value::Null,
    )
    .await;
    for ((q, params), want) in queries.iter().zip(&cold) {
        assert_eq!(
            &rows(&g, &Target::main(), q, params.clone()).await,
            want,
            "{q}"
        );
    }
    assert_eq!(col(&cold[0], "p.age"), vec![json!(40)]);
    assert!(cold[4].is_empty() && cold[2].is_empty());
    assert_eq!(cold[3][0]["n"], json!(1));
}

/// In one process a key lookup reads just its rows from a table version
/// the first time, loads what it reads of the version whole the second
/// time (the workload repeats), and answers from memory after that, the
/// same answer each time; `--profile` says which and why.
#[tokio::test]
async fn a_repeated_key_lookup_loads_its_version_once_then_answers_from_memory() {
    let t = graph().await;
    let uri = t.uri();
    t.g.clone().close().await;
    let g = Omnigraph::open_read_only(&uri).await.unwrap();
    let q = "query q($n: String) { match { $p: Person { name: $n } } return { $p.name, $p.age } }";
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (r, steps) = g
            .query_profiled(&Target::main(), q, "q", &json!({"n": "b"}))
            .await
            .unwrap();
        let uses = steps.last().unwrap().uses.clone();
        seen.push((
            omnigraph::exec::output::rows(&r).unwrap(),
            uses,
            g.cache_stats()["column_loads"].clone(),
        ));
    }
    let first =
        "only the rows needed, from storage (first read of this table version in this process)";
    let second = "read whole and kept (1 earlier query read this table version from storage)";
    let held = "held in memory";
    let on = |what: &str, how: &str| format!("{what}: {how}");
    assert_eq!(seen[0].1, [on("Person ids", first)]);
    assert_eq!(
        seen[1].1,
        [
            on("Person ids", second),
            on("Person.name", second),
            on("Person.age", second)
        ]
    );
    assert_eq!(
        seen[2].1,
        [
            on("Person ids", held),
            on("Person.name", held),
            on("Person.age", held)
        ]
    );
    // Columns loaded: none by the point read, two by the second query, no
    // more by the third.
    let loads: Vec<&Value> = seen.iter().map(|s| &s.2).collect();
    assert_eq!(loads, [&json!(0), &json!(2), &json!(2)]);
    for s in &seen {
        assert_eq!(s.0, seen[0].0);
    }
    assert_eq!(col(&seen[0].0, "p.age"), vec![json!(40)]);
}

/// A group by one string key: short keys (packed as integers), keys of
/// 15, 16 and more bytes, and the null key each form their own group.
#[tokio::test]
async fn a_group_by_a_string_keeps_short_long_and_null_keys_apart() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, "node T { k: String @key\n g: String? }")
        .await
        .unwrap();
    // More short keys than are compared one by one, so the hash map
    // past them is used too.
    let many: Vec<String> = (0..20).map(|i| format!("k{i:02}")).collect();
    let mut groups: Vec<(Option<&str>, usize)> = vec![
        (Some("short"), 2),
        (Some("shorT"), 1),
        (Some("fifteen-chars-x"), 2),
        (Some("sixteen-chars-xx"), 1),
        (Some("a-rather-long-group-name-here"), 3),
        (None, 2),
    ];
    groups.extend(many.iter().map(|k| (Some(k.as_str()), 2)));
    let mut lines = String::new();
    let mut n = 0;
    for &(key, count) in &groups {
        for _ in 0..count {
            let v = key.map_or("null".to_string(), |k| format!("\"{k}\""));
            lines.push_str(&format!(
                "{{\"type\":\"T\",\"data\":{{\"k\":\"t{n}\",\"g\":{v}}}}}\n"
            ));
            n += 1;
        }
    }
    g.load("main", &lines, LoadMode::Overwrite).await.unwrap();
    let r = rows(
        &g,
        &Target::main(),
        "query q() { match { $t: T } return { $t.g, count($t) as n } }",
        Value::Null,
    )
    .await;
    let mut got: Vec<(Value, i64)> = r
        .iter()
        .map(|r| (r["t.g"].clone(), r["n"].as_i64().unwrap()))
        .collect();
    got.sort_by_key(|(k, _)| k.to_string());
    let mut want: Vec<(Value, i64)> = groups
        .iter()
        .map(|(k, c)| (k.map_or(Value::Null, |k| json!(k)), *c as i64))
        .collect();
    want.sort_by_key(|(k, _)| k.to_string());
    assert_eq!(got, want);
}

/// JSON, JSONL, CSV and the table keep the query's `return` order of
/// columns (`columns` lists them in it), not the names' sorted order.
#[tokio::test(flavor = "multi_thread")]
async fn every_output_format_keeps_the_return_order() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let q = "query q() { match { $p: Person { name: \"Alice\" } } return { $p.name, $p.age, $p.email } }";
    let json = cli_ok(&["query", &uri, "q", "-e", q, "--format", "json"]);
    assert!(
        json.contains(
            "\"p.name\": \"Alice\",\n      \"p.age\": 34,\n      \"p.email\": \"alice@x.org\""
        ),
        "{json}"
    );
    let doc: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["columns"], json!(["p.name", "p.age", "p.email"]));
    let jsonl = cli_ok(&["query", &uri, "q", "-e", q, "--format", "jsonl"]);
    assert_eq!(
        jsonl.lines().nth(1),
        Some(r#"{"p.name":"Alice","p.age":34,"p.email":"alice@x.org"}"#),
        "{jsonl}"
    );
    let csv = cli_ok(&["query", &uri, "q", "-e", q, "--format", "csv"]);
    assert_eq!(csv, "p.name,p.age,p.email\nAlice,34,alice@x.org\n");
    let table = cli_ok(&["query", &uri, "q", "-e", q]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["p.name", "p.age", "p.email"], "{table}");
}

/// A reader that stops reading ends the CLI quietly with exit 0, not with a
/// panic in the middle of a print.
#[tokio::test(flavor = "multi_thread")]
async fn a_closed_pipe_ends_the_cli_quietly() {
    let t = loaded_graph().await;
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; '{}' commit list '{}' | true",
            env!("CARGO_BIN_EXE_omnigraph"),
            t.uri()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    assert!(out.status.success(), "{:?}", out.status);
}

/// A handle that knows a branch's head runs a read on it while it asks for
/// the head, and keeps that answer only if the head has not moved: a row
/// another handle (another process) committed since is seen, on local
/// disk and on object storage.
#[tokio::test]
async fn a_read_sees_what_another_handle_committed_since_its_last_read() {
    for place in [Place::local(), Place::s3()] {
        let uri = place.uri("g.omni");
        let a = Omnigraph::init(&uri, SCHEMA).await.unwrap();
        a.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
        let sorted = |mut v: Vec<Value>| {
            v.sort_by_key(|n| n.to_string());
            v
        };
        let mut names = person_names(&a).await;
        let b = Omnigraph::open(&uri).await.unwrap();
        let insert = "query m() { insert Person { name: \"Zed\" } }";
        b.mutate("main", insert, "m", &Value::Null).await.unwrap();
        b.close().await;
        names.push(json!("Zed"));
        assert_eq!(sorted(person_names(&a).await), sorted(names));
    }
}
