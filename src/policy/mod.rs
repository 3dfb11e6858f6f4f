//! Who may do what: a policy in Cedar (written as such, or compiled from
//! the YAML rules of [`file`]), and its decision for one call: an actor,
//! an action, the branch it acts on and the branch it targets. The engine
//! asks before any gate or I/O of a verb (handle/access.rs), so the CLI,
//! the embedded API and the server decide alike (docs/policy.md).

pub mod file;

use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{
    ActionConstraint, Authorizer, Context, Decision as CedarDecision, Entities, Entity, EntityId,
    EntityTypeName, EntityUid, PolicyId, PolicySet, Request, RestrictedExpression, Schema,
    ValidationMode, Validator,
};

use crate::error::{OmniError, Result};

/// What a call does, as a policy names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Read,
    Export,
    /// Mutations and loads.
    Change,
    SchemaApply,
    BranchCreate,
    BranchDelete,
    BranchMerge,
    /// Cleanup of history, optimize and the index collector.
    Cleanup,
    /// The graph's settings (the external-blob allow list).
    Admin,
}

/// Which branches an action's scope may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scopes {
    /// The branch the call reads or writes (a merge's source, a new
    /// branch's origin).
    pub branch: bool,
    /// The branch the call changes the shape of: a merge's target, the
    /// branch created or deleted, the branch a schema is applied to.
    pub target: bool,
}

impl Action {
    pub const ALL: [Action; 9] = [
        Action::Read,
        Action::Export,
        Action::Change,
        Action::SchemaApply,
        Action::BranchCreate,
        Action::BranchDelete,
        Action::BranchMerge,
        Action::Cleanup,
        Action::Admin,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Export => "export",
            Action::Change => "change",
            Action::SchemaApply => "schema_apply",
            Action::BranchCreate => "branch_create",
            Action::BranchDelete => "branch_delete",
            Action::BranchMerge => "branch_merge",
            Action::Cleanup => "cleanup",
            Action::Admin => "admin",
        }
    }

    pub fn scopes(self) -> Scopes {
        let (branch, target) = match self {
            Action::Read | Action::Export | Action::Change => (true, false),
            Action::BranchCreate | Action::BranchMerge => (true, true),
            Action::SchemaApply | Action::BranchDelete => (false, true),
            Action::Cleanup | Action::Admin => (false, false),
        };
        Scopes { branch, target }
    }

    /// Its place in [`Action::ALL`].
    pub fn index(self) -> usize {
        Action::ALL.iter().position(|a| *a == self).expect("listed")
    }
}

impl FromStr for Action {
    type Err = OmniError;
    fn from_str(s: &str) -> Result<Self> {
        // `optimize` and `gc` are cleanup's, as the docs say.
        let s = match s {
            "optimize" | "gc" => "cleanup",
            other => other,
        };
        Action::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                OmniError::BadRequest(format!(
                    "unknown action {s:?}: give one of {}",
                    Action::ALL.map(|a| a.name()).join(", ")
                ))
            })
    }
}

/// One call, as a policy decides it.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// None: the call names no actor (refused whenever a policy is set).
    pub actor: Option<&'a str>,
    pub action: Action,
    pub branch: Option<&'a str>,
    pub target_branch: Option<&'a str>,
}

/// A decision and the rules that made it (none: nothing allowed it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    pub allowed: bool,
    pub rules: Vec<String>,
}

impl Decision {
    /// Why, in words: the rules that decided, or the default.
    pub fn reason(&self) -> String {
        match (self.allowed, self.rules.as_slice()) {
            (_, []) => "no rule allows it".into(),
            (true, r) => format!("allowed by {}", quoted(r)),
            (false, r) => format!("denied by {}", quoted(r)),
        }
    }
}

fn quoted(rules: &[String]) -> String {
    let names: Vec<String> = rules.iter().map(|r| format!("rule '{r}'")).collect();
    names.join(", ")
}

