//! The change feed: a branch's commits in first-parent order from a cursor,
//! each a whole block with before and after images; cursors that resume
//! exactly, refuse what they do not bind, and a gap after a cleanup.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use omnigraph::{ChangePage, ChangeRequest, ChangeStart, OmniError, Omnigraph, RetentionPolicy};
use serde_json::{Value, json};

use crate::common::*;

fn req(start: ChangeStart) -> ChangeRequest {
    ChangeRequest {
        branch: "main".into(),
        start,
        ..Default::default()
    }
}

fn after(cursor: &str) -> ChangeRequest {
    ChangeRequest {
        branch: "main".into(),
        cursor: Some(cursor.to_string()),
        ..Default::default()
    }
}

async fn mutate(g: &Omnigraph, branch: &str, body: &str) -> String {
    let src = format!("query m() {{ {body} }}");
    g.mutate(branch, &src, "m", &Value::Null)
        .await
        .unwrap()
        .commit
}

/// Remove every version but the newest.
async fn cleanup_all(g: &Omnigraph) {
    g.cleanup(RetentionPolicy {
        older_than: Duration::ZERO,
        keep_versions: Some(1),
        dry_run: false,
    })
    .await
    .unwrap();
}

/// Each block's changes as (op, type, id).
fn ops(page: &ChangePage) -> Vec<Vec<(String, String, String)>> {
    page.blocks
        .iter()
        .map(|b| {
            b.changes
                .iter()
                .map(|c| (c.op.to_string(), c.type_name.clone(), c.id.clone()))
                .collect()
        })
        .collect()
}

fn change(op: &str, t: &str, id: &str) -> (String, String, String) {
    (op.into(), t.into(), id.into())
}

#[tokio::test]
async fn a_feed_from_the_beginning_holds_every_commit_with_its_images() {
    let t = loaded_graph().await;
    let g = &t.g;
    let dan = mutate(g, "main", "insert Person { name: \"Dan\", age: 7 }").await;
    mutate(
        g,
        "main",
        "update Person set { age: 42 } where name = \"Bob\"",
    )
    .await;
    mutate(g, "main", "delete Person where name = \"Carol\"").await;
    let page = g.changes(&req(ChangeStart::Beginning)).await.unwrap();
    assert!(page.caught_up);
    let history: Vec<String> = g
        .commits("main", None)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|c| c.id)
        .collect();
    let ids: Vec<&str> = page
        .blocks
        .iter()
        .map(|b| b.graph_commit_id.as_str())
        .collect();
    assert_eq!(ids, history, "every commit, oldest first");
    let got = ops(&page);
    assert!(got[0].is_empty(), "the first commit only makes the tables");
    assert_eq!(got[1].len(), 7, "the load: {:?}", got[1]);
    assert_eq!(got[2], [change("insert", "Person", "Dan")]);
    assert_eq!(got[3], [change("update", "Person", "Bob")]);
    let knows_bob_carol = &got[4]
        .iter()
        .find(|c| c.1 == "Knows")
        .expect("Carol's edge goes with her")
        .2;
    assert_eq!(
        got[4],
        [
            change("delete", "Person", "Carol"),
            change("delete", "Knows", knows_bob_carol),
        ]
    );
    // Images: an insert has after, an update before and after, a delete
    // before; an edge's carries its endpoints.
    let c = &page.blocks[2].changes[0];
    assert_eq!(c.kind, "node");
    assert_eq!(
        (c.before.clone(), c.after.clone()),
        (None, Some(json!({"data": {"name": "Dan", "age": 7}})))
    );
    let c = &page.blocks[3].changes[0];
    assert_eq!(
        (c.before.clone(), c.after.clone()),
        (
            Some(json!({"data": {"name": "Bob", "age": 41}})),
            Some(json!({"data": {"name": "Bob", "age": 42}}))
        )
    );
    let c = &page.blocks[4].changes[1];
    assert_eq!(c.kind, "edge");
    assert_eq!(
        (c.before.clone(), c.after.clone()),
        (
            Some(json!({"from": "Bob", "to": "Carol", "data": {}})),
            None
        )
    );
    let b = &page.blocks[2];
    assert_eq!(b.graph_commit_id, dan);
    assert_eq!(b.parent_commit_id.as_deref(), Some(history[1].as_str()));
    assert_eq!(
        (b.branch.as_str(), b.commit_kind.as_str()),
        ("main", "mutation")
    );
    let shape = serde_json::to_value(&page).unwrap();
    assert!(shape["cursor"].is_string() && shape["caught_up"] == json!(true));
    let block = &shape["blocks"][2];
    for field in [
        "graph_commit_id",
        "parent_commit_id",
        "branch",
        "actor",
        "authored_at",
        "changes",
    ] {
        assert!(!block[field].is_null(), "{field}: {block}");
    }
    assert!(block.get("merged_parent_commit_id").is_none(), "{block}");
    assert_eq!(block["cursor"], page.blocks[2].cursor.as_str());
}

