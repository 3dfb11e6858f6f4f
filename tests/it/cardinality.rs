//! The one `@card` rule through every write: load (each mode), mutation,
//! branch merge and schema apply count every source node, those with no
//! edges included, and a refused write leaves the graph as it was.

use omnigraph::error::Location;
use omnigraph::{LoadMode, MergeOutcome, OmniError, Omnigraph};
use serde_json::Value;

use crate::common::fingerprint;

const SCHEMA: &str = r#"
node Person { name: String @key }
node Team { name: String @key }
edge MemberOf: Person -> Team @card(1..2)
"#;

/// Ann is in Red (m1) and Blue (m4); Ben in Red (m2).
const TEAMS: &str = r#"{"type":"Person","data":{"name":"Ann"}}
{"type":"Person","data":{"name":"Ben"}}
{"type":"Team","data":{"name":"Red"}}
{"type":"Team","data":{"name":"Blue"}}
{"edge":"MemberOf","from":"Ann","to":"Red","data":{"id":"m1"}}
{"edge":"MemberOf","from":"Ben","to":"Red","data":{"id":"m2"}}
{"edge":"MemberOf","from":"Ann","to":"Blue","data":{"id":"m4"}}
"#;

async fn graph(schema: &str) -> (tempfile::TempDir, Omnigraph) {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, schema).await.unwrap();
    g.load("main", TEAMS, LoadMode::Overwrite).await.unwrap();
    (dir, g)
}

/// A write refused as `InvalidData` on `MemberOf`'s source `who`, with the
/// graph unchanged; returns the location and message.
async fn refused<F, Fut, T>(g: &Omnigraph, who: &str, write: F) -> (Location, String)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = omnigraph::Result<T>>,
    T: std::fmt::Debug,
{
    refused_by("@card(1..2)", g, who, write).await
}

/// `write` is refused for `who`'s count of MemberOf edges outside `card`,
/// and the graph is as it was.
async fn refused_by<F, Fut, T>(card: &str, g: &Omnigraph, who: &str, write: F) -> (Location, String)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = omnigraph::Result<T>>,
    T: std::fmt::Debug,
{
    let before = fingerprint(g).await;
    let e = write().await.expect_err("the write should be refused");
    assert_eq!(
        fingerprint(g).await,
        before,
        "a refused write changed the graph"
    );
    match e {
        OmniError::Invalid { at, message } => {
            assert_eq!(at.type_name.as_deref(), Some("MemberOf"), "{message}");
            assert_eq!(at.property.as_deref(), Some("from"), "{message}");
            assert_eq!(at.value, Some(format!("{who:?}")), "{message}");
            assert!(message.contains(&format!("{card} violated")), "{message}");
            (*at, message)
        }
        other => panic!("expected InvalidData, got {other:?}"),
    }
}

async fn mutate(g: &Omnigraph, branch: &str, body: &str) -> omnigraph::Result<()> {
    let src = format!("query m() {{ {body} }}");
    g.mutate(branch, &src, "m", &Value::Null).await.map(|_| ())
}

#[tokio::test]
async fn a_load_counts_every_source_node_in_every_mode() {
    let (_d, g) = graph(SCHEMA).await;
    let cid = "{\"type\":\"Person\",\"data\":{\"name\":\"Cid\"}}\n";
    for mode in [LoadMode::Append, LoadMode::Merge] {
        // A new source node without an edge, named at its own line.
        let (at, message) = refused(&g, "Cid", || g.load("main", cid, mode)).await;
        assert_eq!(at.line, Some(1));
        assert!(message.contains("would have 0 MemberOf edges"), "{message}");
    }
    // Overwriting the edges strands a node the file gives none (Ann: the
    // graph holds her, so no line names her).
    let only_ben = "{\"edge\":\"MemberOf\",\"from\":\"Ben\",\"to\":\"Red\"}\n";
    let (at, _) = refused(&g, "Ann", || g.load("main", only_ben, LoadMode::Overwrite)).await;
    assert_eq!(at.line, None);
    // Overwriting the nodes: the new one needs an edge (the graph's stay).
    let people = "{\"type\":\"Person\",\"data\":{\"name\":\"Ann\"}}\n{\"type\":\"Person\",\"data\":{\"name\":\"Ben\"}}\n";
    let with_cid = format!("{people}{cid}");
    let (at, _) = refused(&g, "Cid", || g.load("main", &with_cid, LoadMode::Overwrite)).await;
    assert_eq!(at.line, Some(3));
    // The maximum over what the graph keeps plus the file.
    let third = "{\"type\":\"Team\",\"data\":{\"name\":\"Gold\"}}\n{\"edge\":\"MemberOf\",\"from\":\"Ann\",\"to\":\"Gold\"}\n";
    let (at, message) = refused(&g, "Ann", || g.load("main", third, LoadMode::Append)).await;
    assert_eq!(at.line, Some(2));
    assert!(message.contains("would have 3 MemberOf edges"), "{message}");
    // Each is accepted once the rule holds: a node with its edge, the
    // edges overwritten with one for each node, a move that leaves one.
    let with_edge = format!("{cid}{{\"edge\":\"MemberOf\",\"from\":\"Cid\",\"to\":\"Blue\"}}\n");
    g.load("main", &with_edge, LoadMode::Append).await.unwrap();
    let each = "{\"edge\":\"MemberOf\",\"from\":\"Ann\",\"to\":\"Red\",\"data\":{\"id\":\"m1\"}}\n{\"edge\":\"MemberOf\",\"from\":\"Ben\",\"to\":\"Red\",\"data\":{\"id\":\"m2\"}}\n{\"edge\":\"MemberOf\",\"from\":\"Cid\",\"to\":\"Red\",\"data\":{\"id\":\"m3\"}}\n{\"edge\":\"MemberOf\",\"from\":\"Ann\",\"to\":\"Blue\",\"data\":{\"id\":\"m4\"}}\n";
    g.load("main", each, LoadMode::Overwrite).await.unwrap();
    // A merge-mode edge moving `from` away from Ben leaves him none.
    let moved =
        "{\"edge\":\"MemberOf\",\"from\":\"Cid\",\"to\":\"Blue\",\"data\":{\"id\":\"m2\"}}\n";
    refused(&g, "Ben", || g.load("main", moved, LoadMode::Merge)).await;
    let m4_to_ben =
        "{\"edge\":\"MemberOf\",\"from\":\"Ben\",\"to\":\"Blue\",\"data\":{\"id\":\"m4\"}}\n";
    g.load("main", m4_to_ben, LoadMode::Merge).await.unwrap();
}

