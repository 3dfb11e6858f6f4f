//! Reads right after small writes, on a branch of a social graph: q1..q5
//! with no write before them, then after a one-edge insert, a one-person
//! update (a row that moves), a one-person insert, a one-person delete and
//! a 1,000-edge append. In each phase every query gets its own write just
//! before its first run (what it meets is the version that write made: the
//! ids, columns and adjacency carried from the version before), then its
//! warm median.

use std::time::Instant;

use omnigraph::{LoadMode, Omnigraph, Target};
use serde_json::{Value, json};

use super::{QUERIES, percentile};

struct Variant {
    name: &'static str,
    query: &'static str,
    params: Value,
}

async fn time(g: &Omnigraph, at: &Target, v: &Variant) -> f64 {
    let t0 = Instant::now();
    g.query(at, QUERIES, v.query, &v.params)
        .await
        .expect("query");
    t0.elapsed().as_secs_f64() * 1000.0
}

/// The first run and the warm median of each variant, each variant's
/// first run right after its own `write` (none: `None`), so each first run
/// meets the version that write made.
async fn phase(
    g: &Omnigraph,
    at: &Target,
    variants: &[Variant],
    repeats: usize,
    write: Option<&Write<'_>>,
) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        if let Some(w) = write {
            w(i).await;
        }
        let first = time(g, at, v).await;
        let mut warm = Vec::new();
        for _ in 0..repeats {
            warm.push(time(g, at, v).await);
        }
        warm.sort_by(f64::total_cmp);
        out.push((first, percentile(&warm, 0.5)));
    }
    out
}

/// One small write of a kind, the `i`-th of its phase.
type Write<'a> = dyn Fn(usize) -> futures::future::BoxFuture<'a, ()> + 'a;

pub async fn run(dir: &str, uri: &str, repeats: usize, json_out: Option<&str>) {
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/meta.json")).expect("meta.json"),
    )
    .expect("json");
    let persons = meta["persons"].as_u64().unwrap_or(1_000_000);
    let (hub, median) = (
        meta["start"]["hub"].as_str().expect("hub").to_string(),
        meta["start"]["median"]
            .as_str()
            .expect("median")
            .to_string(),
    );
    let variants = [
        Variant {
            name: "q1_hub",
            query: "q1",
            params: json!({ "h": hub }),
        },
        Variant {
            name: "q1_median",
            query: "q1",
            params: json!({ "h": median }),
        },
        Variant {
            name: "q2_hub",
            query: "q2",
            params: json!({ "h": hub }),
        },
        Variant {
            name: "q2_median",
            query: "q2",
            params: json!({ "h": median }),
        },
        Variant {
            name: "q3_hub",
            query: "q3",
            params: json!({ "h": hub }),
        },
        Variant {
            name: "q4_hub",
            query: "q4",
            params: json!({ "h": hub }),
        },
        Variant {
            name: "q5",
            query: "q5",
            params: Value::Null,
        },
    ];
    let g = Omnigraph::open(uri).await.expect("open");
    let branch = format!("delta-{}", omnigraph::util::ulid::new_ulid().to_lowercase());
    g.branch_create(&branch, "main").await.expect("branch");
    let at = Target::Branch(branch.clone());
    let (g, branch) = (&g, branch.as_str());
    let mutate = move |q: String| async move {
        g.mutate(branch, &q, "m", &Value::Null)
            .await
            .unwrap_or_else(|e| panic!("{q}: {e}"));
    };
    let mut phases = vec![("no write", phase(g, &at, &variants, repeats, None).await)];

    let edge: Box<Write> = Box::new(|i| {
        Box::pin(mutate(format!(
            "query m() {{ insert Knows {{ from: \"{median}\", to: \"p{i}\", since: 2026 }} }}"
        )))
    });
    phases.push((
        "1 edge inserted",
        phase(g, &at, &variants, repeats, Some(&*edge)).await,
    ));
    let update: Box<Write> = Box::new(|i| {
        Box::pin(mutate(format!(
            "query m() {{ update Person set {{ age: {} }} where handle = \"p{}\" }}",
            20 + i,
            100 + i
        )))
    });
    phases.push((
        "1 person updated",
        phase(g, &at, &variants, repeats, Some(&*update)).await,
    ));
    let insert: Box<Write> = Box::new(|i| {
        Box::pin(mutate(format!(
            "query m() {{ insert Person {{ handle: \"delta-{i}\", name: \"n\", age: 1, city: \"c\" }} }}"
        )))
    });
    phases.push((
        "1 person inserted",
        phase(g, &at, &variants, repeats, Some(&*insert)).await,
    ));
    let delete: Box<Write> = Box::new(|i| {
        Box::pin(mutate(format!(
            "query m() {{ delete Person where handle = \"delta-{i}\" }}"
        )))
    });
    phases.push((
        "1 person deleted",
        phase(g, &at, &variants, repeats, Some(&*delete)).await,
    ));

    // 1,000 edges between persons spread over the table.
    let append: Box<Write> = Box::new(|i| {
        let mut lines = String::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 + i as u64;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (a, b) = (x % persons, (x >> 20) % persons);
            lines.push_str(&format!(
                "{{\"edge\":\"Knows\",\"from\":\"p{a}\",\"to\":\"p{b}\",\"data\":{{\"since\":2026}}}}\n"
            ));
        }
        Box::pin(async move {
            g.load(branch, &lines, LoadMode::Append)
                .await
                .expect("append");
        })
    });
    phases.push((
        "1,000 edges appended",
        phase(g, &at, &variants, repeats, Some(&*append)).await,
    ));

    print!("| variant |");
    for (name, _) in &phases {
        print!(" {name}: first / warm ms |");
    }
    println!();
    println!("|---|{}", "---|".repeat(phases.len()));
    for (i, v) in variants.iter().enumerate() {
        print!("| {} |", v.name);
        for (_, rows) in &phases {
            print!(" {:.3} / {:.3} |", rows[i].0, rows[i].1);
        }
        println!();
    }
    if let Some(path) = json_out {
        // `<write>:<query>` -> the first run after the write and the warm
        // median (bench/guard.py keeps the first runs).
        let mut out = serde_json::Map::new();
        for (name, rows) in &phases {
            let write = name.replace(' ', "_").replace(',', "");
            for (v, (first, warm)) in variants.iter().zip(rows) {
                out.insert(
                    format!("{write}:{}", v.name),
                    json!({ "first_ms": first, "warm_ms": warm }),
                );
            }
        }
        std::fs::write(path, serde_json::to_string_pretty(&out).expect("json")).expect("write");
    }
    let s = g.cache_stats();
    println!(
        "\nadjacency: {} opened, {} built, {} overlays, {} merges; branch {branch} left for the cold runs",
        s["graph_index_opens"],
        s["graph_index_builds"],
        s["graph_index_overlays"],
        s["graph_index_merges"]
    );
}
