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

/// A run's operations in phases, each started once the one before is over.
/// Mostly: the early operations; the merges, and writes that race them on
/// both sides; a write of every table on each merge's target, which finds
/// what the merge took from its source.
pub struct Workload {
    pub phases: Vec<Vec<Planned>>,
}

impl Workload {
    /// Every operation, phase by phase.
    pub fn all(self) -> Vec<Planned> {
        self.phases.into_iter().flatten().collect()
    }
}

fn write(op: &str, branch: &str, stmts: Vec<Stmt>) -> Planned {
    Planned {
        op: OpId(op.to_string()),
        kind: OpKind::Write {
            branch: branch.to_string(),
        },
        stmts,
    }
}

/// An upsert of row `id` into every table.
fn every_table(id: &str, val: i64) -> Vec<Stmt> {
    TABLES
        .iter()
        .map(|t| Stmt::Upsert {
            table: t.to_string(),
            id: id.to_string(),
            val,
        })
        .collect()
}

/// A group commit (see [`Stmt::Member`]) of `first` and one to three more
/// members, each an upsert then a statement that may fail (a strict insert,
/// update or delete over the small id pool): a member refused at its
/// second statement has written something the group must leave out.
fn group(later: &mut Rng, i: usize, first: Vec<Stmt>) -> Vec<Stmt> {
    let mut out = vec![Stmt::Member];
    out.extend(first);
    for m in 0..1 + later.below(3) {
        let val = (i * 10 + 5 + m) as i64;
        out.push(Stmt::Member);
        out.push(Stmt::Upsert {
            table: pick(later, TABLES).to_string(),
            id: pick(later, IDS).to_string(),
            val,
        });
        let table = pick(later, TABLES).to_string();
        let id = pick(later, IDS).to_string();
        out.push(match later.below(3) {
            0 => Stmt::Insert { table, id, val },
            1 => Stmt::Update { table, id, val },
            _ => Stmt::Delete { table, id },
        });
    }
    out
}

/// One step at a time: main writes every table; a branch is made from it
/// and writes one table; the merge into main takes that table as the
/// branch has it; main writes every table again. With a long linger, main's
/// table gates stay locked by the process that wrote them throughout.
fn merge_takes_a_table(later: &mut Rng) -> Workload {
    let table = pick(later, TABLES).to_string();
    let create = Planned {
        op: OpId("w-create".into()),
        kind: OpKind::CreateBranch {
            name: BRANCHES[0].to_string(),
            from: MAIN.to_string(),
        },
        stmts: Vec::new(),
    };
    let source = vec![Stmt::Upsert {
        table,
        id: IDS[1].to_string(),
        val: 1,
    }];
    let merge = vec![Stmt::Merge {
        source: BRANCHES[0].to_string(),
    }];
    Workload {
        phases: vec![
            vec![write("w-pre", MAIN, every_table(IDS[0], 0))],
            vec![create],
            vec![write("w-source", BRANCHES[0], source)],
            vec![write("w-merge0", MAIN, merge)],
            vec![write("w-after0", MAIN, every_table(IDS[0], 2))],
        ],
    }
}

/// One step at a time: a branch is made from main and writes every
/// table; a schema apply migrates every branch (moving the branch's head
/// under the schema gate alone); the branch writes every table again.
/// With a long linger, the branch's gate stays locked by the process that
/// wrote it throughout, so the head it knows must not outlive the apply.
fn schema_apply_moves_a_branch() -> Workload {
    let branch = BRANCHES[0];
    let create = Planned {
        op: OpId("w-create".into()),
        kind: OpKind::CreateBranch {
            name: branch.to_string(),
            from: MAIN.to_string(),
        },
        stmts: Vec::new(),
    };
    let apply = Planned {
        op: OpId("w-apply".into()),
        kind: OpKind::ApplySchema,
        stmts: vec![Stmt::Schema {
            id: "schema-apply".into(),
        }],
    };
    Workload {
        phases: vec![
            vec![create],
            vec![write("w-before", branch, every_table(IDS[0], 1))],
            vec![apply],
            vec![write("w-after", branch, every_table(IDS[1], 2))],
        ],
    }
}

// One roll per operation picks its kind by range (an optimize, data
// writes, branch operations, schema applies; then the late merges): a
// seed's mix reads off the ranges in this one place. Choices added later
// draw from `later`, a stream of their own, so that the seed's other
// choices stay what they were.
pub fn generate(rng: &mut Rng, later: &mut Rng) -> Workload {
    if later.chance(1, 8) {
        return merge_takes_a_table(later);
    }
    if later.chance(1, 8) {
        return schema_apply_moves_a_branch();
    }
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
            // Some writes are a group commit: these statements are its
            // first member, and more callers queued beside it.
            if later.chance(1, 3) {
                stmts = group(later, i, stmts);
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
        // Usually first; else among the others, so that main's writes
        // before it are part of the merge base.
        let at = if later.chance(1, 2) {
            0
        } else {
            later.below(out.len() + 1)
        };
        out.insert(
            at,
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
    // (No draws from the seed's stream: every other choice stays as it was.)
    let mut targets: Vec<String> = late
        .iter()
        .filter(|p| matches!(p.stmts.as_slice(), [Stmt::Merge { .. }]))
        .filter_map(|p| match &p.kind {
            OpKind::Write { branch } => Some(branch.clone()),
            _ => None,
        })
        .collect();
    targets.dedup();
    let after = targets
        .into_iter()
        .enumerate()
        .map(|(k, branch)| {
            write(
                &format!("w-after{k}"),
                &branch,
                every_table(IDS[0], 2000 + k as i64),
            )
        })
        .collect();
    Workload {
        phases: vec![out, late, after],
    }
}