#[tokio::test]
async fn a_mutation_counts_every_source_node() {
    let (_d, g) = graph(SCHEMA).await;
    // A source node alone, then with its edge in the same mutation.
    refused(&g, "Cid", || {
        mutate(&g, "main", "insert Person { name: \"Cid\" }")
    })
    .await;
    mutate(
        &g,
        "main",
        "insert Person { name: \"Cid\" }\ninsert MemberOf { from: \"Cid\", to: \"Red\" }",
    )
    .await
    .unwrap();
    // Ben's only edge, directly and through deleting its target.
    refused(&g, "Ben", || {
        mutate(&g, "main", "delete MemberOf where id = \"m2\"")
    })
    .await;
    refused(&g, "Ben", || {
        mutate(&g, "main", "delete Team where name = \"Red\"")
    })
    .await;
    // Ann keeps one of her two; a deleted source needs none.
    mutate(&g, "main", "delete MemberOf where id = \"m4\"")
        .await
        .unwrap();
    mutate(&g, "main", "delete Person where name = \"Ben\"")
        .await
        .unwrap();
}

#[tokio::test]
async fn a_merge_counts_the_merged_image() {
    let (_d, g) = graph(SCHEMA).await;
    // Both sides take one of Ann's two memberships away, each leaving one.
    g.branch_create("x", "main").await.unwrap();
    mutate(&g, "x", "delete MemberOf where id = \"m1\"")
        .await
        .unwrap();
    mutate(&g, "main", "delete MemberOf where id = \"m4\"")
        .await
        .unwrap();
    let conflicts = |r: omnigraph::Result<MergeOutcome>| match r {
        Err(OmniError::MergeConflicts(c)) => c
            .into_iter()
            .map(|c| (format!("{:?}", c.kind), c.type_name, c.id))
            .collect::<Vec<_>>(),
        other => panic!("expected conflicts, got {other:?}"),
    };
    let before = fingerprint(&g).await;
    let card = ("CardinalityViolation".to_string(), "MemberOf".to_string());
    let found = conflicts(g.merge("x", "main").await);
    assert_eq!(
        found,
        vec![(card.0.clone(), card.1.clone(), "Ann".to_string())]
    );
    assert_eq!(fingerprint(&g).await, before);

    // A move of an edge's `from` on one side and a deletion on the other.
    let (_d, g) = graph(SCHEMA).await;
    g.branch_create("x", "main").await.unwrap();
    let m1_to_ben =
        "{\"edge\":\"MemberOf\",\"from\":\"Ben\",\"to\":\"Blue\",\"data\":{\"id\":\"m1\"}}\n";
    g.load("x", m1_to_ben, LoadMode::Merge).await.unwrap();
    mutate(&g, "main", "delete MemberOf where id = \"m4\"")
        .await
        .unwrap();
    let before = fingerprint(&g).await;
    let found = conflicts(g.merge("x", "main").await);
    assert_eq!(found, vec![(card.0, card.1, "Ann".to_string())]);
    assert_eq!(fingerprint(&g).await, before);

    // A new source node with its edge, beside a change on the target.
    let (_d, g) = graph(SCHEMA).await;
    g.branch_create("x", "main").await.unwrap();
    mutate(
        &g,
        "x",
        "insert Person { name: \"Cid\" }\ninsert MemberOf { from: \"Cid\", to: \"Red\" }",
    )
    .await
    .unwrap();
    mutate(&g, "main", "delete MemberOf where id = \"m4\"")
        .await
        .unwrap();
    g.merge("x", "main").await.unwrap();
}

