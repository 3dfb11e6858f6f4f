//! Who may do what: a policy's decisions enforced at the head of every
//! verb, alike through the embedded handle and the CLI (the server's side
//! is in server.rs): each denial is `PolicyDenied` naming the actor,
//! action and branch and leaves every file of the graph as it was; each
//! allow does the write.

use std::sync::Arc;
use std::time::Duration;

use omnigraph::policy::Policy;
use omnigraph::{OmniError, Omnigraph, OpenOptions, RetentionPolicy, Target};
use serde_json::Value;

use crate::common::*;

/// Agents write and manage unprotected branches; reviewers merge into and
/// apply schemas to protected ones, and do the upkeep; anyone reads.
pub const TEAM: &str = r#"
version: 1
groups:
  agents: [agent]
  reviewers: [rev]
rules:
  - id: all-read
    allow: { actors: "*", actions: [read, export] }
  - id: agents-write-unprotected
    allow: { actors: { group: agents }, actions: [change], branch_scope: unprotected }
  - id: agents-manage-unprotected
    allow:
      actors: { group: agents }
      actions: [branch_create, branch_delete]
      target_branch_scope: unprotected
  - id: reviewers-merge-protected
    allow:
      actors: { group: reviewers }
      actions: [branch_merge, schema_apply]
      target_branch_scope: protected
  - id: reviewers-upkeep
    allow: { actors: [rev], actions: [cleanup, admin] }
"#;

pub const ACTORS: [&str; 3] = ["agent", "rev", "stranger"];

/// One call of the matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    ReadMain,
    ExportMain,
    ChangeMain,
    ChangeDev,
    CreateBranch,
    DeleteBranch,
    MergeDevIntoMain,
    ApplySchema,
    Cleanup,
    Admin,
}

pub const OPS: [Op; 10] = [
    Op::ReadMain,
    Op::ExportMain,
    Op::ChangeMain,
    Op::ChangeDev,
    Op::CreateBranch,
    Op::DeleteBranch,
    Op::MergeDevIntoMain,
    Op::ApplySchema,
    Op::Cleanup,
    Op::Admin,
];

pub const READ: &str = "query q() { match { $p: Person } return { $p.name } }";

/// The schema with one more optional property.
pub fn wider_schema() -> String {
    SCHEMA.replace(
        "node Company { name: String @key }",
        "node Company { name: String @key\n    city: String? }",
    )
}

pub fn insert(actor: &str, branch: &str) -> String {
    format!("query m() {{ insert Person {{ name: \"{actor}-{branch}\" }} }}")
}

impl Op {
    /// The action the policy decides, and the branch it names.
    pub fn action(self) -> (&'static str, Option<&'static str>) {
        match self {
            Op::ReadMain => ("read", Some("main")),
            Op::ExportMain => ("export", Some("main")),
            Op::ChangeMain => ("change", Some("main")),
            Op::ChangeDev => ("change", Some("dev")),
            Op::CreateBranch => ("branch_create", Some("main")),
            Op::DeleteBranch => ("branch_delete", None),
            Op::MergeDevIntoMain => ("branch_merge", Some("dev")),
            Op::ApplySchema => ("schema_apply", None),
            Op::Cleanup => ("cleanup", None),
            Op::Admin => ("admin", None),
        }
    }

    /// What [`TEAM`] allows.
    pub fn allowed(self, actor: &str) -> bool {
        match self {
            Op::ReadMain | Op::ExportMain => true,
            Op::ChangeMain => false,
            Op::ChangeDev | Op::CreateBranch | Op::DeleteBranch => actor == "agent",
            Op::MergeDevIntoMain | Op::ApplySchema | Op::Cleanup | Op::Admin => actor == "rev",
        }
    }

    pub fn writes(self) -> bool {
        !matches!(self, Op::ReadMain | Op::ExportMain)
    }

    /// The command line of this call (after `--policy FILE --as ACTOR`).
    fn cli(self, actor: &str, uri: &str, schema: &std::path::Path) -> Vec<String> {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let feature = format!("{actor}-feature");
        match self {
            Op::ReadMain => s(&["query", uri, "-e", READ]),
            Op::ExportMain => s(&["export", uri]),
            Op::ChangeMain => s(&["mutate", uri, "-e", &insert(actor, "main")]),
            Op::ChangeDev => s(&[
                "mutate",
                uri,
                "--branch",
                "dev",
                "-e",
                &insert(actor, "dev"),
            ]),
            Op::CreateBranch => s(&["branch", "create", &feature, "--from", "main", uri]),
            Op::DeleteBranch => s(&["branch", "delete", "dev2", uri]),
            Op::MergeDevIntoMain => s(&["branch", "merge", "dev", "--into", "main", uri]),
            Op::ApplySchema => s(&[
                "schema",
                "apply",
                uri,
                "--schema",
                &schema.to_string_lossy(),
            ]),
            Op::Cleanup => s(&["cleanup", uri, "--older-than", "0s", "--keep-versions", "1"]),
            Op::Admin => s(&["blob", "policy", uri, "--allow", "s3://blobs/"]),
        }
    }
}

