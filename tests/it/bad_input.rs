//! Every kind of bad input gets a typed error naming what was wrong, and the
//! graph does not change (its fingerprint: version, heads, contents).

use omnigraph::{LoadMode, OmniError, Omnigraph};

use crate::common::*;

async fn refused(t: &TestGraph, jsonl: &str, mode: LoadMode) -> OmniError {
    let before = Untouched::of(t).await;
    let err = t.g.load("main", jsonl, mode).await.unwrap_err();
    before.check(t, &err).await;
    err
}

fn invalid(err: OmniError) -> omnigraph::error::Location {
    match err {
        OmniError::Invalid { at, .. } => *at,
        other => panic!("expected invalid data, got {other:?}"),
    }
}

#[tokio::test]
async fn malformed_json_names_its_line() {
    let t = loaded_graph().await;
    let at = invalid(
        refused(
            &t,
            "{\"type\":\"Person\",\"data\":{\"name\":\"Z\"}}\n{\"type\": \"Person\", ",
            LoadMode::Append,
        )
        .await,
    );
    assert_eq!(at.line, Some(2));
}

#[tokio::test]
async fn unknown_type_property_and_wrong_value_type() {
    let t = loaded_graph().await;
    let at = invalid(refused(&t, r#"{"type":"Robot","data":{}}"#, LoadMode::Append).await);
    assert_eq!((at.line, at.type_name.as_deref()), (Some(1), Some("Robot")));
    let at = invalid(
        refused(
            &t,
            r#"{"type":"Person","data":{"name":"Z","height":3}}"#,
            LoadMode::Append,
        )
        .await,
    );
    assert_eq!(at.property.as_deref(), Some("height"));
    let at = invalid(
        refused(
            &t,
            r#"{"type":"Person","data":{"name":"Z","age":"old"}}"#,
            LoadMode::Merge,
        )
        .await,
    );
    assert_eq!(
        (at.property.as_deref(), at.value.as_deref()),
        (Some("age"), Some("\"old\""))
    );
}

#[tokio::test]
async fn missing_required_enum_range_and_check_violations() {
    let t = loaded_graph().await;
    let at = invalid(
        refused(
            &t,
            r#"{"type":"Person","data":{"age":3}}"#,
            LoadMode::Append,
        )
        .await,
    );
    assert_eq!(at.property.as_deref(), Some("name"));
    let at = invalid(
        refused(
            &t,
            r#"{"type":"Person","data":{"name":"Z","status":"gone"}}"#,
            LoadMode::Append,
        )
        .await,
    );
    assert_eq!(
        (at.property.as_deref(), at.value.as_deref()),
        (Some("status"), Some("\"gone\""))
    );
    let at = invalid(
        refused(
            &t,
            "\n\n{\"type\":\"Person\",\"data\":{\"name\":\"Z\",\"age\":151}}",
            LoadMode::Append,
        )
        .await,
    );
    assert_eq!(
        (at.line, at.property.as_deref(), at.value.as_deref()),
        (Some(3), Some("age"), Some("151"))
    );
    let at = invalid(
        refused(
            &t,
            r#"{"type":"Person","data":{"name":"Z","email":"nope"}}"#,
            LoadMode::Overwrite,
        )
        .await,
    );
    assert_eq!(at.property.as_deref(), Some("email"));
    let at = invalid(
        refused(
            &t,
            r#"{"type":"Doc","data":{"title":"t","embedding":[1,2]}}"#,
            LoadMode::Append,
        )
        .await,
    );
    assert_eq!(at.property.as_deref(), Some("embedding"));
}

#[tokio::test]
async fn duplicate_key_in_one_file() {
    let t = loaded_graph().await;
    let z = "{\"type\":\"Person\",\"data\":{\"name\":\"Z\"}}\n";
    let y = "{\"type\":\"Person\",\"data\":{\"name\":\"Y\"}}\n";
    let dup = format!("{y}{z}{y}{z}");
    for mode in [LoadMode::Append, LoadMode::Overwrite] {
        let err = refused(&t, &dup, mode).await;
        assert!(
            err.to_string()
                .contains("first at line 1: duplicate id in the input"),
            "{err}"
        );
        let at = invalid(err);
        assert_eq!(
            (at.line, at.property.as_deref(), at.value.as_deref()),
            (Some(3), Some("id"), Some("\"Y\""))
        );
    }
}

#[tokio::test]
async fn edge_to_a_missing_node() {
    let t = loaded_graph().await;
    let at = invalid(refused(&t, "{\"type\":\"Person\",\"data\":{\"name\":\"Z\"}}\n{\"edge\":\"Knows\",\"from\":\"Z\",\"to\":\"Nobody\"}", LoadMode::Append).await);
    assert_eq!(
        (at.line, at.property.as_deref(), at.value.as_deref()),
        (Some(2), Some("to"), Some("\"Nobody\""))
    );
}

#[tokio::test]
async fn append_of_an_existing_id_is_a_key_conflict() {
    let t = loaded_graph().await;
    match refused(
        &t,
        r#"{"type":"Person","data":{"name":"Alice"}}"#,
        LoadMode::Append,
    )
    .await
    {
        OmniError::KeyConflict { type_name, id } => {
            assert_eq!((type_name.as_str(), id.as_str()), ("Person", "Alice"))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn overwrite_that_would_strand_edges_is_refused() {
    let t = loaded_graph().await;
    // Replacing all Persons by Zed alone leaves Knows/WorksAt pointing at removed nodes.
    let err = refused(
        &t,
        r#"{"type":"Person","data":{"name":"Zed"}}"#,
        LoadMode::Overwrite,
    )
    .await;
    assert!(err.to_string().contains("removed node"), "{err}");
}

#[tokio::test]
async fn keyed_write_limits_are_refused_before_any_effect() {
    let t = loaded_graph().await;
    let mut big = String::new();
    for i in 0..8193 {
        big.push_str(&format!(
            "{{\"type\":\"Company\",\"data\":{{\"name\":\"c{i}\"}}}}\n"
        ));
    }
    match refused(&t, &big, LoadMode::Append).await {
        OmniError::ResourceLimitExceeded { limit, .. } => assert!(limit.contains("8192")),
        other => panic!("{other:?}"),
    }
    // Overwrite is not row-capped.
    big.push_str("{\"type\":\"Company\",\"data\":{\"name\":\"Acme\"}}\n");
    t.g.load("main", &big, LoadMode::Overwrite).await.unwrap();
    assert_eq!(count(&t.g, "main", "Company").await, 8194);
}

#[tokio::test]
async fn load_into_a_missing_branch() {
    let t = loaded_graph().await;
    match refused_on(&t, "nope", PEOPLE).await {
        OmniError::NotFound(what) => assert!(what.contains("nope")),
        other => panic!("{other:?}"),
    }
}

async fn refused_on(t: &TestGraph, branch: &str, jsonl: &str) -> OmniError {
    let before = fingerprint(&t.g).await;
    let err = t.g.load(branch, jsonl, LoadMode::Append).await.unwrap_err();
    assert_eq!(before, fingerprint(&t.g).await);
    err
}

#[tokio::test]
async fn init_over_an_existing_graph_and_open_of_a_non_graph() {
    let t = loaded_graph().await;
    let before = fingerprint(&t.g).await;
    assert!(matches!(
        Omnigraph::init(&t.uri(), SCHEMA).await,
        Err(OmniError::AlreadyExists(_))
    ));
    assert_eq!(before, fingerprint(&t.g).await);
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        Omnigraph::open(empty.path().to_str().unwrap()).await,
        Err(OmniError::NotFound(_))
    ));
}

#[tokio::test]
async fn schema_syntax_and_semantic_errors() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g").to_string_lossy().to_string();
    match Omnigraph::init(&uri, "node A {\n  x: Strng\n}").await {
        Err(OmniError::Parse { line, column, .. }) => assert_eq!((line, column), (2, 6)),
        other => panic!("{:?}", other.err()),
    }
    assert!(matches!(
        Omnigraph::init(&uri, "node A { x: I32 }\nedge E: A -> Missing").await,
        Err(OmniError::Schema { .. })
    ));
    // Nothing was created.
    assert!(matches!(
        Omnigraph::open(&uri).await,
        Err(OmniError::NotFound(_))
    ));
}

#[tokio::test]
async fn bad_branch_names_and_deletes() {
    let t = loaded_graph().await;
    t.g.branch_create("feature/x", "main").await.unwrap();
    let before = fingerprint(&t.g).await;
    for bad in [
        "..",
        "../up",
        "/abs",
        "a b",
        "we$ird",
        "feature",
        "feature/x/deeper",
        "x//y",
        "trailing/",
    ] {
        match t.g.branch_create(bad, "main").await {
            Err(OmniError::BadRequest(m)) => assert!(m.contains("invalid branch name"), "{m}"),
            other => panic!("{bad:?}: {:?}", other.map(|b| b.name)),
        }
    }
    assert!(matches!(
        t.g.branch_create("feature/x", "main").await,
        Err(OmniError::AlreadyExists(_))
    ));
    assert!(matches!(
        t.g.branch_create("y", "nope").await,
        Err(OmniError::NotFound(_))
    ));
    assert!(matches!(
        t.g.branch_delete("main").await,
        Err(OmniError::BadRequest(_))
    ));
    assert!(matches!(
        t.g.branch_delete("nope").await,
        Err(OmniError::NotFound(_))
    ));
    assert_eq!(before, fingerprint(&t.g).await);
}

/// The CLI exits 2 for every kind of bad input, data and keys included,
/// and writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_exits_2_for_bad_data_and_a_taken_key() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let before = Untouched::of(&t).await;
    let dir = tempfile::tempdir().unwrap();
    for (what, jsonl, kind) in [
        (
            "a wrong value type",
            r#"{"type":"Person","data":{"name":"Dan","age":"old"}}"#,
            "error[InvalidData]",
        ),
        (
            "an existing key",
            r#"{"type":"Person","data":{"name":"Alice"}}"#,
            "error[KeyConflict]",
        ),
    ] {
        let file = dir.path().join("bad.jsonl");
        std::fs::write(&file, jsonl).unwrap();
        let out = cli(&[
            "load",
            &uri,
            "--data",
            &file.to_string_lossy(),
            "--mode",
            "append",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(kind), "{what}: {stderr}");
        before.check(&t, &what).await;
    }
}