#[tokio::test]
async fn a_tightened_card_counts_nodes_without_edges_on_every_branch() {
    let loose = SCHEMA.replace(" @card(1..2)", "");
    let (_d, g) = graph(&loose).await;
    g.branch_create("dev", "main").await.unwrap();
    // Zed has no edges, on `dev` only (main shares MemberOf with it).
    mutate(&g, "dev", "insert Person { name: \"Zed\" }")
        .await
        .unwrap();
    let before = fingerprint(&g).await;
    let e = g.apply_schema(SCHEMA).await.unwrap_err();
    assert_eq!(e.kind(), "InvalidData", "{e}");
    assert!(
        e.to_string()
            .contains("the source \"Zed\" (branch dev) has 0 MemberOf edges, outside @card(1..2)"),
        "{e}"
    );
    assert_eq!(fingerprint(&g).await, before);
    let zed_in_red =
        "{\"edge\":\"MemberOf\",\"from\":\"Zed\",\"to\":\"Red\",\"data\":{\"id\":\"z1\"}}\n";
    g.load("dev", zed_in_red, LoadMode::Append).await.unwrap();
    g.apply_schema(SCHEMA).await.unwrap();
    // Now every write holds it on dev too.
    refused(&g, "Zed", || {
        mutate(&g, "dev", "delete MemberOf where id = \"z1\"")
    })
    .await;
}

/// A minimum with no maximum, `@card(1..)`, through every write: a
/// source node needs one edge and may have any number.
#[tokio::test]
async fn a_minimum_without_a_maximum_holds_through_every_write() {
    let open = SCHEMA.replace("@card(1..2)", "@card(1..)");
    let (_d, g) = graph(&open).await;
    let card = "@card(1..*)";
    let cid = "{\"type\":\"Person\",\"data\":{\"name\":\"Cid\"}}\n";
    for mode in [LoadMode::Append, LoadMode::Merge] {
        refused_by(card, &g, "Cid", || g.load("main", cid, mode)).await;
    }
    let only_ben = "{\"edge\":\"MemberOf\",\"from\":\"Ben\",\"to\":\"Red\"}\n";
    refused_by(card, &g, "Ann", || {
        g.load("main", only_ben, LoadMode::Overwrite)
    })
    .await;
    // Any number is allowed: Ann in a third and a fourth team.
    let more = "{\"type\":\"Team\",\"data\":{\"name\":\"Gold\"}}\n{\"type\":\"Team\",\"data\":{\"name\":\"Jade\"}}\n{\"edge\":\"MemberOf\",\"from\":\"Ann\",\"to\":\"Gold\"}\n{\"edge\":\"MemberOf\",\"from\":\"Ann\",\"to\":\"Jade\"}\n";
    g.load("main", more, LoadMode::Append).await.unwrap();
    // A mutation: a node alone, an only edge deleted.
    refused_by(card, &g, "Cid", || {
        mutate(&g, "main", "insert Person { name: \"Cid\" }")
    })
    .await;
    refused_by(card, &g, "Ben", || {
        mutate(&g, "main", "delete MemberOf where id = \"m2\"")
    })
    .await;
    // A merge: each side takes one of Ann's two first teams away; with
    // Gold and Jade she keeps two, so the merge stands. Without them (a
    // graph of its own) the merged image leaves her none.
    g.branch_create("x", "main").await.unwrap();
    mutate(&g, "x", "delete MemberOf where id = \"m1\"")
        .await
        .unwrap();
    mutate(&g, "main", "delete MemberOf where id = \"m4\"")
        .await
        .unwrap();
    g.merge("x", "main").await.unwrap();
    let (_d3, g3) = graph(&open).await;
    g3.branch_create("x", "main").await.unwrap();
    mutate(&g3, "x", "delete MemberOf where id = \"m1\"")
        .await
        .unwrap();
    mutate(&g3, "main", "delete MemberOf where id = \"m4\"")
        .await
        .unwrap();
    let before = fingerprint(&g3).await;
    match g3.merge("x", "main").await {
        Err(OmniError::MergeConflicts(c)) => {
            let found: Vec<(String, String, String)> = c
                .into_iter()
                .map(|c| (format!("{:?}", c.kind), c.type_name, c.id))
                .collect();
            assert_eq!(
                found,
                [(
                    "CardinalityViolation".to_string(),
                    "MemberOf".to_string(),
                    "Ann".to_string()
                )]
            );
        }
        other => panic!("expected conflicts, got {other:?}"),
    }
    assert_eq!(fingerprint(&g3).await, before);
    // A schema apply from no rule to this one: refused while a source has
    // no edge, on any branch.
    let loose = SCHEMA.replace(" @card(1..2)", "");
    let (_d2, g2) = graph(&loose).await;
    g2.branch_create("dev", "main").await.unwrap();
    mutate(&g2, "dev", "insert Person { name: \"Zed\" }")
        .await
        .unwrap();
    let before = fingerprint(&g2).await;
    let e = g2.apply_schema(&open).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("the source \"Zed\" (branch dev) has 0 MemberOf edges, outside @card(1..*)"),
        "{e}"
    );
    assert_eq!(fingerprint(&g2).await, before);
}
