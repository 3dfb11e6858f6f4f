//! Crash windows of the write protocol: the writer is stopped (the process
//! "halts": no further storage effect happens) at each point between the
//! sidecar write and the sidecar delete; reopening runs recovery, and the
//! graph is exactly the old state or exactly the new one, never a mix.

use omnigraph::storage::substrate::CrashPoint;
use omnigraph::{LoadMode, OmniError, Omnigraph, Target};

use crate::common::*;

/// Touches two tables (Person and Knows), so there are two table commits.
const TWO_TABLES: &str = "{\"type\":\"Person\",\"data\":{\"name\":\"Dan\"}}\n{\"edge\":\"Knows\",\"from\":\"Dan\",\"to\":\"Alice\"}";

/// The lease time of graphs on S3 in these tests: a crashed writer is
/// certainly dead once it has lapsed.
pub const TEST_LEASE: std::time::Duration = std::time::Duration::from_millis(1000);

pub fn test_options() -> omnigraph::OpenOptions {
    omnigraph::OpenOptions {
        lease: TEST_LEASE,
        ..Default::default()
    }
}

/// Load, crash the writer at `point`, reopen (after the crashed process's
/// lease would have lapsed, on S3) and return the states before and after.
pub async fn crash_and_reopen_in(
    place: Place,
    point: CrashPoint,
) -> (String, String, Omnigraph, Place) {
    let uri = place.uri("g.omni");
    let g = Omnigraph::init_with(&uri, SCHEMA, test_options())
        .await
        .unwrap();
    g.load("main", PEOPLE, LoadMode::Overwrite).await.unwrap();
    let old = state(&g).await;
    g.substrate().crash_at(point);
    interrupted(g.load("main", TWO_TABLES, LoadMode::Append).await);
    assert!(g.substrate().halted());
    drop(g);
    if matches!(place, Place::S3 { .. }) {
        tokio::time::sleep(TEST_LEASE * 2).await;
    }
    let reopened = Omnigraph::open_with(&uri, test_options()).await.unwrap();
    let now = state(&reopened).await;
    // No sidecar is left behind for a resolved intent.
    let left = stored(&uri, "_graph/recovery").await;
    assert!(left.is_empty(), "sidecars left: {left:?}");
    (old, now, reopened, place)
}

async fn assert_writable(g: &Omnigraph) {
    g.load("main", "{\"type\":\"Person\",\"data\":{\"name\":\"Zed\"}}\n{\"edge\":\"Knows\",\"from\":\"Zed\",\"to\":\"Bob\"}", LoadMode::Append)
        .await
        .unwrap();
}

fn has_new_state(fp: &str) -> bool {
    fp.contains("\"Dan\"") && fp.matches("\"edge\":\"Knows\"").count() == 3
}

#[tokio::test]
async fn crash_after_sidecar_write_rolls_back() {
    crash_after_sidecar_write_rolls_back_in(Place::local()).await;
}

pub async fn crash_after_sidecar_write_rolls_back_in(place: Place) {
    let (old, now, g, _place) = crash_and_reopen_in(place, CrashPoint::AfterSidecarWrite).await;
    assert_eq!(old, now);
    assert_eq!(g.recovery_report().rolled_back.len(), 1);
    assert_writable(&g).await;
}

#[tokio::test]
async fn crash_after_first_of_two_table_commits_rolls_back() {
    crash_after_first_of_two_table_commits_rolls_back_in(Place::local()).await;
}

pub async fn crash_after_first_of_two_table_commits_rolls_back_in(place: Place) {
    let (old, now, g, _place) = crash_and_reopen_in(place, CrashPoint::AfterTableCommit(1)).await;
    assert_eq!(old, now, "a partial commit must not be visible");
    assert_eq!(g.recovery_report().rolled_back.len(), 1);
    assert_writable(&g).await;
    // The rolled-back table really holds the old rows (no orphan on top).
    assert_eq!(count(&g, "main", "Person").await, 4);
    assert_eq!(count(&g, "main", "Knows").await, 3);
}