/// The Cedar schema every policy is checked against: actors in groups,
/// one graph, the actions, and the branches a call names in its context.
pub const CEDAR_SCHEMA: &str = r#"namespace Omnigraph {
  type Branch = { name: String, protected: Bool };
  entity Group;
  entity Actor in [Group];
  entity Graph;
  action "read", "export", "change", "schema_apply", "branch_create",
         "branch_delete", "branch_merge", "cleanup", "admin" appliesTo {
    principal: [Actor],
    resource: [Graph],
    context: { branch?: Branch, target_branch?: Branch }
  };
}
"#;

/// The branches a protected list names by default.
pub const DEFAULT_PROTECTED: &str = "main";

/// A compiled policy, ready to decide.
pub struct Policy {
    set: PolicySet,
    /// By action (its place in [`Action::ALL`]), the rules whose scope
    /// may name it: a call is decided by those alone, as a rule whose scope
    /// names other actions never applies to it (the schema has no action
    /// groups, so `action in [..]` is one of equality).
    by_action: Vec<PolicySet>,
    /// Each rule's name (its `@id`, else Cedar's id), looked up once: an
    /// annotation's key is parsed on every lookup.
    names: HashMap<PolicyId, String>,
    entities: Entities,
    authorizer: Authorizer,
    /// Names and `*` patterns of the protected branches.
    protected: Vec<String>,
    actions: Vec<EntityUid>,
    actor_type: EntityTypeName,
    graph: EntityUid,
    /// The Cedar text it was made of.
    cedar: String,
    /// Where it came from (a file's path), named in errors.
    source: String,
    /// Why a call no rule allows is refused, when there is more to say.
    default_denial: Option<&'static str>,
    /// The decisions made so far, by call: a policy is a pure function of
    /// the call (its actor, action and branches), so a repeated call is
    /// answered without evaluating the rules again. A reload makes a new
    /// policy, with none.
    decided: parking_lot::Mutex<HashMap<String, Arc<Decision>>>,
}

/// Decisions kept per policy; past it, the kept ones are dropped.
pub const DECIDED_MAX: usize = 4096;

/// A call's key: each name with its length, so no two calls share one.
fn call_key(call: &Call, actor: &str) -> String {
    let mut key = String::with_capacity(64);
    for part in [Some(actor), call.branch, call.target_branch] {
        match part {
            Some(p) => {
                let _ = write!(key, "{}:{p}", p.len());
            }
            None => key.push('~'),
        }
    }
    key.push_str(call.action.name());
    key
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("source", &self.source)
            .finish()
    }
}

fn uid(ty: &str, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(
        EntityTypeName::from_str(ty).expect("a valid type name"),
        EntityId::new(id),
    )
}

/// Does `name` match the `*` pattern `pat`?
pub fn glob(pat: &str, name: &str) -> bool {
    match pat.split_once('*') {
        None => pat == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| glob(rest, &tail[i..]))
        }
    }
}

/// The rules of `set` whose action scope may name `action`; all of them
/// when the set has templates (a linked rule cannot be moved alone).
fn for_action(set: &PolicySet, action: Action) -> PolicySet {
    if set.templates().next().is_some() {
        return set.clone();
    }
    let me = uid("Omnigraph::Action", action.name());
    let applies = |p: &cedar_policy::Policy| match p.action_constraint() {
        ActionConstraint::Any => true,
        ActionConstraint::Eq(a) => a == me,
        ActionConstraint::In(list) => list.contains(&me),
    };
    let mut kept = PolicySet::new();
    for p in set.policies().filter(|p| applies(p)) {
        kept.add(p.clone())
            .expect("ids are distinct in the set they came from");
    }
    kept
}

