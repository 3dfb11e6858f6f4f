//! Branch merges: fast-forwards, three-way merges property by property,
//! conflicts that write nothing, merge commits with two parents, commit
//! show / changes, crashes inside a merge, and the CLI's contract.

use omnigraph::storage::substrate::CrashPoint;
use omnigraph::{LoadMode, MergeOutcome, OmniError, Omnigraph, Target};

use crate::common::*;

async fn mutate(g: &Omnigraph, branch: &str, q: &str) {
    g.mutate(branch, q, "m", &serde_json::json!({}))
        .await
        .unwrap();
}

async fn set_age(g: &Omnigraph, branch: &str, name: &str, age: i32) {
    let q = format!("query m() {{ update Person set {{ age: {age} }} where name = \"{name}\" }}");
    mutate(g, branch, &q).await;
}

async fn set_email(g: &Omnigraph, branch: &str, name: &str, email: &str) {
    let q = format!(
        "query m() {{ update Person set {{ email: \"{email}\" }} where name = \"{name}\" }}"
    );
    mutate(g, branch, &q).await;
}

async fn delete_person(g: &Omnigraph, branch: &str, name: &str) {
    let q = format!("query m() {{ delete Person where name = \"{name}\" }}");
    mutate(g, branch, &q).await;
}

async fn add_person(g: &Omnigraph, branch: &str, line: &str) {
    g.load(branch, line, LoadMode::Append).await.unwrap();
}

/// One Person's row as exported.
async fn person(g: &Omnigraph, branch: &str, name: &str) -> Option<serde_json::Value> {
    let mut dump = Vec::new();
    g.export(&Target::Branch(branch.into()), &mut dump)
        .await
        .unwrap();
    String::from_utf8(dump)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "Person" && v["data"]["name"] == name)
}

async fn export(g: &Omnigraph, branch: &str) -> String {
    let mut dump = Vec::new();
    g.export(&Target::Branch(branch.into()), &mut dump)
        .await
        .unwrap();
    let mut lines: Vec<String> = String::from_utf8(dump)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines.join("\n")
}

/// A fast-forward, a write on the taken tables, then a three-way merge and
/// a crash inside another, on any store.
pub async fn merges_in(place: Place) {
    let uri = place.uri("g.omni");
    let opts = crate::recovery::test_options();
    let g = Omnigraph::init_with(&uri, SCHEMA, opts.clone())
        .await
        .unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.branch_create("x", "main").await.unwrap();
    set_age(&g, "x", "Alice", 35).await;
    assert!(matches!(
        g.merge("x", "main").await.unwrap(),
        MergeOutcome::FastForward { .. }
    ));
    set_age(&g, "main", "Bob", 50).await;
    set_age(&g, "x", "Carol", 7).await;
    assert!(matches!(
        g.merge("x", "main").await.unwrap(),
        MergeOutcome::Merged { .. }
    ));
    let ages = |v: Option<serde_json::Value>| v.unwrap()["data"]["age"].clone();
    assert_eq!(ages(person(&g, "main", "Alice").await), 35);
    assert_eq!(ages(person(&g, "main", "Bob").await), 50);
    assert_eq!(ages(person(&g, "main", "Carol").await), 7);
    // A crash after the merge's table commit: recovery rolls it forward,
    // two parents included, so merging again is up to date.
    set_age(&g, "x", "Alice", 36).await;
    set_age(&g, "main", "Bob", 51).await;
    g.substrate().crash_at(CrashPoint::AfterTableCommit(1));
    crate::recovery::interrupted(g.merge("x", "main").await);
    drop(g);
    if matches!(place, Place::S3 { .. }) {
        tokio::time::sleep(crate::recovery::TEST_LEASE * 2).await;
    }
    let g = Omnigraph::open_with(&uri, opts).await.unwrap();
    assert_eq!(ages(person(&g, "main", "Alice").await), 36);
    let head = g.snapshot(&Target::main()).await.unwrap().head_commit;
    assert_eq!(g.commit(&head).await.unwrap().parents.len(), 2);
    assert!(matches!(
        g.merge("x", "main").await.unwrap(),
        MergeOutcome::UpToDate { .. }
    ));
}

