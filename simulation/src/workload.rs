//! Seeded workloads: writers with strict inserts, upserts, updates and
//! deletes over several tables, on one branch and on several; optimize
//! (index builds over every table, no row changes); branch create and
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

pub fn generate(rng: &mut Rng) -> Vec<Planned> {
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
                kind: OpKind::ApplySchema {
                    schema: format!("schema-{}", i + 2),
                },
                stmts: Vec::new(),
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
    out
}
