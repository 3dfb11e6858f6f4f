//! The policy file: groups of actors, the protected branches and rules
//! that allow or deny actions on branch scopes, in YAML, compiled to Cedar
//! (raw Cedar may sit beside the rules); and the test cases file that
//! `omnigraph policy test` checks a policy against.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

use super::{Action, Call, DEFAULT_PROTECTED, Decision, Policy};
use crate::error::{OmniError, Result};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    version: u32,
    #[serde(default)]
    groups: BTreeMap<String, Vec<String>>,
    /// Names or `*` patterns (default: main).
    protected_branches: Option<Vec<String>>,
    #[serde(default)]
    rules: Vec<Rule>,
    /// Cedar policies beside the rules.
    cedar: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    id: String,
    allow: Option<Grant>,
    deny: Option<Grant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Grant {
    actors: Actors,
    actions: Vec<String>,
    branch_scope: Option<Scope>,
    target_branch_scope: Option<Scope>,
}

/// `"*"`, one actor, `{group: G}`, or a list of actors and `group:G`.
#[derive(Deserialize)]
#[serde(untagged)]
enum Actors {
    One(String),
    Group { group: String },
    Many(Vec<String>),
}

/// `any`, `protected`, `unprotected`, or a list of names and `*` patterns.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scope {
    Kind(String),
    Names(Vec<String>),
}