#[tokio::test]
async fn a_cursor_resumes_right_after_what_it_delivered() {
    let t = loaded_graph().await;
    let g = &t.g;
    for n in ["A", "B", "C"] {
        mutate(g, "main", &format!("insert Person {{ name: \"{n}\" }}")).await;
    }
    // Two commits a page: the init and the load, then the three inserts.
    let mut r = req(ChangeStart::Beginning);
    r.limit = Some(2);
    let first = g.changes(&r).await.unwrap();
    assert_eq!(first.blocks.len(), 2);
    assert!(!first.caught_up);
    let mut next = after(&first.cursor);
    next.limit = Some(2);
    let second = g.changes(&next).await.unwrap();
    assert_eq!(
        ops(&second),
        [
            [change("insert", "Person", "A")],
            [change("insert", "Person", "B")]
        ]
    );
    // A block's own cursor resumes after it.
    let from_a = g.changes(&after(&second.blocks[0].cursor)).await.unwrap();
    assert_eq!(
        ops(&from_a),
        [
            [change("insert", "Person", "B")],
            [change("insert", "Person", "C")]
        ]
    );
    let third = g.changes(&after(&second.cursor)).await.unwrap();
    assert_eq!(ops(&third), [[change("insert", "Person", "C")]]);
    assert!(third.caught_up);
    // Caught up: an empty page keeps the cursor; a new commit comes next.
    let idle = g.changes(&after(&third.cursor)).await.unwrap();
    assert!(idle.blocks.is_empty() && idle.caught_up);
    assert_eq!(idle.cursor, third.cursor);
    mutate(g, "main", "insert Person { name: \"D\" }").await;
    let d = g.changes(&after(&idle.cursor)).await.unwrap();
    assert_eq!(ops(&d), [[change("insert", "Person", "D")]]);
    // `now` starts after the head; `after:COMMIT` after that commit.
    let now = g.changes(&req(ChangeStart::Now)).await.unwrap();
    assert!(now.blocks.is_empty());
    let e = mutate(g, "main", "insert Person { name: \"E\" }").await;
    let since_now = g.changes(&after(&now.cursor)).await.unwrap();
    assert_eq!(ops(&since_now), [[change("insert", "Person", "E")]]);
    let d_id = d.blocks[0].graph_commit_id.clone();
    let since_d = g.changes(&req(ChangeStart::After(d_id))).await.unwrap();
    assert_eq!(since_d.blocks.len(), 1);
    assert_eq!(since_d.blocks[0].graph_commit_id, e);
}

#[tokio::test]
async fn a_filter_keeps_the_changes_it_names_and_binds_its_cursor() {
    let t = loaded_graph().await;
    let g = &t.g;
    mutate(
        g,
        "main",
        "insert Person { name: \"Dan\" }\ninsert Knows { from: \"Dan\", to: \"Bob\" }",
    )
    .await;
    mutate(
        g,
        "main",
        "update Person set { age: 1 } where name = \"Dan\"",
    )
    .await;
    // Only Person updates; only edges.
    let mut only = req(ChangeStart::Beginning);
    only.types = vec!["Person".into()];
    only.ops = vec!["update".into()];
    let page = g.changes(&only).await.unwrap();
    let changed: Vec<_> = ops(&page).into_iter().flatten().collect();
    assert_eq!(changed, [change("update", "Person", "Dan")]);
    let mut edges = req(ChangeStart::Beginning);
    edges.kind = Some("edge".into());
    let page = g.changes(&edges).await.unwrap();
    assert!(
        page.blocks
            .iter()
            .flat_map(|b| &b.changes)
            .all(|c| c.kind == "edge"),
        "{page:?}"
    );
    assert_eq!(page.blocks.iter().flat_map(|b| &b.changes).count(), 4);
    // A cursor carries its filter: another filter refuses it.
    let mut other = after(&page.cursor);
    other.kind = Some("node".into());
    match g.changes(&other).await {
        Err(OmniError::CursorRejected { reason }) => {
            assert!(reason.contains("another filter"), "{reason}")
        }
        x => panic!("a cursor under another filter: {x:?}"),
    }
    // A filter naming what the schema does not have is wrong input.
    let mut bad = req(ChangeStart::Beginning);
    bad.types = vec!["Robot".into()];
    let e = g.changes(&bad).await.unwrap_err();
    assert_eq!(e.kind(), "BadRequest", "{e}");
    let mut bad = req(ChangeStart::Beginning);
    bad.ops = vec!["upsert".into()];
    let e = g.changes(&bad).await.unwrap_err();
    assert_eq!(e.kind(), "BadRequest", "{e}");
}

