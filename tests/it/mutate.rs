//! Mutations: semantics with read-your-writes, validation over committed +
//! pending state, conditional writes, limits, concurrency. Every refused
//! mutation leaves the graph exactly as it was.

use omnigraph::{LoadMode, OmniError, Omnigraph, Target};
use serde_json::{Value, json};

use crate::common::*;

const MUTATIONS: &str = r#"
query add($n: String, $age: I32?) { insert Person { name: $n, age: $age } }
query add_two($a: String, $b: String) {
    insert Person { name: $a }
    insert Person { name: $b, age: 5 }
    insert Knows { from: $a, to: $b, since: date("2024-01-02") }
    update Person set { age: 6 } where name = $b
}
query set_age($n: String, $age: I32) { update Person set { age: $age } where name = $n }
query older($min: I32, $age: I32) { update Person set { age: $age } where age >= $min }
query forget($n: String) { delete Person where name = $n }
query hire($p: String, $c: String) { insert WorksAt { from: $p, to: $c, role: "x" } }
query doc($t: String, $id: String) { insert Doc { title: $t, id: $id } }
query rename_key($n: String) { update Person set { name: $n } where name = "Bob" }
query mixed() { insert Company { name: "x" }
    delete Person where name = "Bob" }
"#;

async fn refused(t: &TestGraph, name: &str, params: Value) -> OmniError {
    let before = Untouched::of(t).await;
    let err =
        t.g.mutate("main", MUTATIONS, name, &params)
            .await
            .unwrap_err();
    before.check(t, &err).await;
    err
}