/// Run `op` through `g` (acting for `actor`).
async fn embedded(g: &Omnigraph, op: Op, actor: &str) -> Result<(), OmniError> {
    match op {
        Op::ReadMain => g
            .query(&Target::main(), READ, "q", &Value::Null)
            .await
            .map(drop),
        Op::ExportMain => g
            .export(&Target::main(), &mut Vec::<u8>::new())
            .await
            .map(drop),
        Op::ChangeMain => g
            .mutate("main", &insert(actor, "main"), "m", &Value::Null)
            .await
            .map(drop),
        Op::ChangeDev => g
            .mutate("dev", &insert(actor, "dev"), "m", &Value::Null)
            .await
            .map(drop),
        Op::CreateBranch => g
            .branch_create(&format!("{actor}-feature"), "main")
            .await
            .map(drop),
        Op::DeleteBranch => g.branch_delete("dev2").await,
        Op::MergeDevIntoMain => g.merge("dev", "main").await.map(drop),
        Op::ApplySchema => g.apply_schema(&wider_schema()).await.map(drop),
        Op::Cleanup => g
            .cleanup(RetentionPolicy {
                older_than: Duration::ZERO,
                keep_versions: Some(1),
                dry_run: false,
            })
            .await
            .map(drop),
        Op::Admin => g.allow_external_blobs("s3://blobs/").await.map(drop),
    }
}

/// A loaded graph with `dev` (one insert ahead of main) and `dev2`.
pub async fn team_graph() -> TestGraph {
    let t = loaded_graph().await;
    t.g.branch_create("dev", "main").await.unwrap();
    t.g.mutate("dev", &insert("setup", "dev"), "m", &Value::Null)
        .await
        .unwrap();
    t.g.branch_create("dev2", "main").await.unwrap();
    t
}

fn team_policy(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("team.yaml");
    std::fs::write(&p, TEAM).unwrap();
    p
}

