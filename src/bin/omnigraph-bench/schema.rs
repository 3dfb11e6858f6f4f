//! Schema applies on a loaded social graph: the time of each kind of step
//! (metadata only, a column filled for every row, a validation scan) and a
//! one-row insert right after each apply beside one before any.

use std::time::Instant;

use omnigraph::{LoadMode, Omnigraph, Target};

use super::{SOCIAL_SCHEMA, Scratch, percentile};

/// One person, with every required property the schema has gained.
fn insert(n: usize, filled: &[String]) -> String {
    let extra: String = filled.iter().map(|p| format!(", {p}: 1")).collect();
    format!(
        "query add() {{ insert Person {{ handle: \"bench-{n}\", name: \"b\", city: \"c\"{extra} }} }}"
    )
}

/// One step's edit of the Person properties, the Knows properties and the
/// Person rules.
type Edit = Box<dyn Fn(&mut String, &mut String, &mut String)>;

async fn insert_ms(g: &Omnigraph, n: &mut usize, filled: &[String]) -> f64 {
    *n += 1;
    let t0 = Instant::now();
    g.mutate("main", &insert(*n, filled), "add", &serde_json::Value::Null)
        .await
        .expect("insert");
    t0.elapsed().as_secs_f64() * 1000.0
}

pub async fn run(dir: &str, repeats: usize) {
    let tmp = Scratch::new("schema.omni");
    let uri = tmp.uri();
    let g = Omnigraph::init(&uri, SOCIAL_SCHEMA).await.expect("init");
    let file = format!("{dir}/social.jsonl");
    let reader =
        std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&file).expect("open"));
    g.load_from("main", None, reader, LoadMode::Overwrite, |_| {})
        .await
        .expect("load");
    let snap = g.snapshot(&Target::main()).await.expect("snapshot");
    let rows = |t: &str| {
        snap.types
            .iter()
            .find(|x| x.name == t)
            .map_or(0, |x| x.rows)
    };
    let (persons, knows) = (rows("Person"), rows("Knows"));
    println!("{persons} persons, {knows} knows edges");
    let mut n = 0;
    let mut filled: Vec<String> = Vec::new();
    let mut before = Vec::new();
    for _ in 0..5 {
        before.push(insert_ms(&g, &mut n, &filled).await);
    }
    before.sort_by(f64::total_cmp);
    println!(
        "one-row insert before any apply: median {:.1} ms",
        percentile(&before, 0.5)
    );
    println!();
    println!("| step | run | apply ms | rows | rows/s | next insert ms | insert median ms |");
    println!("|---|---|---|---|---|---|---|");
    let mut person_props = String::new();
    let mut knows_props = String::new();
    let mut rules = String::new();
    let source = |person: &str, knows: &str, rules: &str| {
        SOCIAL_SCHEMA
            .replace(
                "    city: String }",
                &format!("    city: String\n{person}{rules}}}"),
            )
            .replace("{ since: I32 }", &format!("{{ since: I32\n{knows}}}"))
    };
    for r in 0..repeats {
        let steps: Vec<(&str, usize, Edit)> = vec![
            (
                "add a nullable property (Person)",
                0,
                Box::new(move |p, _, _| p.push_str(&format!("    nick{r}: String?\n"))),
            ),
            (
                "add a nullable property (Knows)",
                0,
                Box::new(move |_, k, _| k.push_str(&format!("    weight{r}: F64?\n"))),
            ),
            (
                "rename a property",
                0,
                Box::new(move |p, _, _| {
                    *p = p.replace(
                        &format!("nick{r}: String?"),
                        &format!("alias{r}: String? @rename_from(\"nick{r}\")"),
                    )
                }),
            ),
            (
                "add a property with a default",
                persons,
                Box::new(move |p, _, _| p.push_str(&format!("    score{r}: I64 @default(7)\n"))),
            ),
            (
                "add @unique (validation scan)",
                persons,
                Box::new(move |_, _, u| u.push_str(&format!("    @unique(handle, score{r})\n"))),
            ),
        ];
        for (name, work_rows, change) in steps {
            change(&mut person_props, &mut knows_props, &mut rules);
            let src = source(&person_props, &knows_props, &rules);
            let t0 = Instant::now();
            let applied = g.apply_schema(&src).await.expect("apply");
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            assert!(applied.changed, "{name}: no change");
            if name.starts_with("add a property with a default") {
                filled.push(format!("score{r}"));
            }
            let next = insert_ms(&g, &mut n, &filled).await;
            let mut after = Vec::new();
            for _ in 0..4 {
                after.push(insert_ms(&g, &mut n, &filled).await);
            }
            after.sort_by(f64::total_cmp);
            let rate = if work_rows > 0 {
                format!("{:.0}", work_rows as f64 / (ms / 1000.0))
            } else {
                "-".into()
            };
            println!(
                "| {name} | {r} | {ms:.1} | {} | {rate} | {next:.1} | {:.1} |",
                if work_rows > 0 {
                    work_rows.to_string()
                } else {
                    "metadata".into()
                },
                percentile(&after, 0.5)
            );
        }
    }
}
