//! Differential test of the query engine: random graphs and random queries
//! of every supported shape, each answered by the engine and by a naive
//! evaluator written here from the language's definition. The two must agree
//! on every row (in order, where the query orders).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use omnigraph::{LoadMode, Omnigraph, Target};
use serde_json::{Value, json};

const SCHEMA: &str = "interface Named { name: String @key\n age: I32? }\nnode Person implements Named { }\nnode Robot implements Named { model: I32? }\nedge Knows: Person -> Person { w: I32? }";

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Graph {
    names: Vec<String>,
    ages: Vec<Option<i64>>,
    /// Robots (name, age): another implementor of Named; some share a
    /// person's name, so their keyed ids coincide across the types.
    robots: Vec<(String, Option<i64>)>,
    /// (src, dst, w) in load order.
    edges: Vec<(usize, usize, Option<i64>)>,
    /// Each edge's id, beside `edges`.
    edge_ids: Vec<String>,
}

impl Graph {
    fn random(rng: &mut Rng) -> Self {
        let n = 3 + rng.below(12) as usize;
        let names = (0..n).map(|i| format!("n{i:02}")).collect();
        let ages = (0..n)
            .map(|_| {
                if rng.below(5) == 0 {
                    None
                } else {
                    Some(rng.below(6) as i64 * 10)
                }
            })
            .collect();
        let m = rng.below(3 * n as u64) as usize;
        let edges: Vec<(usize, usize, Option<i64>)> = (0..m)
            .map(|_| {
                let s = rng.below(n as u64) as usize;
                let d = rng.below(n as u64) as usize; // self loops and parallel edges allowed
                let w = if rng.below(4) == 0 {
                    None
                } else {
                    Some(rng.below(5) as i64)
                };
                (s, d, w)
            })
            .collect();
        let mut robot_names = BTreeSet::new();
        for i in 0..rng.below(5) {
            robot_names.insert(if rng.below(2) == 0 {
                format!("n{:02}", rng.below(n as u64))
            } else {
                format!("r{i:02}")
            });
        }
        let robots = robot_names
            .into_iter()
            .map(|r| {
                let age = (rng.below(3) != 0).then(|| rng.below(6) as i64 * 10);
                (r, age)
            })
            .collect();
        let edge_ids = (0..m).map(|k| format!("e{k:03}")).collect();
        Self {
            names,
            ages,
            robots,
            edge_ids,
            edges,
        }
    }

    fn jsonl(&self) -> String {
        let mut s = String::new();
        for (i, n) in self.names.iter().enumerate() {
            let age = self.ages[i].map_or("null".to_string(), |a| a.to_string());
            s.push_str(&format!(
                "{{\"type\":\"Person\",\"data\":{{\"name\":\"{n}\",\"age\":{age}}}}}\n"
            ));
        }
        for (r, age) in &self.robots {
            let age = age.map_or("null".to_string(), |a| a.to_string());
            s.push_str(&format!(
                "{{\"type\":\"Robot\",\"data\":{{\"name\":\"{r}\",\"age\":{age}}}}}\n"
            ));
        }
        for (k, (a, b, w)) in self.edges.iter().enumerate() {
            let w = w.map_or("null".to_string(), |w| w.to_string());
            s.push_str(&format!(
                "{{\"edge\":\"Knows\",\"from\":\"{}\",\"to\":\"{}\",\"data\":{{\"id\":\"{}\",\"w\":{w}}}}}\n",
                self.names[*a], self.names[*b], self.edge_ids[k]
            ));
        }
        s
    }

    fn adj(&self, dir: &str, n: usize) -> Vec<usize> {
        let mut out = BTreeSet::new();
        for (a, b, _) in &self.edges {
            if (dir == "out" || dir == "both") && *a == n {
                out.insert(*b);
            }
            if (dir == "in" || dir == "both") && *b == n {
                out.insert(*a);
            }
        }
        out.into_iter().collect()
    }