#[tokio::test]
async fn a_cursor_of_another_branch_or_a_damaged_one_is_rejected() {
    let t = loaded_graph().await;
    let g = &t.g;
    g.branch_create("dev", "main").await.unwrap();
    let main = g.changes(&req(ChangeStart::Now)).await.unwrap();
    let rejected = |r: omnigraph::Result<ChangePage>| match r {
        Err(OmniError::CursorRejected { reason }) => reason,
        other => panic!("expected CursorRejected, got {other:?}"),
    };
    let mut on_dev = after(&main.cursor);
    on_dev.branch = "dev".into();
    assert!(rejected(g.changes(&on_dev).await).contains("branch 'main', not 'dev'"));
    // One character changed: the checksum says so.
    let mut damaged = main.cursor.clone().into_bytes();
    damaged[3] = if damaged[3] == b'A' { b'B' } else { b'A' };
    let damaged = String::from_utf8(damaged).unwrap();
    assert!(rejected(g.changes(&after(&damaged)).await).contains("checksum"));
    assert!(rejected(g.changes(&after("not a cursor")).await).contains("not a cursor"));
    // A branch deleted and made again is another branch.
    let mut dev = req(ChangeStart::Now);
    dev.branch = "dev".into();
    let dev_cursor = g.changes(&dev).await.unwrap().cursor;
    g.branch_delete("dev").await.unwrap();
    g.branch_create("dev", "main").await.unwrap();
    let mut again = after(&dev_cursor);
    again.branch = "dev".into();
    assert!(rejected(g.changes(&again).await).contains("deleted and made again"));
    // A commit that is not on the branch's history.
    let x = mutate(g, "dev", "insert Person { name: \"OnDev\" }").await;
    assert!(
        rejected(g.changes(&req(ChangeStart::After(x))).await).contains("not on branch 'main'")
    );
    // Another graph's cursor.
    let other = loaded_graph().await;
    assert!(rejected(other.g.changes(&after(&main.cursor)).await).contains("another graph"));
}

#[tokio::test]
async fn merges_and_schema_applies_are_blocks_of_their_own() {
    let t = loaded_graph().await;
    let g = &t.g;
    let start = g.changes(&req(ChangeStart::Now)).await.unwrap();
    g.branch_create("x", "main").await.unwrap();
    mutate(g, "x", "insert Person { name: \"FromX\" }").await;
    mutate(g, "main", "insert Person { name: \"OnMain\" }").await;
    g.merge("x", "main").await.unwrap();
    let page = g.changes(&after(&start.cursor)).await.unwrap();
    assert_eq!(
        page.blocks.len(),
        2,
        "main's first-parent history: {page:?}"
    );
    let merge = &page.blocks[1];
    assert_eq!(merge.commit_kind, "merge");
    assert!(merge.merged_parent_commit_id.is_some());
    assert_eq!(ops(&page)[1], [change("insert", "Person", "FromX")]);
    let wider = SCHEMA.replace("    age: I32?\n", "    age: I32?\n    nick: String?\n");
    g.apply_schema(&wider).await.unwrap();
    let applied = g.changes(&after(&page.cursor)).await.unwrap();
    let b = &applied.blocks[0];
    assert_eq!(b.commit_kind, "schema_apply");
    assert!(b.changes.is_empty());
    let schema = b.schema.clone().expect("a schema block");
    assert_ne!(schema["from"], schema["to"]);
    // A commit that changes no entity (optimize: indexes) is an empty block.
    let built = g.optimize("main").await.unwrap();
    let page = g.changes(&after(&applied.cursor)).await.unwrap();
    assert_eq!(
        page.blocks
            .iter()
            .map(|b| b.graph_commit_id.clone())
            .collect::<Vec<_>>(),
        [built.commit.expect("an optimize commit")]
    );
    assert!(page.blocks[0].changes.is_empty(), "{page:?}");
}

