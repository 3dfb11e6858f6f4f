//! Group commit: mutations queued on one branch of one handle commit
//! together, each caller keeping its own answer (its place in the shared
//! commit, its own counts, its own error), and `commit changes` names the
//! mutation that wrote each row. Commits on the branch are held until every
//! write of a test is queued, so each group is what the test says.

use std::collections::BTreeMap;

use futures::future::join_all;
use omnigraph::{LoadMode, LoadReport, MutationResult, OmniError, Omnigraph, Target};
use serde_json::{Value, json};

use crate::common::*;

const M: &str = r#"
query add($n: String) { insert Person { name: $n } }
query add_mail($n: String, $e: String) { insert Person { name: $n, email: $e } }
query add_two($a: String, $b: String) {
    insert Person { name: $a }
    insert Person { name: $b, age: 5 }
    insert Knows { from: $a, to: $b }
    update Person set { age: 6 } where name = $b
}
query hire($p: String, $c: String) { insert WorksAt { from: $p, to: $c } }
query forget($n: String) { delete Person where name = $n }
query older($min: I32, $age: I32) { update Person set { age: $age } where age >= $min }
query younger($max: I32, $age: I32) { update Person set { age: $age } where age < $max }
"#;

/// Run `writes` on main with the branch's commits held until every one of
/// them is queued.
async fn gathered<F: std::future::Future>(
    g: &Omnigraph,
    writes: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let writes: Vec<F> = writes.into_iter().collect();
    let n = writes.len();
    let hold = g.hold_commits("main");
    let release = async move {
        while g.queued("main") < n {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        drop(hold);
    };
    let (out, ()) = tokio::join!(join_all(writes), release);
    out
}

async fn all(g: &Omnigraph, calls: &[(&str, Value)]) -> Vec<Result<MutationResult, OmniError>> {
    gathered(
        g,
        calls.iter().map(|(name, p)| g.mutate("main", M, name, p)),
    )
    .await
}

async fn has_person(g: &Omnigraph, name: &str) -> bool {
    person_names(g).await.contains(&json!(name))
}

async fn head(g: &Omnigraph) -> String {
    g.commits("main", Some(1)).await.unwrap()[0].id.clone()
}

#[tokio::test]
async fn mutations_queued_on_a_branch_share_one_commit_and_each_keeps_its_own_answer() {
    let t = loaded_graph().await;
    let alone =
        t.g.mutate("main", M, "add", &json!({"n": "Zed"}))
            .await
            .unwrap();
    assert_eq!(alone.member, None, "a lone mutation has its own commit");
    let before = t.g.commits("main", None).await.unwrap().len();

    let names: Vec<String> = (0..16).map(|i| format!("P{i:02}")).collect();
    let calls: Vec<(&str, Value)> = names.iter().map(|n| ("add", json!({ "n": n }))).collect();
    let done: Vec<MutationResult> = all(&t.g, &calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let commit = done[0].commit.clone();
    for (i, r) in done.iter().enumerate() {
        assert_eq!(r.commit, commit, "mutation {i}");
        assert_eq!(r.member, Some(i as u32), "mutation {i}");
        assert_eq!(r.nodes, BTreeMap::from([("Person".to_string(), 1)]));
        assert!(r.edges.is_empty());
    }
    let commits = t.g.commits("main", None).await.unwrap();
    assert_eq!(commits.len(), before + 1, "sixteen mutations, one commit");
    assert_eq!(commits[0].id, commit);
    for n in &names {
        assert!(has_person(&t.g, n).await, "{n} was acknowledged");
    }
    // Every row is attributed to the mutation that wrote it.
    let changes = t.g.commit_changes(&commit, None).await.unwrap();
    assert_eq!(changes.len(), 16);
    for c in &changes {
        let place = names.iter().position(|n| *n == c.id).expect("one of ours");
        assert_eq!(
            (c.change, c.member, c.mutation.as_deref()),
            ("insert", Some(place as u32), Some("add")),
            "{c:?}"
        );
    }
    // A commit of its own names no member.
    let own = t.g.commit_changes(&alone.commit, None).await.unwrap();
    assert_eq!((own[0].member, own[0].mutation.clone()), (None, None));
}

#[tokio::test]
async fn a_member_that_breaks_a_rule_fails_alone_and_the_others_commit() {
    let t = loaded_graph().await;
    t.g.mutate("main", M, "add", &json!({"n": "Zed"}))
        .await
        .unwrap();
    let head_before = head(&t.g).await;
    let done = all(
        &t.g,
        &[
            ("add", json!({"n": "N0"})),
            // No such person: the edge's endpoint is missing.
            ("hire", json!({"p": "Ghost", "c": "Acme"})),
            // Alice has this address: @unique.
            ("add_mail", json!({"n": "N2", "e": "alice@x.org"})),
            ("add_two", json!({"a": "N3a", "b": "N3b"})),
            // Reads N0, which an earlier member of the group wrote.
            ("hire", json!({"p": "N0", "c": "Acme"})),
            // Alice works at Acme already: WorksAt is @card(0..1).
            ("hire", json!({"p": "Alice", "c": "Acme"})),
        ],
    )
    .await;
    let kept: Vec<&MutationResult> = [0, 3, 4]
        .iter()
        .map(|&i| done[i].as_ref().unwrap())
        .collect();
    let commit = kept[0].commit.clone();
    assert_ne!(commit, head_before);
    for (place, r) in kept.iter().enumerate() {
        assert_eq!(
            (r.commit.as_str(), r.member),
            (commit.as_str(), Some(place as u32))
        );
    }
    assert_eq!(
        (kept[1].nodes.get("Person"), kept[1].edges.get("Knows")),
        (Some(&2), Some(&1))
    );
    match &done[1] {
        Err(OmniError::Invalid { at, message }) => {
            assert_eq!(at.property.as_deref(), Some("from"), "{message}");
            assert_eq!(at.value.as_deref(), Some("\"Ghost\""), "{message}");
        }
        other => panic!("expected the missing endpoint, got {other:?}"),
    }
    match &done[2] {
        Err(OmniError::Invalid { at, message }) => {
            assert_eq!(at.property.as_deref(), Some("email"));
            assert!(message.contains("@unique"), "{message}");
        }
        other => panic!("expected @unique, got {other:?}"),
    }
    match &done[5] {
        Err(OmniError::Invalid { at, message }) => {
            assert_eq!(at.type_name.as_deref(), Some("WorksAt"), "{message}");
            assert!(message.contains("@card"), "{message}");
        }
        other => panic!("expected @card, got {other:?}"),
    }
    for n in ["N0", "N3a", "N3b"] {
        assert!(has_person(&t.g, n).await, "{n}");
    }
    assert!(
        !has_person(&t.g, "N2").await,
        "a refused member wrote nothing"
    );
    assert_eq!(count(&t.g, "main", "WorksAt").await, 2, "Alice's and N0's");
    let by: BTreeMap<(String, String), (Option<u32>, Option<String>)> =
        t.g.commit_changes(&commit, None)
            .await
            .unwrap()
            .into_iter()
            .map(|c| ((c.type_name, c.id), (c.member, c.mutation)))
            .collect();
    let n0 = (Some(0), Some("add".to_string()));
    let two = (Some(1), Some("add_two".to_string()));
    assert_eq!(by[&("Person".to_string(), "N0".to_string())], n0);
    assert_eq!(by[&("Person".to_string(), "N3b".to_string())], two);
    let hired: Vec<_> = by
        .iter()
        .filter(|((ty, _), _)| ty == "WorksAt")
        .map(|(_, w)| w.clone())
        .collect();
    assert_eq!(hired, vec![(Some(2), Some("hire".to_string()))]);
}

#[tokio::test]
async fn a_group_whose_every_member_is_refused_changes_nothing() {
    let t = loaded_graph().await;
    t.g.mutate("main", M, "add", &json!({"n": "Zed"}))
        .await
        .unwrap();
    let before = Untouched::of(&t).await;
    let done = all(
        &t.g,
        &[
            ("hire", json!({"p": "Ghost", "c": "Acme"})),
            ("add_mail", json!({"n": "N2", "e": "alice@x.org"})),
        ],
    )
    .await;
    for r in &done {
        assert!(
            matches!(r, Err(OmniError::Invalid { .. })),
            "each has its own error: {r:?}"
        );
        before.check(&t, r.as_ref().unwrap_err()).await;
    }
}

#[tokio::test]
async fn deletes_and_writes_queued_together_commit_in_their_order() {
    let t = loaded_graph().await;
    t.g.mutate("main", M, "add", &json!({"n": "Zed"}))
        .await
        .unwrap();
    let done: Vec<MutationResult> = all(
        &t.g,
        &[
            ("add", json!({"n": "X"})),
            ("forget", json!({"n": "Bob"})),
            ("add", json!({"n": "Bob"})),
        ],
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let commits: Vec<&str> = done.iter().map(|r| r.commit.as_str()).collect();
    assert!(
        commits[0] != commits[1] && commits[1] != commits[2],
        "a delete never shares a commit with a write: {commits:?}"
    );
    // Bob was deleted (with his Knows edges), then inserted again.
    assert!(has_person(&t.g, "Bob").await);
    assert_eq!(count(&t.g, "main", "Knows").await, 0);
}

#[tokio::test]
async fn a_member_that_would_take_the_group_over_the_row_limit_commits_in_the_next() {
    let t = new_graph().await;
    let mut lines = String::new();
    for i in 0..9000 {
        let age = if i % 2 == 0 { 10 } else { 90 };
        lines.push_str(&format!(
            "{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":{age}}}}}\n"
        ));
    }
    t.g.load("main", &lines, LoadMode::Overwrite).await.unwrap();
    t.g.mutate("main", M, "add", &json!({"n": "Zed"}))
        .await
        .unwrap();
    let done: Vec<MutationResult> = all(
        &t.g,
        &[
            ("older", json!({"min": 50, "age": 91})),
            ("younger", json!({"max": 50, "age": 11})),
        ],
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    // 4,500 + 4,500 rows are over the 8,192 a commit takes; each alone is not.
    assert_ne!(done[0].commit, done[1].commit);
    assert_eq!(done[0].nodes.get("Person"), Some(&4500));
    assert_eq!(done[1].nodes.get("Person"), Some(&4500));
    assert_eq!(done[1].member, None, "it committed alone, after");
    let r = t
        .g
        .query(
            &Target::main(),
            "query q() { match { $p: Person } return { $p.age as age, count($p) as n } order { n desc, age } }",
            "q",
            &Value::Null,
        )
        .await
        .unwrap();
    let rows = omnigraph::exec::output::rows(&r).unwrap();
    let ages: Vec<(Value, Value)> = rows
        .iter()
        .map(|r| (r["age"].clone(), r["n"].clone()))
        .collect();
    assert_eq!(
        ages,
        vec![
            (json!(11), json!(4500)),
            (json!(91), json!(4500)),
            (Value::Null, json!(1))
        ],
        "each member's update landed whole"
    );
}