    /// Nodes first reached at a hop in min..=max (start visited at hop 0).
    fn reach(&self, dir: &str, start: usize, min: u32, max: Option<u32>) -> BTreeSet<usize> {
        let mut dist = BTreeMap::from([(start, 0u32)]);
        let mut q = VecDeque::from([start]);
        while let Some(n) = q.pop_front() {
            let d = dist[&n];
            if max.is_some_and(|m| d >= m) {
                continue;
            }
            for t in self.adj(dir, n) {
                if let std::collections::btree_map::Entry::Vacant(e) = dist.entry(t) {
                    e.insert(d + 1);
                    q.push_back(t);
                }
            }
        }
        dist.into_iter()
            .filter(|(_, d)| *d >= min && max.is_none_or(|m| *d <= m))
            .map(|(n, _)| n)
            .collect()
    }

    fn age(&self, n: usize) -> Value {
        self.ages[n].map_or(Value::Null, |a| json!(a))
    }
}

/// A query in .gq form, its expected rows, and whether order matters.
struct Case {
    gq: String,
    expected: Vec<Vec<Value>>,
    ordered: bool,
}

fn sort_key(v: &Value) -> (u8, i64, String) {
    match v {
        Value::Null => (0, 0, String::new()),
        Value::Number(n) => (1, n.as_i64().unwrap_or(0), String::new()),
        Value::String(s) => (2, 0, s.clone()),
        other => (3, 0, other.to_string()),
    }
}