#[tokio::test]
async fn a_cursor_past_what_a_cleanup_removed_is_a_gap() {
    let t = loaded_graph().await;
    let g = &t.g;
    let old = g.changes(&req(ChangeStart::Now)).await.unwrap();
    let first = mutate(g, "main", "insert Person { name: \"P1\" }").await;
    for n in 2..5 {
        mutate(g, "main", &format!("insert Person {{ name: \"P{n}\" }}")).await;
    }
    cleanup_all(g).await;
    match g.changes(&after(&old.cursor)).await {
        Err(OmniError::ChangeFeedGap {
            first_unreadable_commit_id,
        }) => assert_eq!(first_unreadable_commit_id, first),
        other => panic!("expected a gap, got {other:?}"),
    }
    // The baseline handshake: a copy of the branch at one head, and the
    // cursor after that head; the feed goes on from there exactly.
    let mut copy = Vec::new();
    let base = g
        .changes_baseline(&req(ChangeStart::Now), &mut copy)
        .await
        .unwrap();
    let head = g.commits("main", Some(1)).await.unwrap()[0].id.clone();
    assert_eq!(base.snapshot_commit_id, head);
    let mut export = Vec::new();
    g.export(&omnigraph::Target::main(), &mut export)
        .await
        .unwrap();
    assert_eq!(copy, export, "the baseline is the branch at its head");
    mutate(g, "main", "insert Person { name: \"P5\" }").await;
    let page = g.changes(&after(&base.cursor)).await.unwrap();
    assert_eq!(ops(&page), [[change("insert", "Person", "P5")]]);
}

#[tokio::test]
async fn a_baseline_binds_its_filter_and_writes_only_its_types() {
    let t = loaded_graph().await;
    let g = &t.g;
    let mut people = req(ChangeStart::Now);
    people.types = vec!["Person".into()];
    let mut copy = Vec::new();
    let base = g.changes_baseline(&people, &mut copy).await.unwrap();
    let copy = String::from_utf8(copy).unwrap();
    assert_eq!(copy.lines().count(), 3, "{copy}");
    assert!(
        copy.lines().all(|l| l.contains("\"type\":\"Person\"")),
        "{copy}"
    );
    mutate(
        g,
        "main",
        "insert Person { name: \"Dan\" }\ninsert Company { name: \"Beta\" }",
    )
    .await;
    let mut next = after(&base.cursor);
    next.types = vec!["Person".into()];
    let page = g.changes(&next).await.unwrap();
    assert_eq!(ops(&page), [[change("insert", "Person", "Dan")]]);
    match g.changes(&after(&base.cursor)).await {
        Err(OmniError::CursorRejected { reason }) => {
            assert!(reason.contains("another filter"), "{reason}")
        }
        other => panic!("the baseline's cursor without its filter: {other:?}"),
    }
}

