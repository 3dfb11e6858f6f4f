//! Who the command line acts as and under which policy: `--as ACTOR` (else
//! `OMNIGRAPH_ACTOR`) and `--policy FILE` (else `OMNIGRAPH_POLICY`), set
//! once per process and applied to every graph a command opens.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use omnigraph::policy::Policy;
use omnigraph::{OmniError, Omnigraph, OpenOptions};

type Result<T> = std::result::Result<T, OmniError>;

#[derive(Default)]
struct Access {
    actor: Option<String>,
    policy: Option<Arc<Policy>>,
    policy_path: Option<PathBuf>,
}

static ACCESS: OnceLock<Access> = OnceLock::new();

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// Read the actor and load the policy the flags (or the environment) name.
pub fn configure(actor: Option<String>, policy: Option<PathBuf>) -> Result<()> {
    let actor = non_empty(actor).or_else(|| non_empty(std::env::var("OMNIGRAPH_ACTOR").ok()));
    let policy_path =
        policy.or_else(|| non_empty(std::env::var("OMNIGRAPH_POLICY").ok()).map(PathBuf::from));
    let policy = match &policy_path {
        Some(p) => Some(Arc::new(Policy::load(p)?)),
        None => None,
    };
    let _ = ACCESS.set(Access {
        actor,
        policy,
        policy_path,
    });
    Ok(())
}

fn access() -> &'static Access {
    ACCESS.get_or_init(Access::default)
}

/// The policy file in force, if any (`serve` reloads it on SIGHUP).
pub fn policy_path() -> Option<PathBuf> {
    access().policy_path.clone()
}

/// The policy in force, if any.
pub fn policy() -> Option<Arc<Policy>> {
    access().policy.clone()
}

pub fn options() -> OpenOptions {
    let a = access();
    OpenOptions {
        actor: a.actor.clone(),
        policy: a.policy.clone(),
        ..Default::default()
    }
}

pub async fn open(uri: &str) -> Result<Omnigraph> {
    Omnigraph::open_with(uri, options()).await
}

pub async fn open_read_only(uri: &str) -> Result<Omnigraph> {
    Omnigraph::open_read_only_with(uri, options()).await
}

pub async fn init(uri: &str, schema: &str) -> Result<Omnigraph> {
    Omnigraph::init_with(uri, schema, options()).await
}