fn case(g: &Graph, rng: &mut Rng) -> Case {
    let n = g.names.len();
    let start = rng.below(n as u64) as usize;
    let sname = &g.names[start];
    match rng.below(10) {
        0 => {
            // Variable-length reachability from one person.
            let min = rng.below(3) as u32;
            let max = if rng.below(3) == 0 {
                None
            } else {
                Some(min.max(1) + rng.below(3) as u32)
            };
            let bounds = match max {
                Some(m) => format!("{{{min},{m}}}"),
                None => format!("{{{min},}}"),
            };
            let dir = if rng.below(3) == 0 { "both" } else { "out" };
            let pat = if dir == "both" {
                format!("<knows>{bounds}")
            } else {
                format!("knows{bounds}")
            };
            let expected = g
                .reach(dir, start, min, max)
                .into_iter()
                .map(|x| vec![json!(g.names[x])])
                .collect();
            Case {
                gq: format!(
                    "query q() {{ match {{ $p: Person {{ name: \"{sname}\" }}\n $p {pat} $x }} return {{ $x.name }} order {{ $x.name }} }}"
                ),
                expected,
                ordered: true,
            }
        }
        1 => {
            // One hop with a filter on the destination, all sources.
            let k = rng.below(6) as i64 * 10;
            let mut expected = Vec::new();
            for p in 0..n {
                for f in g.reach("out", p, 1, Some(1)) {
                    if g.ages[f].is_some_and(|a| a > k) {
                        expected.push(vec![json!(g.names[p]), json!(g.names[f])]);
                    }
                }
            }
            Case {
                gq: format!(
                    "query q() {{ match {{ $p: Person\n $p knows $f\n $f.age > {k} }} return {{ $p.name, $f.name }} }}"
                ),
                expected,
                ordered: false,
            }
        }
        2 if rng.below(2) == 0 => {
            // Anti-join on the bare pattern (self loops do not count: the
            // start is visited at hop 0).
            let dir = if rng.below(2) == 0 { "both" } else { "out" };
            let pat = if dir == "both" { "<knows>" } else { "knows" };
            let expected = (0..n)
                .filter(|&p| g.reach(dir, p, 1, Some(1)).is_empty())
                .map(|p| vec![json!(g.names[p])])
                .collect();
            Case {
                gq: format!(
                    "query q() {{ match {{ $p: Person\n not {{ $p {pat} $_ }} }} return {{ $p.name }} }}"
                ),
                expected,
                ordered: false,
            }
        }
        2 => {
            // Anti-join: people who know nobody (or nobody older than k).
            let k = rng.below(6) as i64 * 10;
            let expected = (0..n)
                .filter(|&p| {
                    !g.reach("out", p, 1, Some(1))
                        .iter()
                        .any(|&f| g.ages[f].is_some_and(|a| a >= k))
                })
                .map(|p| vec![json!(g.names[p])])
                .collect();
            Case {
                gq: format!(
                    "query q() {{ match {{ $p: Person\n not {{ $p knows $f\n $f.age >= {k} }} }} return {{ $p.name }} }}"
                ),
                expected,
                ordered: false,
            }
        }
        3 => {
            // Edge binding: one row per edge, parallel edges included.
            let mut expected: Vec<Vec<Value>> = g
                .edges
                .iter()
                .enumerate()
                .filter(|(_, (a, _, _))| *a == start)
                .map(|(k, (_, b, w))| {
                    vec![
                        json!(g.names[*b]),
                        w.map_or(Value::Null, |w| json!(w)),
                        json!(g.edge_ids[k]),
                    ]
                })
                .collect();
            // order { $e.w desc }, then ties by the ids of $p, $f, $e (binding order).
            expected.sort_by(|x, y| {
                let o = sort_key(&y[1]).cmp(&sort_key(&x[1]));
                o.then_with(|| x[0].as_str().cmp(&y[0].as_str()))
                    .then_with(|| x[2].as_str().cmp(&y[2].as_str()))
            });
            Case {
                gq: format!(
                    "query q() {{ match {{ $p: Person {{ name: \"{sname}\" }}\n $p $e:knows $f }} return {{ $f.name, $e.w, $e.id }} order {{ $e.w desc }} }}"
                ),
                expected,
                ordered: true,
            }
        }
        4 => {
            // Group by source: out-degree (distinct neighbours), ordered.
            let mut expected: Vec<Vec<Value>> = (0..n)
                .filter_map(|p| {
                    let c = g.reach("out", p, 1, Some(1)).len();
                    (c > 0).then(|| vec![json!(g.names[p]), json!(c)])
                })
                .collect();
            expected.sort_by(|x, y| {
                y[1].as_i64()
                    .cmp(&x[1].as_i64())
                    .then_with(|| x[0].as_str().cmp(&y[0].as_str()))
            });
            Case {
                gq: "query q() { match { $p: Person\n $p knows $f } return { $p.name, count($f) as n } order { n desc, $p.name } }".into(),
                expected,
                ordered: true,
            }
        }
        5 => {
            // Order with NULLs and a limit; ties broken by id.
            let desc = rng.below(2) == 0;
            let limit = 1 + rng.below(n as u64) as usize;
            let mut all: Vec<usize> = (0..n).collect();
            all.sort_by(|&x, &y| {
                let (a, b) = (sort_key(&g.age(x)), sort_key(&g.age(y)));
                let o = if desc { b.cmp(&a) } else { a.cmp(&b) };
                o.then_with(|| g.names[x].cmp(&g.names[y]))
            });
            let expected = all
                .into_iter()
                .take(limit)
                .map(|p| vec![json!(g.names[p]), g.age(p)])
                .collect();
            let dir = if desc { "desc" } else { "asc" };
            Case {
                gq: format!(
                    "query q() {{ match {{ $p: Person }} return {{ $p.name, $p.age }} order {{ $p.age {dir} }} limit {limit} }}"
                ),
                expected,
                ordered: true,
            }
        }
        6 => {
            // Two bound ends: does p reach f within two hops?
            let mut expected = Vec::new();
            for p in 0..n {
                let r = g.reach("out", p, 1, Some(2));
                for f in 0..n {
                    if r.contains(&f) && g.ages[p] == g.ages[f] && g.ages[p].is_some() {
                        expected.push(vec![json!(g.names[p]), json!(g.names[f])]);
                    }
                }
            }
            Case {
                gq: "query q() { match { $p: Person\n $f: Person\n $p.age = $f.age\n $p knows{1,2} $f } return { $p.name, $f.name } }".into(),
                expected,
                ordered: false,
            }
        }
        8 => {
            // An interface binding: people and robots, filtered and ordered
            // by a Named property, ties by type then id, with a limit.
            let k = rng.below(6) as i64 * 10;
            let limit = 1 + rng.below(n as u64 + 4) as usize;
            let mut all: Vec<(String, &str, Value)> = (0..n)
                .map(|p| (g.names[p].clone(), "Person", g.age(p)))
                .chain(
                    g.robots
                        .iter()
                        .map(|(r, a)| (r.clone(), "Robot", a.map_or(Value::Null, |a| json!(a)))),
                )
                .filter(|(_, _, a)| a.as_i64().is_some_and(|a| a >= k))
                .collect();
            all.sort_by(|x, y| {
                sort_key(&x.2)
                    .cmp(&sort_key(&y.2))
                    .then_with(|| x.1.cmp(y.1))
                    .then_with(|| x.0.cmp(&y.0))
            });
            let expected = all
                .into_iter()
                .take(limit)
                .map(|(name, _, age)| vec![json!(name), age])
                .collect();
            Case {
                gq: format!(
                    "query q() {{ match {{ $x: Named\n $x.age >= {k} }} return {{ $x.name, $x.age }} order {{ $x.age }} limit {limit} }}"
                ),
                expected,
                ordered: true,
            }
        }
        9 => {
            // An interface binding through a traversal: only people know
            // anyone; one row per (person, distinct neighbour), counted.
            let rows: usize = (0..n).map(|p| g.reach("out", p, 1, Some(1)).len()).sum();
            Case {
                gq: "query q() { match { $x: Named\n $x knows $_ } return { count($x) as n } }"
                    .into(),
                expected: vec![vec![json!(rows)]],
                ordered: true,
            }
        }
        _ => {
            // Aggregates over everything.
            let ages: Vec<i64> = g.ages.iter().flatten().copied().collect();
            let avg = if ages.is_empty() {
                Value::Null
            } else {
                json!(ages.iter().sum::<i64>() as f64 / ages.len() as f64)
            };
            let max = ages.iter().max().map_or(Value::Null, |m| json!(m));
            Case {
                gq: "query q() { match { $p: Person } return { count($p) as n, count($p.age) as c, avg($p.age) as a, max($p.age) as m } }".into(),
                expected: vec![vec![json!(n), json!(ages.len()), avg, max]],
                ordered: true,
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_agrees_with_a_naive_evaluator() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // Cases whose answer has rows: agreeing on empty answers proves little.
    let mut with_rows = 0;
    for round in 0..12 {
        let g = Graph::random(&mut rng);
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("d").to_string_lossy().to_string();
        let db = Omnigraph::init(&uri, SCHEMA).await.unwrap();
        db.load("main", &g.jsonl(), LoadMode::Overwrite)
            .await
            .unwrap();
        with_rows += agree(&db, &g, &mut rng, 25, &format!("round {round}")).await;
    }
    assert!(
        with_rows * 3 >= 12 * 25 * 2,
        "only {with_rows} of {} cases had rows",
        12 * 25
    );
}

/// One small write, made to the graph and to the model alike.
async fn small_write(db: &Omnigraph, g: &mut Graph, step: usize, rng: &mut Rng) {
    let n = g.names.len();
    let (gq, params) = match rng.below(6) {
        0 | 1 => {
            // A few edges appended.
            let k = 1 + rng.below(3) as usize;
            let mut body = String::new();
            for j in 0..k {
                let (a, b) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
                let w = rng.below(5) as i64;
                let id = format!("x{step:03}{j}");
                body.push_str(&format!(
                    "insert Knows {{ from: \"{}\", to: \"{}\", id: \"{id}\", w: {w} }}\n",
                    g.names[a], g.names[b]
                ));
                g.edges.push((a, b, Some(w)));
                g.edge_ids.push(id);
            }
            (format!("query m() {{ {body} }}"), Value::Null)
        }
        2 => {
            // An update rewrites the person's row elsewhere.
            let p = rng.below(n as u64) as usize;
            let age = rng.below(6) as i64 * 10;
            g.ages[p] = Some(age);
            (
                format!(
                    "query m() {{ update Person set {{ age: {age} }} where name = \"{}\" }}",
                    g.names[p]
                ),
                Value::Null,
            )
        }
        3 if !g.edges.is_empty() => {
            let k = rng.below(g.edges.len() as u64) as usize;
            let id = g.edge_ids.remove(k);
            g.edges.remove(k);
            (
                format!("query m() {{ delete Knows where id = \"{id}\" }}"),
                Value::Null,
            )
        }
        4 => {
            // Sorts after every name before it, as the model's order assumes.
            let name = format!("p{step:03}");
            g.names.push(name.clone());
            g.ages.push(None);
            (
                format!("query m() {{ insert Person {{ name: \"{name}\" }} }}"),
                Value::Null,
            )
        }
        _ if n > 3 => {
            // A node delete takes its edges with it.
            let p = rng.below(n as u64) as usize;
            let name = g.names.remove(p);
            g.ages.remove(p);
            let mut kept = Vec::new();
            let mut kept_ids = Vec::new();
            for (e, id) in g.edges.iter().zip(&g.edge_ids) {
                if e.0 == p || e.1 == p {
                    continue;
                }
                let shift = |x: usize| if x > p { x - 1 } else { x };
                kept.push((shift(e.0), shift(e.1), e.2));
                kept_ids.push(id.clone());
            }
            g.edges = kept;
            g.edge_ids = kept_ids;
            (
                format!("query m() {{ delete Person where name = \"{name}\" }}"),
                Value::Null,
            )
        }
        _ => return,
    };
    db.mutate("main", &gq, "m", &params)
        .await
        .unwrap_or_else(|e| panic!("{gq}: {e}"));
}

/// Run `cases` random queries against both evaluators; how many had rows.
async fn agree(db: &Omnigraph, g: &Graph, rng: &mut Rng, cases: usize, what: &str) -> usize {
    let mut with_rows = 0;
    for _ in 0..cases {
        let c = case(g, rng);
        let r = db
            .query(&Target::main(), &c.gq, "q", &Value::Null)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", c.gq));
        let mut got: Vec<Vec<Value>> = omnigraph::exec::output::rows(&r)
            .unwrap()
            .into_iter()
            .map(|row| r.columns.iter().map(|col| row[col].clone()).collect())
            .collect();
        let mut want = c.expected;
        if !c.ordered {
            let key = |r: &Vec<Value>| r.iter().map(sort_key).collect::<Vec<_>>();
            got.sort_by_key(key);
            want.sort_by_key(key);
        }
        assert_eq!(got, want, "{what}: {}\ngraph: {}", c.gq, g.jsonl());
        with_rows += usize::from(!want.is_empty());
    }
    with_rows
}

/// A graph built through many small writes (appended, deleted and
/// rewritten edges and nodes): every traversal agrees with the evaluator,
/// whether its adjacency was carried from this process's base or from the
/// persisted one by the rows changed since, merged, or rebuilt. The counters
/// prove each way was taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adjacency_carried_through_small_writes_agrees_with_a_naive_evaluator() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut used = BTreeMap::<String, u64>::new();
    let mut tally = |db: &Omnigraph| {
        for (k, v) in db.cache_stats().as_object().unwrap() {
            *used.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
        }
    };
    for round in 0..4 {
        let mut g = Graph::random(&mut rng);
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("d").to_string_lossy().to_string();
        let db = Omnigraph::init(&uri, SCHEMA).await.unwrap();
        db.load("main", &g.jsonl(), LoadMode::Overwrite)
            .await
            .unwrap();
        db.optimize("main").await.unwrap();
        agree(&db, &g, &mut rng, 3, &format!("round {round}, loaded")).await;
        for step in 0..14 {
            small_write(&db, &mut g, step, &mut rng).await;
            agree(
                &db,
                &g,
                &mut rng,
                3,
                &format!("round {round}, step {step}, warm"),
            )
            .await;
            if step % 3 == 2 {
                let cold = Omnigraph::open(&uri).await.unwrap();
                agree(
                    &cold,
                    &g,
                    &mut rng,
                    3,
                    &format!("round {round}, step {step}, cold"),
                )
                .await;
                tally(&cold);
            }
            if step == 8 {
                db.optimize("main").await.unwrap();
            }
        }
        tally(&db);
    }
    for counter in [
        "graph_index_opens",
        "graph_index_overlays",
        "graph_index_remaps",
        "graph_index_merges",
        "graph_index_hits",
    ] {
        assert!(used[counter] > 0, "no traversal took {counter}: {used:?}");
    }
}