#[tokio::test]
async fn the_cli_polls_and_follows() {
    let t = loaded_graph().await;
    let uri = t.uri();
    t.g.clone().close().await;
    let out = cli(&["changes", "poll", &uri, "--start", "beginning", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(page["blocks"].as_array().unwrap().len(), 2);
    assert_eq!(page["caught_up"], true);
    let cursor = page["cursor"].as_str().unwrap().to_string();
    let bad = cli(&["changes", "poll", &uri, "--cursor", "x.y"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("error[CursorRejected]"));

    // A baseline to a file: written whole, or not at all.
    let file = t.dir.path().join("base.jsonl");
    let out = cli(&[
        "changes",
        "baseline",
        &uri,
        "--out",
        file.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 7);
    assert!(
        b["snapshot_commit_id"].is_string() && b["cursor"].is_string(),
        "{b}"
    );
    let refused = t.dir.path().join("refused.jsonl");
    let out = cli(&[
        "changes",
        "baseline",
        &uri,
        "--out",
        refused.to_str().unwrap(),
        "--type",
        "Robot",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let left: Vec<_> = std::fs::read_dir(t.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("refused"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // Follow: each commit that lands is printed as a block line, then its
    // cursor.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["changes", "poll", &uri, "--cursor", &cursor, "--follow"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let g = Omnigraph::open(&uri).await.unwrap();
    let commit = mutate(&g, "main", "insert Person { name: \"Followed\" }").await;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let block: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let resume: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(block["graph_commit_id"], commit.as_str());
    assert_eq!(block["changes"][0]["id"], "Followed");
    let resumed = g
        .changes(&after(resume["cursor"].as_str().unwrap()))
        .await
        .unwrap();
    assert!(resumed.blocks.is_empty() && resumed.caught_up);
    g.close().await;
}

/// A replica of a branch: the image of each entity by (type, id).
type Replica = std::collections::BTreeMap<(String, String), Value>;

/// The replica a branch's export describes, in the feed's image shape.
async fn replica_of_export(g: &Omnigraph, branch: &str) -> Replica {
    let mut out = Vec::new();
    g.export(&omnigraph::Target::Branch(branch.into()), &mut out)
        .await
        .unwrap();
    let mut r = Replica::new();
    for line in String::from_utf8(out).unwrap().lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        match v.get("edge").and_then(Value::as_str).map(str::to_string) {
            Some(t) => {
                let id = v["data"]["id"].as_str().unwrap().to_string();
                v["data"].as_object_mut().unwrap().remove("id");
                r.insert(
                    (t, id),
                    json!({"from": v["from"], "to": v["to"], "data": v["data"]}),
                );
            }
            None => {
                let t = v["type"].as_str().unwrap().to_string();
                let id = v["data"]["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{v}"))
                    .to_string();
                r.insert((t, id), json!({"data": v["data"]}));
            }
        }
    }
    r
}

/// Apply one feed block (as `--follow` prints it) to a replica.
fn apply(r: &mut Replica, block: &Value) {
    for c in block["changes"].as_array().unwrap() {
        let key = (
            c["type"].as_str().unwrap().to_string(),
            c["id"].as_str().unwrap().to_string(),
        );
        match c["op"].as_str().unwrap() {
            "delete" => {
                r.remove(&key);
            }
            _ => {
                r.insert(key, c["after"].clone());
            }
        }
    }
}

/// Writers on two handles (main, and a branch merged into main from time
/// to time; inserts, updates and deletes of the same keys) while a
/// consumer process follows main, is killed at random points and resumed
/// from the last cursor it printed. Afterwards its replica is main's
/// export; every commit was applied, again only when killed between a
/// block and its cursor, and never one before the cursor it resumed from.
async fn a_consumer_killed_and_resumed_mirrors_the_branch(place: Place, writes: usize) {
    use rand::{Rng, SeedableRng};
    let uri = place.uri("g.omni");
    let g = Omnigraph::init(&uri, SCHEMA).await.unwrap();
    g.load("main", PEOPLE, omnigraph::LoadMode::Overwrite)
        .await
        .unwrap();
    g.branch_create("side", "main").await.unwrap();
    let start = g.changes(&req(ChangeStart::Beginning)).await.unwrap();
    let mut replica = Replica::new();
    for b in &start.blocks {
        apply(&mut replica, &serde_json::to_value(b).unwrap());
    }
    // Two other processes append to main, as often as the handle writes
    // (two people and an edge a write), beside this process's handle and
    // the processes that write the side branch and merge it below.
    let appenders: Vec<Reaped> = ["5000000", "6000000"]
        .into_iter()
        .map(|start| {
            Reaped(
                std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
                    .args(["stress-writer", "--store", &uri, "--start", start])
                    .args(["--count", &writes.to_string()])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let writers = {
        let main = Omnigraph::open(&uri).await.unwrap();
        let uri = uri.clone();
        tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(51);
            for i in 0..writes {
                let k = rng.random_range(0..6);
                let body = match rng.random_range(0..4) {
                    0 => format!("delete Person where name = \"k{k}\""),
                    1 => format!("update Person set {{ age: {i} }} where name = \"k{k}\""),
                    2 => format!(
                        "insert Person {{ name: \"k{i}x\" }}\ninsert Knows {{ from: \"k{i}x\", to: \"Alice\" }}"
                    ),
                    _ => format!("insert Person {{ name: \"k{k}\", age: {i} }}"),
                };
                // An insert of a key that exists is refused, as it should
                // be; the feed shows only commits. Another process writes
                // main too: a write it got in the way of (exit 4) is tried
                // again.
                let src = format!("query m() {{ {body} }}");
                loop {
                    match main.mutate("main", &src, "m", &Value::Null).await {
                        Ok(_) | Err(OmniError::KeyConflict { .. }) => break,
                        Err(e) if e.exit_code() == 4 => continue,
                        Err(e) => panic!("{body}: {e}"),
                    }
                }
                if i % 8 == 3 {
                    // The side branch's write and its merge, each a
                    // process of its own (a merge another writer got in
                    // the way of exits 4 and is tried again).
                    let insert =
                        format!("query m() {{ insert Person {{ name: \"s{i}\", age: {i} }} }}");
                    cli_until_done(&["mutate", &uri, "--branch", "side", "-e", &insert]).await;
                    cli_until_done(&["branch", "merge", "side", "--into", "main", &uri]).await;
                }
            }
            main.close().await;
        })
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut saved = start.cursor.clone();
    let mut applied: Vec<String> = Vec::new();
    let mut resumed_after: Vec<usize> = Vec::new();
    let mut done = false;
    let mut appenders = Some(appenders);
    let mut appender_stopped = false;
    while !done {
        if writers.is_finished()
            && let Some(all) = appenders.take()
        {
            for mut a in all {
                let status = a.wait().unwrap();
                let mut err = String::new();
                std::io::Read::read_to_string(&mut a.stderr.take().unwrap(), &mut err).unwrap();
                assert!(status.success(), "another writer process failed: {err}");
            }
            appender_stopped = true;
        }
        let mut child = Reaped(
            std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
                .args(["changes", "poll", &uri, "--cursor", &saved, "--follow"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        resumed_after.push(applied.len());
        let stdout = child.stdout.take().unwrap();
        // A block's line and its cursor's: a kill after an odd count
        // falls between a block and its cursor.
        let kill_after: usize = rng.random_range(1..24);
        assert!(
            resumed_after.len() < 500,
            "the consumer is not catching up: {} blocks applied after {} resumes",
            applied.len(),
            resumed_after.len()
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.unwrap()).is_err() {
                    break;
                }
            }
        });
        let mut read = 0;
        loop {
            let line = match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(l) => l,
                // The writers are done: wait for the other processes'
                // last writes at the top of the loop.
                Err(_) if writers.is_finished() && !appender_stopped => break,
                Err(_) if writers.is_finished() => {
                    let head = g.commits("main", Some(1)).await.unwrap()[0].id.clone();
                    done = applied.last() == Some(&head);
                    if done {
                        break;
                    }
                    continue;
                }
                Err(_) => continue,
            };
            let v: Value = serde_json::from_str(&line).unwrap();
            match v.get("graph_commit_id") {
                Some(id) => {
                    apply(&mut replica, &v);
                    applied.push(id.as_str().unwrap().to_string());
                }
                None => saved = v["cursor"].as_str().unwrap().to_string(),
            }
            read += 1;
            if read == kill_after {
                break;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    writers.await.unwrap();
    assert_eq!(replica, replica_of_export(&g, "main").await);
    for (prefix, what) in [
        ("p5", "the first appender"),
        ("p6", "the second appender"),
        ("s", "the side branch"),
    ] {
        assert!(
            replica
                .keys()
                .any(|(t, id)| t == "Person" && id.starts_with(prefix)),
            "{what}'s writes are in the replica"
        );
    }
    // Every commit of main's first-parent history, in order; a repeat
    // only of the block applied just before a kill.
    let history: Vec<String> = g
        .commits("main", None)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|c| c.id)
        .collect();
    let mut unique = applied.clone();
    unique.dedup();
    let since = history.iter().position(|h| *h == unique[0]).unwrap();
    assert_eq!(unique, history[since..], "every commit once, in order");
    assert!(
        applied.len() - unique.len() <= resumed_after.len(),
        "at most one repeat per resume: {} applied, {} commits, {} resumes",
        applied.len(),
        unique.len(),
        resumed_after.len()
    );
    assert!(
        resumed_after.len() > 3,
        "the consumer was killed and resumed"
    );
    g.close().await;
}

/// Run the CLI until it succeeds, again while another writer got in its
/// way (exit 4).
async fn cli_until_done(args: &[&str]) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        loop {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
                .args(&args)
                .output()
                .unwrap();
            match out.status.code() {
                Some(0) => return,
                Some(4) => continue,
                _ => panic!(
                    "{args:?}: {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_killed_and_resumed_mirrors_the_branch_on_disk() {
    a_consumer_killed_and_resumed_mirrors_the_branch(Place::local(), 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_killed_and_resumed_mirrors_the_branch_on_s3() {
    // Fewer writes: each round trip of the consumer's processes is slow.
    a_consumer_killed_and_resumed_mirrors_the_branch(Place::s3(), 16).await;
}

/// A type with a Blob property: its rows' changes are in the feed (a
/// change of the Blob alone too), their images without the bytes.
#[tokio::test]
async fn changes_of_a_blob_bearing_type_are_in_the_feed() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("g.omni").to_string_lossy().to_string();
    let g = Omnigraph::init(&uri, crate::blobs::BLOB_SCHEMA)
        .await
        .unwrap();
    let start = g.changes(&req(ChangeStart::Now)).await.unwrap();
    g.load(
        "main",
        r#"{"type":"Asset","data":{"name":"a1","kind":"pic","data":"base64:aGVsbG8="}}"#,
        omnigraph::LoadMode::Append,
    )
    .await
    .unwrap();
    let set = "query s($d: Blob) { update Asset set { data: $d } where name = \"a1\" }";
    g.mutate("main", set, "s", &json!({ "d": "base64:d29ybGQ=" }))
        .await
        .unwrap();
    let page = g.changes(&after(&start.cursor)).await.unwrap();
    assert_eq!(
        ops(&page),
        [
            [change("insert", "Asset", "a1")],
            [change("update", "Asset", "a1")]
        ]
    );
    let c = &page.blocks[1].changes[0];
    assert_eq!(
        c.after,
        Some(json!({"data": {"name": "a1", "kind": "pic"}}))
    );
    let id = page.blocks[1].graph_commit_id.clone();
    let listed = g.commit_changes(&id, None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].change, "update");
    g.close().await;
}

/// The embedded follow: a stream of blocks as they land, each with the
/// cursor that resumes after it, ending with the gap a cleanup made.
#[tokio::test]
async fn watch_streams_blocks_as_they_land_and_ends_at_a_gap() {
    use futures::StreamExt;
    let t = loaded_graph().await;
    let g = t.g.clone();
    let blocks = g.watch(req(ChangeStart::Now), Duration::from_millis(5));
    let mut blocks = Box::pin(blocks.await.unwrap());
    let mut landed = Vec::new();
    for n in 0..3 {
        landed.push(mutate(&g, "main", &format!("insert Person {{ name: \"W{n}\" }}")).await);
        let b = blocks.next().await.unwrap().unwrap();
        assert_eq!(b.graph_commit_id, landed[n]);
        assert_eq!(
            b.changes
                .iter()
                .map(|c| (c.op, c.id.as_str()))
                .collect::<Vec<_>>(),
            [("insert", format!("W{n}").as_str())]
        );
        let resumed = g.changes(&after(&b.cursor)).await.unwrap();
        assert!(resumed.blocks.is_empty() && resumed.caught_up);
    }
    // Two commits before the next look: both, in order.
    let more = [
        mutate(&g, "main", "insert Person { name: \"W3\" }").await,
        mutate(&g, "main", "delete Person where name = \"W0\"").await,
    ];
    for id in &more {
        assert_eq!(&blocks.next().await.unwrap().unwrap().graph_commit_id, id);
    }
    // A cleanup removes the next commit's data: the gap, naming it.
    let old = g.changes(&req(ChangeStart::Now)).await.unwrap();
    let first = mutate(&g, "main", "insert Person { name: \"W9\" }").await;
    mutate(&g, "main", "insert Person { name: \"W10\" }").await;
    cleanup_all(&g).await;
    // A gap found at the first look fails the call; found later, it is the
    // stream's last item.
    match g.watch(after(&old.cursor), Duration::from_millis(5)).await {
        Err(OmniError::ChangeFeedGap {
            first_unreadable_commit_id,
        }) => assert_eq!(first_unreadable_commit_id, first),
        Err(e) => panic!("expected a gap, got {e}"),
        Ok(_) => panic!("expected a gap, the watch started"),
    }
    let mut stale = blocks;
    match stale.next().await {
        Some(Err(OmniError::ChangeFeedGap {
            first_unreadable_commit_id,
        })) => assert_eq!(first_unreadable_commit_id, first),
        other => panic!("expected a gap, got {other:?}"),
    }
    assert!(stale.next().await.is_none(), "a gap ends the stream");
}