#[tokio::test]
async fn crash_after_all_table_commits_rolls_forward() {
    crash_after_all_table_commits_rolls_forward_in(Place::local()).await;
}

pub async fn crash_after_all_table_commits_rolls_forward_in(place: Place) {
    let (old, now, g, _place) = crash_and_reopen_in(place, CrashPoint::AfterTableCommit(2)).await;
    assert_ne!(old, now);
    assert!(has_new_state(&now), "{now}");
    assert_eq!(g.recovery_report().rolled_forward.len(), 1);
    // The commit keeps the id the writer chose (the one in the sidecar), with
    // the old head as its parent.
    let commits = g.commits("main", None).await.unwrap();
    assert_eq!(commits.len(), 3);
    assert_eq!(commits[0].kind, "recovered");
    assert_eq!(commits[0].parents[0], commits[1].id);
    assert_writable(&g).await;
}

#[tokio::test]
async fn crash_after_publish_keeps_the_commit() {
    crash_after_publish_keeps_the_commit_in(Place::local()).await;
}

pub async fn crash_after_publish_keeps_the_commit_in(place: Place) {
    let (old, now, g, _place) = crash_and_reopen_in(place, CrashPoint::AfterPublish).await;
    assert_ne!(old, now);
    assert!(has_new_state(&now));
    assert_eq!(g.recovery_report().already_published.len(), 1);
    assert_eq!(g.commits("main", None).await.unwrap()[0].kind, "load");
    assert_writable(&g).await;
}

#[tokio::test]
async fn a_crash_on_a_branch_does_not_touch_main() {
    let t = loaded_graph().await;
    t.g.branch_create("b", "main").await.unwrap();
    let uri = t.uri();
    let main_before = {
        let mut d = Vec::new();
        t.g.export(&Target::main(), &mut d).await.unwrap();
        d
    };
    t.g.substrate().crash_at(CrashPoint::AfterTableCommit(1));
    interrupted(t.g.load("b", TWO_TABLES, LoadMode::Append).await);
    let TestGraph { dir, g } = t;
    drop(g);
    let g = Omnigraph::open(&uri).await.unwrap();
    let mut main_after = Vec::new();
    g.export(&Target::main(), &mut main_after).await.unwrap();
    assert_eq!(main_before, main_after);
    assert_eq!(count(&g, "b", "Person").await, 3);
    g.load("b", TWO_TABLES, LoadMode::Append).await.unwrap();
    assert_eq!(count(&g, "b", "Person").await, 4);
    assert_eq!(count(&g, "b", "Knows").await, 3);
    drop(dir);
}