#[tokio::test]
async fn merges_on_local_disk() {
    merges_in(Place::local()).await;
}

#[tokio::test]
async fn a_branch_main_has_not_moved_from_fast_forwards_and_then_is_up_to_date() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("x", "main").await.unwrap();
    add_person(g, "x", r#"{"type":"Person","data":{"name":"Dan","age":5}}"#).await;
    set_age(g, "x", "Alice", 35).await;
    let x_head = g
        .snapshot(&Target::Branch("x".into()))
        .await
        .unwrap()
        .head_commit;
    let out = g.merge("x", "main").await.unwrap();
    assert_eq!(
        out,
        MergeOutcome::FastForward {
            commit: x_head.clone()
        }
    );
    assert_eq!(export(g, "main").await, export(g, "x").await);
    let main = g.snapshot(&Target::main()).await.unwrap();
    assert_eq!(main.head_commit, x_head);
    // Merging again adds nothing.
    assert_eq!(
        g.merge("x", "main").await.unwrap(),
        MergeOutcome::UpToDate {
            commit: x_head.clone()
        }
    );
    // Main writes the tables it took from x (a fork onto a fresh line),
    // and x keeps its own: neither sees the other's write.
    set_age(g, "main", "Bob", 42).await;
    set_age(g, "x", "Carol", 7).await;
    assert_eq!(person(g, "main", "Bob").await.unwrap()["data"]["age"], 42);
    assert_eq!(person(g, "x", "Bob").await.unwrap()["data"]["age"], 41);
    assert!(
        person(g, "main", "Carol").await.unwrap()["data"]
            .get("age")
            .is_none()
    );
    // The history of main from before the merge is still readable.
    let old = g
        .snapshot(&Target::Version {
            version: 2,
            branch: "main".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        old.types.iter().find(|t| t.name == "Person").unwrap().rows,
        3
    );
    // Deleting x keeps what main took from it.
    g.branch_delete("x").await.unwrap();
    assert_eq!(person(g, "main", "Dan").await.unwrap()["data"]["age"], 5);
    assert_eq!(person(g, "main", "Alice").await.unwrap()["data"]["age"], 35);
}

#[tokio::test]
async fn changes_on_both_sides_merge_entity_by_entity_and_property_by_property() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("x", "main").await.unwrap();
    // x: Alice's age, a new person and edge, Carol deleted.
    set_age(g, "x", "Alice", 35).await;
    add_person(
        g,
        "x",
        "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}\n{\"edge\":\"Knows\",\"from\":\"Dan\",\"to\":\"Alice\"}",
    )
    .await;
    // main: Alice's email, Bob's age, a new company.
    set_email(g, "main", "Alice", "alice@new.org").await;
    set_age(g, "main", "Bob", 50).await;
    add_person(g, "main", r#"{"type":"Company","data":{"name":"Beta"}}"#).await;
    delete_person(g, "x", "Carol").await;
    let main_head = g.snapshot(&Target::main()).await.unwrap().head_commit;
    let x_head = g
        .snapshot(&Target::Branch("x".into()))
        .await
        .unwrap()
        .head_commit;

    let out = g.merge("x", "main").await.unwrap();
    let MergeOutcome::Merged { commit } = &out else {
        panic!("expected a merge commit, got {out:?}");
    };
    let alice = person(g, "main", "Alice").await.unwrap();
    assert_eq!(alice["data"]["age"], 35);
    assert_eq!(alice["data"]["email"], "alice@new.org");
    assert_eq!(person(g, "main", "Bob").await.unwrap()["data"]["age"], 50);
    assert!(person(g, "main", "Dan").await.is_some());
    assert!(person(g, "main", "Carol").await.is_none());
    assert_eq!(count(g, "main", "Company").await, 2);
    assert_eq!(
        count(g, "main", "Knows").await,
        2,
        "Alice->Bob and Dan->Alice"
    );
    // x is untouched.
    assert_eq!(
        person(g, "x", "Alice").await.unwrap()["data"]["email"],
        "alice@x.org"
    );

    let rec = g.commit(commit).await.unwrap();
    assert_eq!(rec.parents, vec![main_head, x_head.clone()]);
    assert_eq!(rec.kind, "merge");
    assert_eq!(rec.branch, "main");
    let list = g.commits("main", Some(1)).await.unwrap();
    assert_eq!(list[0].parents.len(), 2);
    // What the merge changed on main.
    let changes = g.commit_changes(commit, None).await.unwrap();
    let shown: Vec<(String, String, String)> = changes
        .iter()
        .map(|c| (c.change.to_string(), c.type_name.clone(), c.id.clone()))
        .collect();
    let has = |c: &str, t: &str, id: &str| {
        shown.contains(&(c.to_string(), t.to_string(), id.to_string()))
    };
    assert!(has("update", "Person", "Alice"), "{shown:?}");
    assert!(has("insert", "Person", "Dan"), "{shown:?}");
    assert!(has("delete", "Person", "Carol"), "{shown:?}");
    assert!(
        !shown.iter().any(|(_, t, id)| t == "Person" && id == "Bob"),
        "{shown:?}"
    );
    let only = g.commit_changes(commit, Some("Company")).await.unwrap();
    assert!(
        only.is_empty(),
        "the merge changed no Company on main: {only:?}"
    );

    // Merging again is up to date; later changes merge against the new base
    // (no false conflict on Alice's age, which both sides now share).
    assert_eq!(
        g.merge("x", "main").await.unwrap(),
        MergeOutcome::UpToDate {
            commit: commit.clone()
        }
    );
    set_age(g, "x", "Alice", 36).await;
    set_age(g, "main", "Bob", 51).await;
    assert!(matches!(
        g.merge("x", "main").await.unwrap(),
        MergeOutcome::Merged { .. }
    ));
    assert_eq!(person(g, "main", "Alice").await.unwrap()["data"]["age"], 36);
    assert_eq!(person(g, "main", "Bob").await.unwrap()["data"]["age"], 51);
}

/// Everything of the graph a user can see, and the files no reader sees.
async fn untouched(t: &TestGraph) -> (String, Vec<String>) {
    (
        fingerprint(&t.g).await,
        stored(&t.uri(), "_graph/recovery").await,
    )
}

async fn conflicts_of(g: &Omnigraph) -> Vec<(String, String, String, Option<String>)> {
    match g.merge("x", "main").await {
        Err(OmniError::MergeConflicts(c)) => c
            .into_iter()
            .map(|c| (format!("{:?}", c.kind), c.type_name, c.id, c.property))
            .collect(),
        other => panic!("expected conflicts, got {other:?}"),
    }
}

#[tokio::test]
async fn divergent_changes_are_listed_together_and_write_nothing() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("x", "main").await.unwrap();
    set_age(g, "x", "Alice", 1).await;
    set_age(g, "main", "Alice", 2).await;
    set_age(g, "x", "Bob", 3).await;
    delete_person(g, "main", "Bob").await;
    add_person(g, "x", r#"{"type":"Person","data":{"name":"Eve","age":1}}"#).await;
    add_person(
        g,
        "main",
        r#"{"type":"Person","data":{"name":"Eve","age":2}}"#,
    )
    .await;
    // The same change on both sides is no conflict.
    set_email(g, "x", "Carol", "c@x.org").await;
    set_email(g, "main", "Carol", "c@x.org").await;
    let before = untouched(&t).await;
    let found = conflicts_of(g).await;
    assert_eq!(
        found,
        vec![
            (
                "DivergentUpdate".into(),
                "Person".into(),
                "Alice".into(),
                Some("age".into())
            ),
            ("DeleteVsUpdate".into(), "Person".into(), "Bob".into(), None),
            (
                "DivergentInsert".into(),
                "Person".into(),
                "Eve".into(),
                None
            ),
        ]
    );
    assert_eq!(untouched(&t).await, before);
}

#[tokio::test]
async fn an_edge_to_a_node_the_other_side_deleted_is_an_orphan() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("x", "main").await.unwrap();
    // x adds an edge to Carol; main deletes Carol.
    add_person(g, "x", r#"{"edge":"Knows","from":"Alice","to":"Carol"}"#).await;
    delete_person(g, "main", "Carol").await;
    let before = untouched(&t).await;
    let found = conflicts_of(g).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "OrphanEdge");
    assert_eq!(found[0].1, "Knows");
    assert_eq!(untouched(&t).await, before);

    // The other way round: the source deletes a node (its Person table is
    // taken as it is) while the target added an edge to it.
    g.branch_create("y", "main").await.unwrap();
    delete_person(g, "y", "Bob").await;
    add_person(g, "main", r#"{"edge":"Knows","from":"Bob","to":"Alice"}"#).await;
    let before = untouched(&t).await;
    let found = match g.merge("y", "main").await {
        Err(OmniError::MergeConflicts(c)) => c,
        other => panic!("expected conflicts, got {other:?}"),
    };
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(format!("{:?}", found[0].kind), "OrphanEdge");
    assert_eq!(untouched(&t).await, before);
}

#[tokio::test]
async fn a_merged_image_that_breaks_unique_or_card_conflicts() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("x", "main").await.unwrap();
    set_email(g, "x", "Carol", "same@x.org").await;
    set_email(g, "main", "Bob", "same@x.org").await;
    // @card(0..1): Bob works at one company on each side, two merged.
    add_person(
        g,
        "x",
        "{\"type\":\"Company\",\"data\":{\"name\":\"Xco\"}}\n{\"edge\":\"WorksAt\",\"from\":\"Bob\",\"to\":\"Xco\"}",
    )
    .await;
    add_person(g, "main", r#"{"edge":"WorksAt","from":"Bob","to":"Acme"}"#).await;
    let before = untouched(&t).await;
    let found = conflicts_of(g).await;
    assert!(
        found.contains(&(
            "UniqueViolation".into(),
            "Person".into(),
            "Carol".into(),
            Some("email".into())
        )),
        "{found:?}"
    );
    assert!(
        found.contains(&(
            "CardinalityViolation".into(),
            "WorksAt".into(),
            "Bob".into(),
            None
        )),
        "{found:?}"
    );
    assert_eq!(untouched(&t).await, before);
}

#[tokio::test]
async fn bad_merges_and_unknown_commits_are_typed_errors_that_write_nothing() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("x", "main").await.unwrap();
    let before = fingerprint(g).await;
    assert!(
        matches!(g.merge("nope", "main").await, Err(OmniError::NotFound(m)) if m.contains("nope"))
    );
    assert!(
        matches!(g.merge("x", "nope").await, Err(OmniError::NotFound(m)) if m.contains("nope"))
    );
    assert!(
        matches!(g.merge("x", "x").await, Err(OmniError::BadRequest(m)) if m.contains("itself"))
    );
    assert!(
        matches!(g.commit("01NOPE").await, Err(OmniError::NotFound(m)) if m.contains("01NOPE"))
    );
    assert!(matches!(
        g.commit_changes("01NOPE", None).await,
        Err(OmniError::NotFound(_))
    ));
    let head = g.snapshot(&Target::main()).await.unwrap().head_commit;
    assert!(
        matches!(g.commit_changes(&head, Some("Nope")).await, Err(OmniError::NotFound(m)) if m.contains("Nope"))
    );
    assert_eq!(fingerprint(g).await, before);
}

