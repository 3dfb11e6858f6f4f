//! Checked read plans kept for the queries after them. A warm process runs
//! the same few query texts over and over (an application's `.gq` file, a
//! server's routes); parsing and checking one is tens of microseconds, which
//! is most of a warm key lookup. A text and query name are parsed once; the
//! declaration's plan is checked once per schema it runs against (the past
//! type-checks against the schema it accepted, so one text may hold plans
//! for several). Errors are not kept: a bad text is parsed again, and says
//! so again, each time.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use parking_lot::Mutex;

use super::ast::QueryDecl;
use super::ir::Plan;
use super::{check, parser};
use crate::compiler::catalog::Catalog;
use crate::error::Result;

/// Query text kept, in bytes, across every entry: past it the cache starts
/// over (an application has a few texts; a stream of generated ones should
/// not grow the process without bound).
pub const TEXT_BYTES_MAX: usize = 8 << 20;

/// A text longer than this is parsed each time rather than kept.
pub const TEXT_BYTES_ONE_MAX: usize = 1 << 20;

/// Plans kept per declaration, one per schema (a schema apply adds one).
pub const SCHEMAS_PER_DECL_MAX: usize = 4;

/// One query of one text, parsed, with its plans by schema id.
pub struct Parsed {
    source: String,
    name: String,
    pub decl: Arc<QueryDecl>,
    plans: Mutex<Vec<(String, Arc<Plan>)>>,
}

impl Parsed {
    /// The plan of this query against the schema `schema_id`, whose catalog
    /// is `catalog`.
    pub fn plan(&self, schema_id: &str, catalog: &Catalog) -> Result<Arc<Plan>> {
        if let Some((_, p)) = self.plans.lock().iter().find(|(id, _)| id == schema_id) {
            return Ok(p.clone());
        }
        let plan = Arc::new(check::check(catalog, &self.decl)?);
        let mut plans = self.plans.lock();
        if plans.len() >= SCHEMAS_PER_DECL_MAX {
            plans.remove(0);
        }
        plans.push((schema_id.to_string(), plan.clone()));
        Ok(plan)
    }
}

#[derive(Default)]
pub struct Plans {
    inner: Mutex<Entries>,
    hasher: std::hash::RandomState,
}

#[derive(Default)]
struct Entries {
    by_hash: HashMap<u64, Arc<Parsed>>,
    text_bytes: usize,
}

impl Plans {
    /// Query `name` of `source`, parsed (once per text and name).
    pub fn parsed(&self, source: &str, name: &str) -> Result<Arc<Parsed>> {
        let key = self.hasher.hash_one((source, name));
        if let Some(p) = self.inner.lock().by_hash.get(&key)
            && p.source == source
            && p.name == name
        {
            return Ok(p.clone());
        }
        let file = parser::parse(source)?;
        let decl = check::find(&file, name)?.clone();
        let parsed = Arc::new(Parsed {
            source: source.to_string(),
            name: name.to_string(),
            decl: Arc::new(decl),
            plans: Mutex::default(),
        });
        if source.len() <= TEXT_BYTES_ONE_MAX {
            let mut e = self.inner.lock();
            if e.text_bytes + source.len() > TEXT_BYTES_MAX {
                *e = Entries::default();
            }
            e.text_bytes += source.len();
            // A hash collision replaces the other entry: it is parsed again
            // when it comes back.
            if let Some(old) = e.by_hash.insert(key, parsed.clone()) {
                e.text_bytes -= old.source.len();
            }
        }
        Ok(parsed)
    }

    /// How many texts and names are kept.
    pub fn len(&self) -> usize {
        self.inner.lock().by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "query a() { match { $p: Person } return { $p.name } }\n\
                        query b() { match { $p: Person } return { count($p) } }";

    #[test]
    fn a_text_and_name_are_parsed_once_and_each_name_is_its_own_entry() {
        let plans = Plans::default();
        let a = plans.parsed(TEXT, "a").unwrap();
        assert!(Arc::ptr_eq(&a, &plans.parsed(TEXT, "a").unwrap()));
        let b = plans.parsed(TEXT, "b").unwrap();
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(b.decl.name, "b");
        assert_eq!(plans.len(), 2);
        // Another text with the same name is another query.
        let other = TEXT.replace("$p.name", "$p.age");
        let a2 = plans.parsed(&other, "a").unwrap();
        assert!(!Arc::ptr_eq(&a, &a2));
        assert_eq!(plans.len(), 3);
    }

    #[test]
    fn a_plan_is_checked_once_per_schema() {
        use crate::compiler::schema::compile;
        let with_age = compile("node Person { name: String @key\n age: I32? }").unwrap();
        let without = compile("node Person { name: String @key }").unwrap();
        let plans = Plans::default();
        let q = plans
            .parsed("query a() { match { $p: Person } return { $p.age } }", "a")
            .unwrap();
        let p1 = q.plan("s1", &with_age).unwrap();
        assert!(Arc::ptr_eq(&p1, &q.plan("s1", &with_age).unwrap()));
        // Another schema checks again, and may refuse what the first took.
        match q.plan("s2", &without) {
            Err(crate::error::OmniError::Type { code, .. }) => {
                assert_eq!(code, check::Code::UnknownProperty.id())
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        assert!(Arc::ptr_eq(&p1, &q.plan("s1", &with_age).unwrap()));
        for i in 0..SCHEMAS_PER_DECL_MAX {
            q.plan(&format!("t{i}"), &with_age).unwrap();
        }
        assert_eq!(q.plans.lock().len(), SCHEMAS_PER_DECL_MAX);
        assert!(!Arc::ptr_eq(&p1, &q.plan("s1", &with_age).unwrap()));
    }

    #[test]
    fn errors_are_not_kept() {
        use crate::error::OmniError;
        let plans = Plans::default();
        for _ in 0..2 {
            match plans.parsed(TEXT, "c") {
                Err(OmniError::Type { code, .. }) => {
                    assert_eq!(code, check::Code::UnknownQuery.id())
                }
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("no query c"),
            }
            match plans.parsed("query (", "a") {
                Err(OmniError::Parse { line, .. }) => assert_eq!(line, 1),
                Err(e) => panic!("{e}"),
                Ok(_) => panic!("not a query"),
            }
        }
        assert_eq!(plans.len(), 0);
    }

    #[test]
    fn the_kept_text_is_bounded() {
        let plans = Plans::default();
        let big = format!("{TEXT}\n//{}", "x".repeat(TEXT_BYTES_ONE_MAX));
        plans.parsed(&big, "a").unwrap();
        assert_eq!(plans.len(), 0, "a text over the one-text bound is not kept");
        let half = format!(
            "{TEXT}\n//{}",
            "y".repeat(TEXT_BYTES_ONE_MAX - TEXT.len() - 8)
        );
        let n = TEXT_BYTES_MAX / half.len();
        for i in 0..n + 1 {
            plans.parsed(&format!("{half}{i}"), "a").unwrap();
        }
        let kept = plans.inner.lock().text_bytes;
        assert!(kept <= TEXT_BYTES_MAX, "{kept}");
        assert!(plans.len() < n + 1);
    }
}