/// Folders of Lance branches (forks) under a graph's tables.
fn forks(graph: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for kind in ["nodes", "edges"] {
        let Ok(tables) = std::fs::read_dir(graph.join(kind)) else {
            continue;
        };
        for t in tables.flatten() {
            if let Ok(tree) = std::fs::read_dir(t.path().join("tree")) {
                for f in tree.flatten() {
                    out.push(format!(
                        "{}/{}",
                        t.file_name().to_string_lossy(),
                        f.file_name().to_string_lossy()
                    ));
                }
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_crash_after_a_lazy_fork_and_before_the_sidecar_changes_nothing_visible() {
    let t = loaded_graph().await;
    t.g.branch_create("b", "main").await.unwrap();
    let uri = t.uri();
    let graph = t.dir.path().join("g.omni");
    assert!(forks(&graph).is_empty());
    let before = state(&t.g).await;
    t.g.substrate().crash_at(CrashPoint::BeforeSidecarWrite);
    interrupted(t.g.load("b", TWO_TABLES, LoadMode::Append).await);
    assert!(
        !forks(&graph).is_empty(),
        "the write should have forked its tables before it stopped"
    );
    let TestGraph { dir, g } = t;
    drop(g);
    let g = Omnigraph::open(&uri).await.unwrap();
    assert_eq!(state(&g).await, before);
    // The next write on the branch uses (or remakes) the forks and commits.
    g.load("b", TWO_TABLES, LoadMode::Append).await.unwrap();
    assert_eq!(count(&g, "b", "Person").await, 4);
    assert_eq!(count(&g, "main", "Person").await, 3);
    drop(dir);
}

#[tokio::test]
async fn a_crash_during_recovery_is_finished_by_the_next_open() {
    let t = loaded_graph().await;
    let uri = t.uri();
    let before = state(&t.g).await;
    t.g.substrate().crash_at(CrashPoint::AfterTableCommit(1));
    interrupted(t.g.load("main", TWO_TABLES, LoadMode::Append).await);
    let TestGraph { dir, g } = t;
    drop(g);
    // Recovery halts after restoring the landed table, before it re-points
    // the branch: the open reports the intent it could not finish.
    let opts = omnigraph::OpenOptions {
        crash_at: Some(CrashPoint::AfterRestore),
        ..Default::default()
    };
    let err = Omnigraph::open_with(&uri, opts).await;
    assert!(
        matches!(err, Err(omnigraph::OmniError::RecoveryRequired { .. })),
        "{:?}",
        err.map(|_| ())
    );
    let g = Omnigraph::open(&uri).await.unwrap();
    assert_eq!(g.recovery_report().rolled_back.len(), 1);
    assert_eq!(state(&g).await, before);
    assert_writable(&g).await;
    assert_eq!(count(&g, "main", "Person").await, 4);
    drop(dir);
}

#[tokio::test]
async fn a_crash_while_deleting_a_branch_leaves_nothing_for_a_new_branch_of_its_name() {
    let t = loaded_graph().await;
    t.g.branch_create("b", "main").await.unwrap();
    t.g.load("b", TWO_TABLES, LoadMode::Append).await.unwrap();
    let uri = t.uri();
    // The delete is published, then the process dies before it reclaims
    // the branch's forks.
    t.g.substrate().crash_at(CrashPoint::AfterPublish);
    interrupted(t.g.branch_delete("b").await);
    let TestGraph { dir, g } = t;
    drop(g);
    let g = Omnigraph::open(&uri).await.unwrap();
    assert!(g.branch_list().await.unwrap().iter().all(|b| b.name != "b"));
    g.branch_create("b", "main").await.unwrap();
    assert_eq!(
        count(&g, "b", "Person").await,
        3,
        "the old branch's rows came back"
    );
    g.load("b", TWO_TABLES, LoadMode::Append).await.unwrap();
    assert_eq!(count(&g, "b", "Person").await, 4);
    drop(dir);
}

#[tokio::test]
async fn a_crash_right_after_a_branch_create_keeps_the_branch() {
    let t = loaded_graph().await;
    let uri = t.uri();
    t.g.substrate().crash_at(CrashPoint::AfterPublish);
    interrupted(t.g.branch_create("b", "main").await);
    let TestGraph { dir, g } = t;
    drop(g);
    let g = Omnigraph::open(&uri).await.unwrap();
    assert!(g.branch_list().await.unwrap().iter().any(|b| b.name == "b"));
    assert_eq!(count(&g, "b", "Person").await, 3);
    g.load("b", TWO_TABLES, LoadMode::Append).await.unwrap();
    assert_eq!(count(&g, "b", "Person").await, 4);
    drop(dir);
}

/// A write its process crashed inside never reports success: it fails as
/// the halted process (before any effect) or as left to recovery (after).
pub fn interrupted<T: std::fmt::Debug>(r: omnigraph::Result<T>) {
    match r {
        Err(OmniError::RecoveryRequired { .. }) => {}
        Err(OmniError::Storage(m)) if m.contains("halted") => {}
        other => panic!("the interrupted write must fail as interrupted, got {other:?}"),
    }
}