#[tokio::test]
async fn the_embedded_handle_allows_and_denies_by_actor_action_and_branch() {
    for actor in ACTORS {
        let t = team_graph().await;
        let policy = Arc::new(Policy::load(&team_policy(t.dir.path())).unwrap());
        let g = Omnigraph::open_with(
            &t.uri(),
            OpenOptions {
                actor: Some(actor.into()),
                policy: Some(policy),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        for op in OPS {
            let what = format!("{actor} {op:?}");
            let before = Untouched::of(&t).await;
            let (action, branch) = op.action();
            match (op.allowed(actor), embedded(&g, op, actor).await) {
                (true, Ok(())) => {
                    if op.writes() {
                        before.assert_written(&t, &what);
                    }
                }
                (
                    false,
                    Err(OmniError::PolicyDenied {
                        actor: a,
                        action: x,
                        branch: b,
                        ..
                    }),
                ) => {
                    assert_eq!(
                        (a.as_str(), x.as_str(), b.as_deref()),
                        (actor, action, branch)
                    );
                    before.check(&t, &what).await;
                }
                (want, got) => panic!("{what}: expected allowed={want}, got {got:?}"),
            }
        }
        let denied: u64 = g.denials().iter().map(|(_, n)| n).sum();
        let expected = OPS.iter().filter(|op| !op.allowed(actor)).count() as u64;
        assert_eq!(denied, expected, "{actor}: every denial is counted");
        g.close().await;
    }
}

#[tokio::test]
async fn the_cli_allows_and_denies_alike() {
    for actor in ACTORS {
        let t = team_graph().await;
        let policy = team_policy(t.dir.path());
        let schema = t.dir.path().join("wider.pg");
        std::fs::write(&schema, wider_schema()).unwrap();
        let uri = t.uri();
        for op in OPS {
            let what = format!("{actor} {op:?}");
            let before = Untouched::of(&t).await;
            let mut args = vec![
                "--policy".to_string(),
                policy.to_string_lossy().to_string(),
                "--as".into(),
                actor.into(),
            ];
            args.extend(op.cli(actor, &uri, &schema));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = cli(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if op.allowed(actor) {
                assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
                if op.writes() {
                    before.assert_written(&t, &what);
                }
            } else {
                assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
                let (action, _) = op.action();
                assert!(
                    stderr.contains("error[PolicyDenied]")
                        && stderr.contains(&format!("'{actor}'"))
                        && stderr.contains(action),
                    "{what}: {stderr}"
                );
                before.check(&t, &what).await;
            }
        }
    }
}

#[tokio::test]
async fn with_a_policy_and_no_actor_every_call_fails_closed() {
    let t = team_graph().await;
    let policy = Arc::new(Policy::load(&team_policy(t.dir.path())).unwrap());
    let g = Omnigraph::open_with(
        &t.uri(),
        OpenOptions {
            policy: Some(policy),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for op in OPS {
        let before = Untouched::of(&t).await;
        match embedded(&g, op, "nobody").await {
            Err(OmniError::PolicyDenied { actor, reason, .. }) => {
                assert!(actor.is_empty() && reason.contains("no actor"), "{reason}")
            }
            other => panic!("{op:?}: {other:?}"),
        }
        before.check(&t, &format!("{op:?} with no actor")).await;
    }
    // The CLI too: a policy and no --as.
    let out = cli(&[
        "--policy",
        &team_policy(t.dir.path()).to_string_lossy(),
        "query",
        &t.uri(),
        "-e",
        READ,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no actor"));
    // Acting as someone else on the same handle is decided for them.
    let rev = g.acting_as("rev");
    rev.merge("dev", "main").await.unwrap();
    g.close().await;
}

#[tokio::test]
async fn commits_record_the_actor_that_made_them() {
    let t = team_graph().await;
    let policy = team_policy(t.dir.path());
    let uri = t.uri();
    cli_ok(&[
        "--policy",
        &policy.to_string_lossy(),
        "--as",
        "agent",
        "mutate",
        &uri,
        "--branch",
        "dev",
        "-e",
        &insert("agent", "dev"),
    ]);
    let head = t.g.commits("dev", Some(1)).await.unwrap().remove(0);
    assert_eq!(head.actor, "agent");
    let shown: Value =
        serde_json::from_str(&cli_ok(&["commit", "show", &head.id, &uri, "--json"])).unwrap();
    assert_eq!(shown["actor"], "agent");
    let listed: Value = serde_json::from_str(&cli_ok(&[
        "commit", "list", &uri, "--branch", "dev", "--json",
    ]))
    .unwrap();
    assert_eq!(listed[0]["actor"], "agent");
    let feed =
        t.g.changes(&omnigraph::ChangeRequest {
            branch: "dev".into(),
            start: omnigraph::ChangeStart::Beginning,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(feed.blocks.last().unwrap().actor, "agent");
}

#[test]
fn policy_commands_validate_test_and_explain() {
    let dir = tempfile::tempdir().unwrap();
    let policy = team_policy(dir.path());
    let p = policy.to_string_lossy().to_string();
    let v: Value = serde_json::from_str(&cli_ok(&["policy", "validate", &p, "--json"])).unwrap();
    assert_eq!(v["rules"], 5);
    assert!(v["cedar"].as_str().unwrap().contains("@id(\"all-read\")"));
    // A bad file: exit 2 naming the rule and what is wrong.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "version: 1\nrules:\n  - id: r\n    allow: { actors: a, actions: [fly] }\n",
    )
    .unwrap();
    let out = cli(&["policy", "validate", &bad.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rule 'r'") && err.contains("\"fly\""), "{err}");
    // Cases: all as expected, exit 0; one not, exit 1 naming it.
    let cases = dir.path().join("cases.yaml");
    let case = |id: &str, actor: &str, expect: &str| {
        format!(
            "  - {{ id: {id}, actor: {actor}, action: branch_merge, branch: dev, target_branch: main, expect: {expect} }}\n"
        )
    };
    std::fs::write(
        &cases,
        format!(
            "version: 1\ncases:\n{}{}",
            case("rev-merges", "rev", "allow"),
            case("agent-cannot", "agent", "deny")
        ),
    )
    .unwrap();
    let c = cases.to_string_lossy().to_string();
    let out = cli(&["policy", "test", &p, "--cases", &c, "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["passed"].as_u64(), r["failed"].as_u64()),
        (Some(2), Some(0))
    );
    std::fs::write(
        &cases,
        format!(
            "version: 1\ncases:\n{}",
            case("agent-merges", "agent", "allow")
        ),
    )
    .unwrap();
    let out = cli(&["policy", "test", &p, "--cases", &c]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("FAIL agent-merges: deny (no rule allows it)"),
        "{text}"
    );
    // Explain: the decision and the rule that made it.
    let e: Value = serde_json::from_str(&cli_ok(&[
        "policy",
        "explain",
        &p,
        "--actor",
        "rev",
        "--action",
        "branch_merge",
        "--branch",
        "dev",
        "--target-branch",
        "main",
        "--json",
    ]))
    .unwrap();
    assert_eq!(e["decision"], "allow");
    assert_eq!(e["rules"], serde_json::json!(["reviewers-merge-protected"]));
    let text = cli_ok(&[
        "policy", "explain", &p, "--actor", "agent", "--action", "change", "--branch", "main",
    ]);
    assert_eq!(text.trim(), "deny: no rule allows it");
}