impl Policy {
    /// A policy from Cedar text, with actors' groups and the protected
    /// branches; checked against [`CEDAR_SCHEMA`] (an unknown action, type
    /// or context attribute is refused, naming it).
    pub fn from_cedar(
        cedar: &str,
        groups: &HashMap<String, Vec<String>>,
        protected: Vec<String>,
        source: &str,
    ) -> Result<Self> {
        let bad = |why: String| OmniError::BadRequest(format!("policy {source}: {why}"));
        let set = PolicySet::from_str(cedar).map_err(|e| bad(format!("Cedar: {e}")))?;
        let (schema, _) = Schema::from_cedarschema_str(CEDAR_SCHEMA).expect("the schema parses");
        let checked = Validator::new(schema).validate(&set, ValidationMode::Strict);
        if !checked.validation_passed() {
            let errors: Vec<String> = checked
                .validation_errors()
                .map(|e| {
                    let rule = set
                        .policy(e.policy_id())
                        .and_then(|p| p.annotation("id"))
                        .map(|id| format!("rule '{id}'"))
                        .unwrap_or_else(|| format!("{}", e.policy_id()));
                    format!("{rule}: {e}")
                })
                .collect();
            return Err(bad(errors.join("; ")));
        }
        // Each actor with the groups it is in.
        let mut parents: HashMap<&str, HashSet<EntityUid>> = HashMap::new();
        for (group, actors) in groups {
            for a in actors {
                parents
                    .entry(a)
                    .or_default()
                    .insert(uid("Omnigraph::Group", group));
            }
        }
        let entities = parents
            .into_iter()
            .map(|(a, p)| Entity::new_no_attrs(uid("Omnigraph::Actor", a), p))
            .chain(
                groups
                    .keys()
                    .map(|g| Entity::new_no_attrs(uid("Omnigraph::Group", g), HashSet::new())),
            );
        let entities =
            Entities::from_entities(entities, None).map_err(|e| bad(format!("groups: {e}")))?;
        let by_action = Action::ALL.iter().map(|a| for_action(&set, *a)).collect();
        let names = set
            .policies()
            .map(|p| {
                let name = p.annotation("id").map(str::to_string);
                (p.id().clone(), name.unwrap_or_else(|| p.id().to_string()))
            })
            .collect();
        Ok(Self {
            set,
            by_action,
            names,
            entities,
            authorizer: Authorizer::new(),
            protected,
            actions: Action::ALL
                .iter()
                .map(|a| uid("Omnigraph::Action", a.name()))
                .collect(),
            actor_type: EntityTypeName::from_str("Omnigraph::Actor").expect("a valid type name"),
            graph: uid("Omnigraph::Graph", "graph"),
            cedar: cedar.to_string(),
            source: source.to_string(),
            default_denial: None,
            decided: Default::default(),
        })
    }

    /// The policy of a server with tokens and no policy file: every actor
    /// may read, nothing else.
    pub fn read_only() -> Self {
        let cedar = "@id(\"default-deny: tokens and no policy allow only read\")\npermit (principal, action == Omnigraph::Action::\"read\", resource);\n";
        let mut p = Self::from_cedar(
            cedar,
            &HashMap::new(),
            vec![DEFAULT_PROTECTED.into()],
            "(the default: read only)",
        )
        .expect("the read-only policy compiles");
        p.default_denial = Some(
            "default-deny: a server with tokens and no policy allows only reads; give it --policy FILE",
        );
        p
    }

