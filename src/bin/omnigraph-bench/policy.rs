//! The policy check's cost per call: a Cedar decision for a team policy
//! (an allow and a deny), and the check with no policy in force.

use std::sync::Arc;
use std::time::Instant;

use omnigraph::policy::{Action, Policy};
use omnigraph::{Omnigraph, OpenOptions};

const TEAM: &str = r#"
version: 1
groups:
  agents: [agent-1, agent-2, agent-3]
  reviewers: [alice, bob]
protected_branches: [main, "release/*"]
rules:
  - id: everyone-reads
    allow: { actors: "*", actions: [read, export] }
  - id: agents-write-their-branches
    allow: { actors: { group: agents }, actions: [change], branch_scope: ["agent-*"] }
  - id: agents-make-branches
    allow: { actors: { group: agents }, actions: [branch_create, branch_delete], target_branch_scope: unprotected }
  - id: reviewers-merge
    allow: { actors: { group: reviewers }, actions: [branch_merge, schema_apply], target_branch_scope: protected }
  - id: no-deleting-protected
    deny: { actors: "*", actions: [branch_delete], target_branch_scope: protected }
  - id: ops
    allow: { actors: [alice], actions: [cleanup, admin] }
"#;

/// Mean µs of `n` calls of `f`.
fn per_call(n: usize, mut f: impl FnMut() -> bool) -> (f64, usize) {
    let started = Instant::now();
    let mut allowed = 0;
    for _ in 0..n {
        allowed += usize::from(f());
    }
    (started.elapsed().as_secs_f64() * 1e6 / n as f64, allowed)
}

pub async fn run(n: usize) {
    let dir = std::env::temp_dir().join(format!("omnigraph-bench-policy-{}", std::process::id()));
    let uri = dir.join("g.omni").to_string_lossy().to_string();
    Omnigraph::init(&uri, "node Person { name: String @key }")
        .await
        .expect("init")
        .close()
        .await;
    let path = dir.join("team.yaml");
    std::fs::write(&path, TEAM).expect("policy file");
    let policy = Arc::new(Policy::load(&path).expect("policy"));
    let open = |policy: Option<Arc<Policy>>| {
        Omnigraph::open_with(
            &uri,
            OpenOptions {
                actor: Some("agent-1".into()),
                policy,
                ..Default::default()
            },
        )
    };
    let checked = open(Some(policy)).await.expect("open");
    let plain = open(None).await.expect("open");
    let change = |b| (Action::Change, Some(b), None);
    let cases = [
        ("allow: change agent-1/x", &checked, change("agent-1/x")),
        ("deny: change main", &checked, change("main")),
        (
            "deny: merge into main",
            &checked,
            (Action::BranchMerge, Some("agent-1/x"), Some("main")),
        ),
        ("no policy: change main", &plain, change("main")),
    ];
    println!("policy check, {n} calls each, one thread");
    for (what, g, (action, branch, target)) in cases {
        // Warm, then measured.
        per_call(n / 10, || g.authorize(action, branch, target).is_ok());
        let (us, allowed) = per_call(n, || g.authorize(action, branch, target).is_ok());
        println!("  {what:<26} {us:>8.3} µs a call ({allowed} of {n} allowed)");
    }
    // Every call a new one (another branch each time): Cedar evaluates
    // each, as for the first call of each actor, action and branch.
    let names: Vec<String> = (0..n).map(|i| format!("agent-{i}")).collect();
    let mut next = names.iter();
    let (us, allowed) = per_call(n, || {
        let b = next.next().expect("a name a call");
        checked.authorize(Action::Change, Some(b), None).is_ok()
    });
    println!(
        "  {:<26} {us:>8.3} µs a call ({allowed} of {n} allowed)",
        "each call new (evaluated)"
    );
    checked.close().await;
    plain.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}