/// Crash a three-way merge that changes two tables at `point`: after
/// reopening, main is exactly as before when the crash came before the
/// second table commit (recovery rolls the merge back), and exactly merged
/// from then on (it rolls forward, or finds it published); merging again
/// then finishes the job or is up to date.
async fn crash_inside_a_merge(point: CrashPoint) {
    let rolls_forward = matches!(
        point,
        CrashPoint::AfterTableCommit(2) | CrashPoint::AfterPublish
    );
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    g.branch_create("x", "main").await.unwrap();
    set_age(&g, "x", "Alice", 35).await;
    add_person(&g, "x", r#"{"edge":"Knows","from":"Carol","to":"Alice"}"#).await;
    set_age(&g, "main", "Bob", 50).await;
    add_person(&g, "main", r#"{"edge":"Knows","from":"Carol","to":"Bob"}"#).await;
    let before = export(&g, "main").await;
    g.substrate().crash_at(point);
    crate::recovery::interrupted(g.merge("x", "main").await);
    drop(g);
    let g = Omnigraph::open(&uri).await.unwrap();
    assert!(stored(&uri, "_graph/recovery").await.is_empty());
    let report = g.recovery_report();
    let (back, forward) = match point {
        // No sidecar was written: there is no intent to resolve.
        CrashPoint::BeforeSidecarWrite => (0, 0),
        CrashPoint::AfterPublish => {
            assert_eq!(report.already_published.len(), 1, "{point:?}: {report:?}");
            (0, 0)
        }
        _ if rolls_forward => (0, 1),
        _ => (1, 0),
    };
    assert_eq!(
        (report.rolled_back.len(), report.rolled_forward.len()),
        (back, forward),
        "{point:?}: {report:?}"
    );
    let now = export(&g, "main").await;
    let merged = |s: &str| {
        s.contains("\"age\":35")
            && s.contains("\"age\":50")
            && s.matches("\"edge\":\"Knows\"").count() == 4
    };
    if rolls_forward {
        assert!(
            merged(&now),
            "{point:?}: the merge was not rolled forward:\n{now}"
        );
        assert!(
            matches!(
                g.merge("x", "main").await.unwrap(),
                MergeOutcome::UpToDate { .. }
            ),
            "{point:?}"
        );
    } else {
        assert_eq!(now, before, "{point:?}: the merge was not rolled back");
        assert!(
            matches!(
                g.merge("x", "main").await.unwrap(),
                MergeOutcome::Merged { .. }
            ),
            "{point:?}"
        );
    }
    assert!(merged(&export(&g, "main").await));
}

#[tokio::test]
async fn a_crash_at_any_step_of_a_merge_rolls_it_back_before_its_last_table_commit_and_forward_after()
 {
    for point in [
        CrashPoint::BeforeSidecarWrite,
        CrashPoint::AfterSidecarWrite,
        CrashPoint::AfterTableCommit(1),
        CrashPoint::AfterTableCommit(2),
        CrashPoint::AfterPublish,
    ] {
        crash_inside_a_merge(point).await;
    }
}

#[tokio::test]
async fn the_cli_merges_prints_its_json_and_exits_5_on_conflicts() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let g = &t.g;
    g.branch_create("x", "main").await.unwrap();
    g.branch_create("y", "main").await.unwrap();
    set_age(g, "x", "Alice", 1).await;
    set_age(g, "y", "Alice", 2).await;
    g.clone().close().await;
    let run = crate::common::cli;
    let out = run(&[
        "branch", "merge", "x", "--into", "main", "--store", &uri, "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "fast_forward");
    let head = v["commit"].as_str().unwrap().to_string();
    let out = run(&[
        "branch",
        "merge",
        "y",
        "--store",
        &uri,
        "--json",
        "--delete-branch",
    ]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "conflicts");
    assert_eq!(v["conflicts"][0]["kind"], "DivergentUpdate");
    assert_eq!(v["conflicts"][0]["type"], "Person");
    assert_eq!(v["conflicts"][0]["id"], "Alice");
    assert_eq!(v["conflicts"][0]["property"], "age");
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[MergeConflicts]"));
    // A failed merge deletes no branch.
    let out = run(&["branch", "list", "--store", &uri, "--json"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"y\""));
    let out = run(&["commit", "show", &head, "--store", &uri, "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["id"], head);
    assert_eq!(v["branch"], "x");
    let out = run(&["commit", "changes", &head, "--store", &uri, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!([{"change":"update","type":"Person","id":"Alice"}])
    );
    let out = run(&["commit", "show", "01NOPE", "--store", &uri]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[NotFound]"));
    // A merge with --delete-branch deletes the source.
    set_age(&Omnigraph::open(&uri).await.unwrap(), "main", "Bob", 9).await;
    let out = run(&[
        "branch",
        "merge",
        "y",
        "--store",
        &uri,
        "--json",
        "--delete-branch",
    ]);
    assert_eq!(out.status.code(), Some(5));
    let out = run(&["branch", "create", "z", "--store", &uri]);
    assert!(out.status.success());
    let out = run(&[
        "branch",
        "merge",
        "z",
        "--store",
        &uri,
        "--json",
        "--delete-branch",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "up_to_date");
    assert_eq!(v["branch_deleted"], true);
    let out = run(&["branch", "list", "--store", &uri, "--json"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("\"z\""));
}