    /// The policy in `path`: Cedar when it ends in `.cedar`, else the YAML
    /// rules of [`file`].
    pub fn load(path: &std::path::Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            OmniError::BadRequest(format!("cannot read the policy {}: {e}", path.display()))
        })?;
        let source = path.display().to_string();
        match path.extension().and_then(|e| e.to_str()) {
            Some("cedar") => Self::from_cedar(
                &text,
                &HashMap::new(),
                vec![DEFAULT_PROTECTED.into()],
                &source,
            ),
            _ => file::compile(&text, &source),
        }
    }

    /// The Cedar text the policy is made of.
    pub fn cedar(&self) -> &str {
        &self.cedar
    }

    /// Where the policy came from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The number of its Cedar policies (its rules).
    pub fn rules(&self) -> usize {
        self.set.policies().count()
    }

    pub fn is_protected(&self, branch: &str) -> bool {
        self.protected.iter().any(|p| glob(p, branch))
    }

    fn branch(&self, name: &str) -> RestrictedExpression {
        RestrictedExpression::new_record([
            (
                "name".to_string(),
                RestrictedExpression::new_string(name.to_string()),
            ),
            (
                "protected".to_string(),
                RestrictedExpression::new_bool(self.is_protected(name)),
            ),
        ])
        .expect("two distinct fields")
    }

    /// The decision for `call`: allowed only when a rule allows it and no
    /// rule denies it; a call with no actor never is.
    pub fn decide(&self, call: &Call) -> Decision {
        (*self.decided(call)).clone()
    }

    fn decided(&self, call: &Call) -> Arc<Decision> {
        let Some(actor) = call.actor else {
            return Arc::new(Decision {
                allowed: false,
                rules: Vec::new(),
            });
        };
        let key = call_key(call, actor);
        if let Some(d) = self.decided.lock().get(&key) {
            return d.clone();
        }
        let d = Arc::new(self.evaluate(call, actor));
        let mut kept = self.decided.lock();
        if kept.len() >= DECIDED_MAX {
            kept.clear();
        }
        kept.insert(key, d.clone());
        d
    }

    /// Cedar's decision for `call`.
    fn evaluate(&self, call: &Call, actor: &str) -> Decision {
        let mut context = Vec::with_capacity(2);
        if let Some(b) = call.branch {
            context.push(("branch".to_string(), self.branch(b)));
        }
        if let Some(t) = call.target_branch {
            context.push(("target_branch".to_string(), self.branch(t)));
        }
        let context = Context::from_pairs(context).expect("distinct keys");
        let principal =
            EntityUid::from_type_name_and_id(self.actor_type.clone(), EntityId::new(actor));
        let request = Request::new(
            principal,
            self.actions[call.action.index()].clone(),
            self.graph.clone(),
            context,
            None,
        )
        .expect("a request without a schema is valid");
        let response = self.authorizer.is_authorized(
            &request,
            &self.by_action[call.action.index()],
            &self.entities,
        );
        let rules = response
            .diagnostics()
            .reason()
            .map(|id| {
                self.names
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| id.to_string())
            })
            .collect();
        Decision {
            allowed: response.decision() == CedarDecision::Allow,
            rules,
        }
    }

    /// `Ok` when `call` is allowed, else `PolicyDenied` naming the actor,
    /// the action, the branches and why.
    pub fn check(&self, call: &Call) -> Result<()> {
        let d = self.decided(call);
        if d.allowed {
            return Ok(());
        }
        Err(OmniError::PolicyDenied {
            actor: call.actor.unwrap_or("").to_string(),
            action: call.action.name().to_string(),
            branch: call.branch.map(str::to_string),
            target_branch: call.target_branch.map(str::to_string),
            reason: match (call.actor, self.default_denial) {
                (None, _) => "no actor: with a policy in force every call names its actor (--as, OpenOptions::actor, a token)".into(),
                (Some(_), Some(why)) if d.rules.is_empty() => why.into(),
                (Some(_), _) => d.reason(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        assert!(glob("main", "main"));
        assert!(!glob("main", "mainx"));
        assert!(glob("release/*", "release/1.0"));
        assert!(!glob("release/*", "dev"));
        assert!(glob("*", "anything"));
        assert!(glob("a*b*c", "a-b-xc"));
        assert!(!glob("a*b*c", "a-b-x"));
    }

    #[test]
    fn every_action_has_its_name() {
        for a in Action::ALL {
            assert_eq!(a.name().parse::<Action>().unwrap(), a);
        }
        assert_eq!("gc".parse::<Action>().unwrap(), Action::Cleanup);
        match "drop".parse::<Action>() {
            Err(OmniError::BadRequest(m)) => assert!(m.contains("\"drop\""), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_read_only_policy_allows_reads_alone() {
        let p = Policy::read_only();
        for a in Action::ALL {
            let call = Call {
                actor: Some("anyone"),
                action: a,
                branch: Some("main"),
                target_branch: None,
            };
            assert_eq!(p.decide(&call).allowed, a == Action::Read, "{a:?}");
        }
        let nobody = Call {
            actor: None,
            action: Action::Read,
            branch: Some("main"),
            target_branch: None,
        };
        match p.check(&nobody) {
            Err(OmniError::PolicyDenied { reason, .. }) => assert!(reason.contains("no actor")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_kept_decision_answers_only_the_same_call() {
        let cedar = "@id(\"ab-on-c\")\npermit (principal == Omnigraph::Actor::\"ab\", action, resource) when { context has branch && context.branch.name == \"c\" };";
        let p = Policy::from_cedar(cedar, &HashMap::new(), vec![], "t").unwrap();
        let call = |actor, branch, target| Call {
            actor: Some(actor),
            action: Action::Read,
            branch,
            target_branch: target,
        };
        for _ in 0..2 {
            assert!(p.decide(&call("ab", Some("c"), None)).allowed);
            assert!(!p.decide(&call("a", Some("bc"), None)).allowed);
            assert!(!p.decide(&call("ab", None, Some("c"))).allowed);
            assert_eq!(p.decide(&call("ab", Some("c"), None)).rules, ["ab-on-c"]);
        }
    }

    #[test]
    fn each_action_is_decided_by_every_rule_whose_scope_names_it() {
        // One rule of each shape of action scope: any action, one action,
        // a list; and a deny of any action. The rules a decision names
        // show which were weighed.
        let cedar = r#"@id("any-on-x")
permit (principal, action, resource) when { context has branch && context.branch.name == "x" };
@id("one")
permit (principal, action == Omnigraph::Action::"export", resource);
@id("list")
permit (principal, action in [Omnigraph::Action::"read", Omnigraph::Action::"export"], resource);
@id("nobody-on-y")
forbid (principal == Omnigraph::Actor::"nobody", action, resource) when { context has branch && context.branch.name == "y" };
"#;
        let p = Policy::from_cedar(cedar, &HashMap::new(), vec![], "t").unwrap();
        for a in Action::ALL {
            let on = |actor, branch| Call {
                actor: Some(actor),
                action: a,
                branch: Some(branch),
                target_branch: None,
            };
            let mut want: Vec<&str> = Vec::new();
            if matches!(a, Action::Read | Action::Export) {
                want.push("list");
            }
            if a == Action::Export {
                want.push("one");
            }
            let mut got = p.decide(&on("someone", "w")).rules;
            got.sort();
            want.sort();
            assert_eq!(got, want, "{a:?}");
            assert_eq!(
                p.decide(&on("someone", "w")).allowed,
                !want.is_empty(),
                "{a:?}"
            );
            assert!(p.decide(&on("someone", "x")).allowed, "{a:?}");
            let denied = p.decide(&on("nobody", "y"));
            assert_eq!(
                (denied.allowed, denied.rules),
                (false, vec!["nobody-on-y".to_string()]),
                "{a:?}"
            );
        }
    }

    #[test]
    fn raw_cedar_is_checked_against_the_schema() {
        let typo =
            "@id(\"r\")\npermit (principal, action == Omnigraph::Action::\"raed\", resource);";
        match Policy::from_cedar(typo, &HashMap::new(), vec![], "p.cedar") {
            Err(OmniError::BadRequest(m)) => {
                assert!(m.contains("p.cedar") && m.contains("raed"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        let unguarded =
            "@id(\"r\")\npermit (principal, action, resource) when { context.branch.protected };";
        match Policy::from_cedar(unguarded, &HashMap::new(), vec![], "p.cedar") {
            Err(OmniError::BadRequest(m)) => assert!(m.contains("rule 'r'"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
