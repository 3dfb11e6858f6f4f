//! Seeded workloads: writers with strict inserts, upserts, updates and
//! deletes over several tables, on one branch and on several; optimize
//! (index builds over every table, no row changes); merges between
//! branches (racing writes on both sides); branch create and
//! delete; schema applies (the schema gate, exclusively). Small id pools
//! make conflicts common.

use omnigraph_actors::{OpId, OpKind};

use crate::rng::Rng;
use crate::world::{MAIN, Stmt, TABLES};

pub struct Planned {
    pub op: OpId,
    pub kind: OpKind,
    pub stmts: Vec<Stmt>,
}

const BRANCHES: &[&str] = &["b1", "b2"];
const IDS: &[&str] = &["a", "b", "c", "d"];

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len())]
}

/// A run's operations: `early` start at once, `late` once the early ones
/// have settled (the merges, and writes that race them on both sides).
pub struct Workload {
    pub early: Vec<Planned>,
    pub late: Vec<Planned>,
}

impl Workload {
    /// Every operation, early then late.
    pub fn all(self) -> Vec<Planned> {
        let mut v = self.early;
        v.extend(self.late);
        v
    }
}

// One roll per operation picks its kind by range (an optimize, data
// writes, branch operations, schema applies; then the late merges): a
// seed's mix reads off the ranges in this one place.
pub fn generate(rng: &mut Rng) -> Workload {
    let n = 4 + rng.below(9);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let op = OpId(format!("w{i:02}"));
        let roll = rng.below(20);
        let planned = if roll == 0 {
            let branch = if rng.chance(1, 2) {
                MAIN
            } else {
                pick(rng, BRANCHES)
            };
            Planned {
                op,
                kind: OpKind::Write {
                    branch: branch.to_string(),
                },
                stmts: TABLES
                    .iter()
                    .map(|t| Stmt::Index {
                        table: t.to_string(),
                    })
                    .collect(),
            }
        } else if roll < 15 {
            let branch = if rng.chance(3, 5) {
                MAIN
            } else {
                pick(rng, BRANCHES)
            };
            let mut stmts = Vec::new();
            for k in 0..1 + rng.below(3) {
                let table = pick(rng, TABLES).to_string();
                let id = pick(rng, IDS).to_string();
                let val = (i * 10 + k) as i64;
                stmts.push(match rng.below(20) {
                    0..=7 => Stmt::Insert { table, id, val },
                    8..=13 => Stmt::Upsert { table, id, val },
                    14..=16 => Stmt::Update { table, id, val },
                    _ => Stmt::Delete { table, id },
                });
            }
            Planned {
                op,
                kind: OpKind::Write {
                    branch: branch.to_string(),
                },
                stmts,
            }
        } else if roll == 19 && rng.chance(1, 2) {
            Planned {
                op,
                kind: OpKind::ApplySchema,
                stmts: vec![Stmt::Schema {
                    id: format!("schema-{}", i + 2),
                }],
            }
        } else if roll < 18 {
            let name = pick(rng, BRANCHES).to_string();
            let from = if rng.chance(2, 3) {
                MAIN.to_string()
            } else {
                pick(rng, BRANCHES).to_string()
            };
            Planned {
                op,
                kind: OpKind::CreateBranch { name, from },
                stmts: Vec::new(),
            }
        } else {
            Planned {
                op,
                kind: OpKind::DeleteBranch {
                    name: pick(rng, BRANCHES).to_string(),
                },
                stmts: Vec::new(),
            }
        };
        out.push(planned);
    }
    // Merges start once the early operations have settled, so the
    // branches have diverged, usually into main from a branch the run
    // created first; a write on each side races them.
    let mut late = Vec::new();
    if rng.chance(2, 3) {
        let source = pick(rng, BRANCHES);
        out.insert(
            0,
            Planned {
                op: OpId("w-create".into()),
                kind: OpKind::CreateBranch {
                    name: source.to_string(),
                    from: MAIN.to_string(),
                },
                stmts: Vec::new(),
            },
        );
        for k in 0..1 + rng.below(2) {
            let (from, into) = if rng.chance(3, 4) {
                (source, MAIN)
            } else {
                (MAIN, source)
            };
            late.push(Planned {
                op: OpId(format!("w-merge{k}")),
                kind: OpKind::Write {
                    branch: into.to_string(),
                },
                stmts: vec![Stmt::Merge {
                    source: from.to_string(),
                }],
            });
        }
        for (k, branch) in [MAIN, source].into_iter().enumerate() {
            late.push(Planned {
                op: OpId(format!("w-race{k}")),
                kind: OpKind::Write {
                    branch: branch.to_string(),
                },
                stmts: vec![Stmt::Upsert {
                    table: pick(rng, TABLES).to_string(),
                    id: pick(rng, IDS).to_string(),
                    val: 1000 + k as i64,
                }],
            });
        }
    }
    Workload { early: out, late }
}