fn item(name: &str) -> String {
    format!(
        "{{\"type\":\"Person\",\"data\":{{\"name\":\"{name}\"}}}}\n{{\"edge\":\"Knows\",\"from\":\"{name}\",\"to\":\"Alice\"}}\n"
    )
}

#[tokio::test]
async fn loads_queued_on_a_branch_share_one_commit_and_each_row_names_its_load() {
    let t = loaded_graph().await;
    let before = t.g.commits("main", None).await.unwrap().len();
    let names: Vec<String> = (0..8).map(|i| format!("L{i}")).collect();
    let lines: Vec<String> = names.iter().map(|n| item(n)).collect();
    let done: Vec<LoadReport> = gathered(
        &t.g,
        lines.iter().map(|l| t.g.load("main", l, LoadMode::Append)),
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    // Loads queue as their parses finish: each has a place of its own.
    let commit = done[0].commit.clone();
    let mut places: Vec<u32> = done.iter().map(|r| r.member.expect("shared")).collect();
    for r in &done {
        assert_eq!(r.commit, commit);
        assert_eq!(r.nodes, BTreeMap::from([("Person".to_string(), 1)]));
        assert_eq!(r.edges, BTreeMap::from([("Knows".to_string(), 1)]));
    }
    places.sort();
    assert_eq!(places, (0..8).collect::<Vec<u32>>());
    assert_eq!(t.g.commits("main", None).await.unwrap().len(), before + 1);
    for n in &names {
        assert!(has_person(&t.g, n).await, "{n}");
    }
    assert_eq!(count(&t.g, "main", "Knows").await, 2 + 8);
    for c in t.g.commit_changes(&commit, None).await.unwrap() {
        assert_eq!(c.mutation.as_deref(), Some("load"), "{c:?}");
        if c.type_name == "Person" {
            let i = names.iter().position(|n| *n == c.id).expect("ours");
            assert_eq!(c.member, done[i].member, "{c:?}");
        }
    }
}

#[tokio::test]
async fn loads_that_cannot_be_one_commit_each_alone() {
    let t = loaded_graph().await;
    let head_before = head(&t.g).await;
    // The same new id twice: as one load it is given twice; alone, the
    // first appends it and the second finds it there.
    let done = gathered(
        &t.g,
        [item("Dup"), item("Dup"), item("Solo")]
            .iter()
            .map(|l| t.g.load("main", l, LoadMode::Append))
            .collect::<Vec<_>>(),
    )
    .await;
    // The loads queue as their parses finish, so either Dup may be first:
    // exactly one commits (alone), the other conflicts with it.
    let (won, lost): (Vec<_>, Vec<_>) = done[..2].iter().partition(|r| r.is_ok());
    assert_eq!((won.len(), lost.len()), (1, 1), "{done:?}");
    let first = won[0].as_ref().unwrap();
    assert_eq!(first.member, None, "it committed alone");
    assert_ne!(first.commit, head_before);
    match lost[0] {
        Err(OmniError::KeyConflict { type_name, id }) => {
            assert_eq!((type_name.as_str(), id.as_str()), ("Person", "Dup"))
        }
        other => panic!("expected the other Dup to conflict, got {other:?}"),
    }
    let solo = done[2].as_ref().unwrap();
    assert_eq!(solo.member, None);
    assert_ne!(solo.commit, first.commit);
    assert!(has_person(&t.g, "Solo").await);
    assert_eq!(count(&t.g, "main", "Knows").await, 2 + 2);
}