/// A Cedar string literal of `s` (names are refused their control
/// characters before this).
fn lit(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// An error's words without its kind's prefix.
fn why(e: OmniError) -> String {
    match e {
        OmniError::BadRequest(m) => m,
        e => e.to_string(),
    }
}

fn check_name(what: &str, s: &str, bad: &dyn Fn(String) -> OmniError) -> Result<()> {
    if s.is_empty() || s.chars().any(char::is_control) {
        return Err(bad(format!(
            "{what} {s:?} is empty or holds a control character"
        )));
    }
    Ok(())
}

/// The condition a scope puts on `attr` (`branch` or `target_branch`); a
/// call that names no such branch (a read of the branch list) meets a
/// branch scope and fails a target scope.
fn scope_condition(
    scope: &Scope,
    attr: &str,
    rule: &str,
    bad: &dyn Fn(String) -> OmniError,
) -> Result<Option<String>> {
    let absent = if attr == "branch" { "true" } else { "false" };
    let cond = match scope {
        Scope::Kind(k) if k == "any" => return Ok(None),
        Scope::Kind(k) if k == "protected" => format!("context.{attr}.protected"),
        Scope::Kind(k) if k == "unprotected" => format!("!context.{attr}.protected"),
        Scope::Kind(k) => {
            return Err(bad(format!(
                "rule '{rule}': {attr}_scope {k:?}: give any, protected, unprotected or a list of branch names"
            )));
        }
        Scope::Names(names) if names.is_empty() => {
            return Err(bad(format!("rule '{rule}': {attr}_scope lists no branch")));
        }
        Scope::Names(names) => {
            let mut any = Vec::new();
            for n in names {
                check_name("branch", n, bad)?;
                any.push(format!("context.{attr}.name like {}", lit(n)));
            }
            format!("({})", any.join(" || "))
        }
    };
    Ok(Some(format!(
        "(if context has {attr} then {cond} else {absent})"
    )))
}

/// Compile the YAML policy `text` (from `source`, named in errors).
pub fn compile(text: &str, source: &str) -> Result<Policy> {
    let bad = |why: String| OmniError::BadRequest(format!("policy {source}: {why}"));
    let doc: PolicyFile = serde_yaml_ng::from_str(text).map_err(|e| bad(e.to_string()))?;
    if doc.version != 1 {
        return Err(bad(format!("version {}: give version: 1", doc.version)));
    }
    for (g, members) in &doc.groups {
        check_name("group", g, &bad)?;
        for m in members {
            check_name("actor", m, &bad)?;
        }
    }
    let protected = doc
        .protected_branches
        .unwrap_or_else(|| vec![DEFAULT_PROTECTED.to_string()]);
    for p in &protected {
        check_name("protected branch", p, &bad)?;
    }
    let mut cedar = String::new();
    let mut ids = std::collections::HashSet::new();
    for rule in &doc.rules {
        check_name("rule id", &rule.id, &bad)?;
        if !ids.insert(rule.id.as_str()) {
            return Err(bad(format!("two rules are named '{}'", rule.id)));
        }
        let (effect, grant) = match (&rule.allow, &rule.deny) {
            (Some(g), None) => ("permit", g),
            (None, Some(g)) => ("forbid", g),
            _ => {
                return Err(bad(format!(
                    "rule '{}': give exactly one of allow or deny",
                    rule.id
                )));
            }
        };
        cedar.push_str(&rule_cedar(&rule.id, effect, grant, &doc.groups, &bad)?);
    }
    if let Some(raw) = &doc.cedar {
        cedar.push_str(raw);
        cedar.push('\n');
    }
    let groups: HashMap<String, Vec<String>> = doc.groups.into_iter().collect();
    Policy::from_cedar(&cedar, &groups, protected, source)
}

fn rule_cedar(
    id: &str,
    effect: &str,
    g: &Grant,
    groups: &BTreeMap<String, Vec<String>>,
    bad: &dyn Fn(String) -> OmniError,
) -> Result<String> {
    if g.actions.is_empty() {
        return Err(bad(format!("rule '{id}': it names no action")));
    }
    let mut actions = Vec::new();
    for a in &g.actions {
        if a == "*" {
            actions.extend(Action::ALL);
            continue;
        }
        let action: Action = a
            .parse()
            .map_err(|e| bad(format!("rule '{id}': {}", why(e))))?;
        actions.push(action);
    }
    for (which, given, target) in [
        ("branch_scope", g.branch_scope.is_some(), false),
        ("target_branch_scope", g.target_branch_scope.is_some(), true),
    ] {
        let fits = |a: &Action| match target {
            true => a.scopes().target,
            false => a.scopes().branch,
        };
        if given && let Some(a) = actions.iter().find(|a| !fits(a)) {
            return Err(bad(format!(
                "rule '{id}': {which} does not apply to action {}",
                a.name()
            )));
        }
    }
    let group = |name: &str| -> Result<String> {
        if !groups.contains_key(name) {
            return Err(bad(format!("rule '{id}': no group is named {name:?}")));
        }
        Ok(format!("principal in Omnigraph::Group::{}", lit(name)))
    };
    let member = |m: &str| -> Result<String> {
        match m.strip_prefix("group:") {
            Some(name) => group(name),
            None => {
                check_name("actor", m, bad)?;
                Ok(format!("principal == Omnigraph::Actor::{}", lit(m)))
            }
        }
    };
    let mut conditions = Vec::new();
    match &g.actors {
        Actors::One(a) if a == "*" => {}
        Actors::One(a) => conditions.push(member(a)?),
        Actors::Group { group: name } => conditions.push(group(name)?),
        Actors::Many(list) if list.is_empty() => {
            return Err(bad(format!("rule '{id}': it names no actor")));
        }
        Actors::Many(list) => {
            let any: Vec<String> = list.iter().map(|m| member(m)).collect::<Result<_>>()?;
            conditions.push(format!("({})", any.join(" || ")));
        }
    }
    if let Some(s) = &g.branch_scope {
        conditions.extend(scope_condition(s, "branch", id, bad)?);
    }
    if let Some(s) = &g.target_branch_scope {
        conditions.extend(scope_condition(s, "target_branch", id, bad)?);
    }
    let actions: Vec<String> = actions
        .iter()
        .map(|a| format!("Omnigraph::Action::{}", lit(a.name())))
        .collect();
    let when = match conditions.is_empty() {
        true => String::new(),
        false => format!("\nwhen {{ {} }}", conditions.join(" && ")),
    };
    Ok(format!(
        "@id({})\n{effect} (principal, action in [{}], resource){when};\n\n",
        lit(id),
        actions.join(", ")
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CasesFile {
    version: u32,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    id: String,
    actor: String,
    action: String,
    branch: Option<String>,
    target_branch: Option<String>,
    expect: Expect,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Expect {
    Allow,
    Deny,
}

/// One case's outcome.
#[derive(serde::Serialize)]
pub struct CaseResult {
    pub id: String,
    pub expected: Expect,
    pub passed: bool,
    #[serde(flatten)]
    pub decision: Decision,
}

/// Decide each case of the cases file `text` (from `source`).
pub fn run_cases(policy: &Policy, text: &str, source: &str) -> Result<Vec<CaseResult>> {
    let bad = |why: String| OmniError::BadRequest(format!("cases {source}: {why}"));
    let doc: CasesFile = serde_yaml_ng::from_str(text).map_err(|e| bad(e.to_string()))?;
    if doc.version != 1 {
        return Err(bad(format!("version {}: give version: 1", doc.version)));
    }
    let mut out = Vec::new();
    for c in doc.cases {
        let action: Action = c
            .action
            .parse()
            .map_err(|e| bad(format!("case '{}': {}", c.id, why(e))))?;
        let decision = policy.decide(&Call {
            actor: Some(&c.actor),
            action,
            branch: c.branch.as_deref(),
            target_branch: c.target_branch.as_deref(),
        });
        out.push(CaseResult {
            passed: decision.allowed == (c.expect == Expect::Allow),
            id: c.id,
            expected: c.expect,
            decision,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEAM: &str = r#"
version: 1
groups:
  agents: [agent-1, agent-2]
  reviewers: [alice]
protected_branches: [main, "release/*"]
rules:
  - id: everyone-reads
    allow: { actors: "*", actions: [read, export] }
  - id: agents-branch-unprotected
    allow:
      actors: { group: agents }
      actions: [branch_create]
      branch_scope: any
      target_branch_scope: unprotected
  - id: agents-write-their-branches
    allow:
      actors: [group:agents]
      actions: [change]
      branch_scope: ["agent-*"]
  - id: reviewers-merge-and-apply
    allow:
      actors: [group:reviewers]
      actions: [branch_merge, schema_apply]
      target_branch_scope: protected
  - id: nobody-deletes-protected
    deny:
      actors: "*"
      actions: [branch_delete]
      target_branch_scope: protected
  - id: alice-deletes
    allow: { actors: alice, actions: [branch_delete, cleanup, admin] }
"#;

    fn call<'a>(
        actor: &'a str,
        action: Action,
        branch: Option<&'a str>,
        target: Option<&'a str>,
    ) -> Call<'a> {
        Call {
            actor: Some(actor),
            action,
            branch,
            target_branch: target,
        }
    }

    #[test]
    fn rules_allow_and_deny_by_actor_action_and_branch() {
        let p = compile(TEAM, "team.yaml").unwrap();
        let d = |c: Call| p.decide(&c);
        use Action::*;
        assert_eq!(
            d(call("bob", Read, Some("main"), None)).rules,
            ["everyone-reads"]
        );
        // Writes: agents only, their own branches, never a protected one
        // (the change rule names no protected scope, the branch pattern
        // excludes main).
        assert!(!d(call("bob", Change, Some("agent-1/x"), None)).allowed);
        assert!(d(call("agent-1", Change, Some("agent-7"), None)).allowed);
        assert!(!d(call("agent-1", Change, Some("main"), None)).allowed);
        assert!(d(call("agent-1", BranchCreate, Some("main"), Some("feature"))).allowed);
        assert!(
            !d(call(
                "agent-1",
                BranchCreate,
                Some("main"),
                Some("release/2")
            ))
            .allowed
        );
        // Merges into protected branches: reviewers only.
        assert!(d(call("alice", BranchMerge, Some("feature"), Some("main"))).allowed);
        assert!(!d(call("agent-1", BranchMerge, Some("feature"), Some("main"))).allowed);
        assert!(!d(call("alice", BranchMerge, Some("feature"), Some("dev"))).allowed);
        // A deny overrides an allow, and names its rule.
        let del = d(call("alice", BranchDelete, None, Some("release/1")));
        assert!(!del.allowed);
        assert_eq!(del.rules, ["nobody-deletes-protected"]);
        assert!(d(call("alice", BranchDelete, None, Some("dev"))).allowed);
        assert!(d(call("alice", Cleanup, None, None)).allowed);
        let none = d(call("agent-2", Admin, None, None));
        assert_eq!(
            (none.allowed, none.reason().as_str()),
            (false, "no rule allows it")
        );
    }

    fn refused(text: &str) -> String {
        match compile(text, "p.yaml") {
            Err(OmniError::BadRequest(m)) => m,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted:\n{text}"),
        }
    }

    #[test]
    fn bad_policies_are_refused_naming_what_is_wrong() {
        let rule =
            |body: &str| format!("version: 1\ngroups: {{ g: [a] }}\nrules:\n  - id: r\n{body}");
        for (text, why) in [
            ("version: 2\n".to_string(), "version 2"),
            ("version: 1\nrulez: []\n".into(), "rulez"),
            (rule("    allow: { actors: a, actions: [raed] }\n"), "rule 'r': unknown action \"raed\""),
            (rule("    allow: { actors: a, actions: [] }\n"), "names no action"),
            (rule("    allow: { actors: { group: h }, actions: [read] }\n"), "no group is named \"h\""),
            (rule("    allow: { actors: a, actions: [read] }\n    deny: { actors: a, actions: [read] }\n"), "exactly one of allow or deny"),
            (rule("    allow: { actors: a, actions: [cleanup], branch_scope: any }\n"), "branch_scope does not apply to action cleanup"),
            (rule("    allow: { actors: a, actions: [change], target_branch_scope: any }\n"), "target_branch_scope does not apply to action change"),
            (rule("    allow: { actors: a, actions: [read], branch_scope: some }\n"), "branch_scope \"some\""),
            (format!("{}  - id: r\n    allow: {{ actors: a, actions: [read] }}\n", rule("    allow: { actors: a, actions: [read] }\n")), "two rules are named 'r'"),
            ("version: 1\ncedar: \"permit (principal, action == Omnigraph::Action::\\\"fly\\\", resource);\"\n".into(), "fly"),
        ] {
            let m = refused(&text);
            assert!(m.contains("p.yaml") && m.contains(why), "{why}: {m}");
        }
    }

    #[test]
    fn raw_cedar_sits_beside_the_rules() {
        let text = r#"
version: 1
groups: { ops: [carol] }
rules:
  - id: ops-clean
    allow: { actors: { group: ops }, actions: [cleanup] }
cedar: |
  @id("carol-admin")
  permit (principal == Omnigraph::Actor::"carol", action == Omnigraph::Action::"admin", resource);
"#;
        let p = compile(text, "p.yaml").unwrap();
        let admin = p.decide(&call("carol", Action::Admin, None, None));
        assert_eq!(admin.rules, ["carol-admin"]);
        assert!(
            p.decide(&call("carol", Action::Cleanup, None, None))
                .allowed
        );
        assert!(!p.decide(&call("dave", Action::Cleanup, None, None)).allowed);
    }

    #[test]
    fn cases_pass_and_fail_by_their_expectation() {
        let p = compile(TEAM, "team.yaml").unwrap();
        let cases = r#"
version: 1
cases:
  - { id: a, actor: alice, action: branch_merge, branch: f, target_branch: main, expect: allow }
  - { id: b, actor: agent-1, action: branch_merge, branch: f, target_branch: main, expect: allow }
"#;
        let r = run_cases(&p, cases, "c.yaml").unwrap();
        assert_eq!(
            r.iter()
                .map(|c| (c.id.as_str(), c.passed))
                .collect::<Vec<_>>(),
            [("a", true), ("b", false)]
        );
        match run_cases(
            &p,
            "version: 1\ncases:\n  - { id: x, actor: a, action: fly, expect: deny }\n",
            "c.yaml",
        ) {
            Err(OmniError::BadRequest(m)) => {
                assert!(m.contains("case 'x'") && m.contains("fly"), "{m}")
            }
            other => panic!("{}", other.is_ok()),
        }
    }
}