async fn people(g: &Omnigraph) -> Vec<(String, Value)> {
    let r = g
        .query(
            &Target::main(),
            "query q() { match { $p: Person } return { $p.name, $p.age } order { $p.name } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap();
    omnigraph::exec::output::rows(&r)
        .unwrap()
        .into_iter()
        .map(|row| {
            (
                row["p.name"].as_str().unwrap().to_string(),
                row["p.age"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn insert_update_delete_with_read_your_writes() {
    let t = loaded_graph().await;
    let r =
        t.g.mutate("main", MUTATIONS, "add_two", &json!({"a": "Xa", "b": "Xb"}))
            .await
            .unwrap();
    assert_eq!(r.nodes["Person"], 2);
    assert_eq!(r.edges["Knows"], 1);
    // The update saw the pending insert of Xb.
    let p = people(&t.g).await;
    assert!(p.contains(&("Xb".into(), json!(6))));
    assert!(p.contains(&("Xa".into(), Value::Null)));
    assert_eq!(t.g.commits("main", None).await.unwrap()[0].kind, "mutation");
    // A keyed insert is an upsert.
    t.g.mutate("main", MUTATIONS, "add", &json!({"n": "Bob", "age": 77}))
        .await
        .unwrap();
    assert!(people(&t.g).await.contains(&("Bob".into(), json!(77))));
    // Update by predicate.
    t.g.mutate("main", MUTATIONS, "older", &json!({"min": 70, "age": 1}))
        .await
        .unwrap();
    assert!(people(&t.g).await.contains(&("Bob".into(), json!(1))));
    // Delete takes the node's incident edges with it.
    let knows_before = count(&t.g, "main", "Knows").await;
    let r =
        t.g.mutate("main", MUTATIONS, "forget", &json!({"n": "Bob"}))
            .await
            .unwrap();
    assert_eq!(r.nodes["Person"], 1);
    assert_eq!(r.edges["Knows"], 2); // Alice -> Bob, Bob -> Carol
    assert_eq!(count(&t.g, "main", "Knows").await, knows_before - 2);
    // Deleting nothing is still a (trivially empty) commit: the head moves
    // to it, and the data stays.
    let state_before = state(&t.g).await;
    let head_before = t.g.commits("main", Some(1)).await.unwrap()[0].id.clone();
    let r =
        t.g.mutate("main", MUTATIONS, "forget", &json!({"n": "Nobody"}))
            .await
            .unwrap();
    assert!(r.nodes.is_empty() && r.edges.is_empty());
    let log = t.g.commits("main", Some(2)).await.unwrap();
    assert_eq!(log[0].id, r.commit);
    assert_eq!(log[0].parents, vec![head_before.clone()]);
    assert_eq!(log[1].id, head_before);
    assert_eq!(
        state_before.replace(&head_before, &r.commit),
        state(&t.g).await
    );
}

#[tokio::test]
async fn a_handle_acting_for_someone_records_them_as_the_author() {
    let t = loaded_graph().await;
    let own =
        t.g.mutate("main", MUTATIONS, "add", &json!({"n": "Own"}))
            .await
            .unwrap();
    let alice = t.g.acting_as("alice");
    let theirs = alice
        .mutate("main", MUTATIONS, "add", &json!({"n": "Theirs"}))
        .await
        .unwrap();
    assert_eq!(t.g.commit(&theirs.commit).await.unwrap().actor, "alice");
    // The handle it came from still writes as itself.
    let own_actor = t.g.commit(&own.commit).await.unwrap().actor;
    assert_ne!(own_actor, "alice");
    let after =
        t.g.mutate("main", MUTATIONS, "add", &json!({"n": "After"}))
            .await
            .unwrap();
    assert_eq!(t.g.commit(&after.commit).await.unwrap().actor, own_actor);
    // Both share one graph: each sees the other's writes at once.
    let names: Vec<String> = people(&alice).await.into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"After".to_string()), "{names:?}");
}

#[tokio::test]
async fn constraint_violations_are_refused_and_change_nothing() {
    let t = loaded_graph().await;
    // Mixed constructive and destructive statements: the exact message.
    match refused(&t, "mixed", Value::Null).await {
        OmniError::BadRequest(m) => assert!(
            m.contains("mutation 'mixed' mixes inserts/updates and deletes; split into separate mutations: (1) inserts and updates, then (2) deletes"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    // @range, wrong parameter type, missing required parameter.
    assert!(matches!(
        refused(&t, "add", json!({"n": "Z", "age": 200})).await,
        OmniError::Invalid { .. }
    ));
    assert!(matches!(
        refused(&t, "add", json!({"n": 3})).await,
        OmniError::Type { code: "Q012", .. }
    ));
    assert!(matches!(
        refused(&t, "add", json!({})).await,
        OmniError::Type { code: "Q014", .. }
    ));
    // Key properties cannot be updated.
    assert!(matches!(
        refused(&t, "rename_key", json!({"n": "Robert"})).await,
        OmniError::Type { code: "Q022", .. }
    ));
    // Edge to a missing node.
    match refused(&t, "hire", json!({"p": "Alice", "c": "Nowhere"})).await {
        OmniError::Invalid { at, .. } => assert_eq!(at.property.as_deref(), Some("to")),
        other => panic!("{other:?}"),
    }
    // @card(0..1): Alice already works at Acme.
    t.g.load(
        "main",
        "{\"type\":\"Company\",\"data\":{\"name\":\"Other\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    match refused(&t, "hire", json!({"p": "Alice", "c": "Other"})).await {
        OmniError::Invalid { message, .. } => assert!(message.contains("@card"), "{message}"),
        other => panic!("{other:?}"),
    }
    // @unique against what is committed.
    let q = "query q($n: String, $e: String) { insert Person { name: $n, email: $e } }";
    let before = fingerprint(&t.g).await;
    match t
        .g
        .mutate("main", q, "q", &json!({"n": "Zed", "e": "alice@x.org"}))
        .await
        .unwrap_err()
    {
        OmniError::Invalid { message, .. } => {
            assert!(message.contains("@unique"), "{message}");
            // It names the committed row and the written one.
            assert!(
                message.contains("\"Alice\"") && message.contains("\"Zed\""),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(before, fingerprint(&t.g).await);
    // A row that keeps its own value does not clash with itself.
    t.g.mutate(
        "main",
        "query q() { update Person set { email: \"alice@x.org\", age: 35 } where name = \"Alice\" }",
        "q",
        &Value::Null,
    )
    .await
    .unwrap();
    // Strict insert of an existing generated-id row: KeyConflict.
    t.g.mutate("main", MUTATIONS, "doc", &json!({"t": "a", "id": "D1"}))
        .await
        .unwrap();
    match refused(&t, "doc", json!({"t": "b", "id": "D1"})).await {
        OmniError::KeyConflict { type_name, id } => {
            assert_eq!((type_name.as_str(), id.as_str()), ("Doc", "D1"))
        }
        other => panic!("{other:?}"),
    }
    // Unknown types and properties, and a missing branch.
    let before = fingerprint(&t.g).await;
    let e =
        t.g.mutate(
            "main",
            "query q() { insert Robot { name: \"r\" } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::Type { code: "Q001", .. }));
    let e =
        t.g.mutate(
            "main",
            "query q() { insert Person { name: \"r\", height: 2 } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, OmniError::Type { code: "Q002", .. }));
    let e =
        t.g.mutate("nope", MUTATIONS, "add", &json!({"n": "Z"}))
            .await
            .unwrap_err();
    assert!(matches!(e, OmniError::NotFound(_)));
    assert_eq!(before, fingerprint(&t.g).await);
}

#[tokio::test]
async fn conditional_writes_are_a_compare_and_swap_on_the_head() {
    let t = loaded_graph().await;
    let head = t.g.snapshot(&Target::main()).await.unwrap().head_commit;
    let r =
        t.g.mutate_if(
            "main",
            MUTATIONS,
            "set_age",
            &json!({"n": "Bob", "age": 50}),
            Some(&head),
        )
        .await
        .unwrap();
    // The same precondition is now stale.
    let before = fingerprint(&t.g).await;
    match t
        .g
        .mutate_if(
            "main",
            MUTATIONS,
            "set_age",
            &json!({"n": "Bob", "age": 51}),
            Some(&head),
        )
        .await
    {
        Err(OmniError::PreconditionFailed { expected, actual }) => {
            assert_eq!(expected, head);
            assert_eq!(actual, r.commit);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(before, fingerprint(&t.g).await);
}

#[tokio::test]
async fn an_update_streams_against_the_row_budget() {
    let t = new_graph().await;
    let mut big = String::new();
    for i in 0..8200 {
        big.push_str(&format!(
            "{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":10}}}}\n"
        ));
    }
    t.g.load("main", &big, LoadMode::Overwrite).await.unwrap();
    let before = fingerprint(&t.g).await;
    match t
        .g
        .mutate("main", MUTATIONS, "older", &json!({"min": 5, "age": 11}))
        .await
    {
        Err(OmniError::ResourceLimitExceeded { limit, .. }) => assert!(limit.contains("8192")),
        other => panic!("{other:?}"),
    }
    assert_eq!(before, fingerprint(&t.g).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_mutations_of_distinct_keys_all_land() {
    let t = loaded_graph().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let g = t.g.clone();
        tasks.push(tokio::spawn(async move {
            g.mutate("main", MUTATIONS, "add", &json!({"n": format!("m{i}")}))
                .await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(count(&t.g, "main", "Person").await, 3 + 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_racing_inserts_is_never_lost() {
    for round in 0..4 {
        let t = loaded_graph().await;
        let mut tasks = Vec::new();
        for i in 0..6 {
            let g = t.g.clone();
            tasks.push(tokio::spawn(async move {
                g.mutate("main", MUTATIONS, "add", &json!({"n": format!("r{i}")}))
                    .await
                    .map(|_| ())
            }));
        }
        let g = t.g.clone();
        let update = tokio::spawn(async move {
            g.mutate(
                "main",
                MUTATIONS,
                "set_age",
                &json!({"n": "Carol", "age": 99 + round}),
            )
            .await
        });
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        // A refused update changed nothing; retried, as a caller does, it
        // lands. Either way Carol ends with the new age.
        let params = json!({"n": "Carol", "age": 99 + round});
        match update.await.unwrap() {
            Ok(_) => {}
            Err(OmniError::ReadSetChanged) => {
                assert!(people(&t.g).await.contains(&("Carol".into(), Value::Null)));
                t.g.mutate("main", MUTATIONS, "set_age", &params)
                    .await
                    .unwrap();
            }
            Err(other) => panic!("{other:?}"),
        }
        let p = people(&t.g).await;
        assert!(p.contains(&("Carol".into(), json!(99 + round))), "{p:?}");
        assert_eq!(p.len(), 3 + 6, "every insert landed");
    }
}

/// A mutation's filter is typed as the same filter in a read query, and a
/// parameter declared twice is refused: both before anything runs.
#[tokio::test]
async fn mutation_filters_and_parameters_follow_the_read_rules() {
    let t = loaded_graph().await;
    let before = fingerprint(&t.g).await;
    let typed = |src: &'static str, params: Value| {
        let g = t.g.clone();
        async move { g.mutate("main", src, "q", &params).await.unwrap_err() }
    };
    for src in [
        r#"query q() { update Person set { email: "z@z" } where age = "old" }"#,
        r#"query q() { delete Person where name > 3 }"#,
        r#"query q() { delete Knows where since = "not a date" }"#,
    ] {
        match typed(src, Value::Null).await {
            OmniError::Type { code: "Q009", .. } => {}
            other => panic!("{src}: expected Q009, got {other:?}"),
        }
    }
    match typed(
        "query q($n: String, $n: I32) { insert Person { name: $n } }",
        json!({"n": "Zed"}),
    )
    .await
    {
        OmniError::Type {
            code: "Q010",
            message,
            ..
        } => {
            assert!(message.contains("declared twice"), "{message}")
        }
        other => panic!("expected Q010, got {other:?}"),
    }
    assert_eq!(before, fingerprint(&t.g).await);
    // A date string in a filter is a date, as in reads.
    let r =
        t.g.mutate(
            "main",
            r#"query q() { delete Knows where since = "2020-01-01" }"#,
            "q",
            &Value::Null,
        )
        .await
        .unwrap();
    assert_eq!(r.edges.get("Knows"), Some(&1));
}

/// Reads and mutations compare through one function: a list equals a list
/// constant with the same items, in both.
#[tokio::test]
async fn lists_compare_by_content_in_reads_and_mutations() {
    let t = loaded_graph().await;
    let r =
        t.g.query(
            &Target::main(),
            "query q() { match { $p: Person\n $p.tags = [\"a\", \"b\"] } return { $p.name } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 1);
    let u =
        t.g.mutate(
            "main",
            r#"query q() { update Person set { age: 35 } where tags = ["a", "b"] }"#,
            "q",
            &Value::Null,
        )
        .await
        .unwrap();
    assert_eq!(u.nodes.get("Person"), Some(&1));
    let u =
        t.g.mutate(
            "main",
            r#"query q() { update Person set { age: 36 } where tags = ["b", "a"] }"#,
            "q",
            &Value::Null,
        )
        .await
        .unwrap();
    assert_eq!(u.nodes.get("Person"), None);
    let ages: Vec<(String, Value)> = people(&t.g).await;
    assert!(ages.contains(&("Alice".to_string(), json!(35))), "{ages:?}");
}

/// An insert derives a keyed row's id as a load does: an id given beside
/// the key must be the derived one.
#[tokio::test]
async fn an_insert_with_an_id_contradicting_its_key_is_refused() {
    let t = loaded_graph().await;
    let before = fingerprint(&t.g).await;
    let q = "query q($n: String, $id: String) { insert Person { name: $n, id: $id } }";
    match t
        .g
        .mutate("main", q, "q", &json!({"n": "Zed", "id": "zed"}))
        .await
        .unwrap_err()
    {
        OmniError::Invalid { at, message } => {
            assert_eq!(at.type_name.as_deref(), Some("Person"));
            assert_eq!(at.property.as_deref(), Some("id"));
            assert_eq!(at.value.as_deref(), Some("\"zed\""));
            assert!(
                message.contains("\"Zed\" derived from the key"),
                "{message}"
            );
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(before, fingerprint(&t.g).await);
    // The matching id is fine.
    t.g.mutate("main", q, "q", &json!({"n": "Zed", "id": "Zed"}))
        .await
        .unwrap();
}
