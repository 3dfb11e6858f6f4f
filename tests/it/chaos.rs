//! Real-Lance chaos: child processes append write after write to a graph and
//! are killed with SIGKILL, at random moments and inside commits. After the
//! kills the graph is reopened (recovery runs) and checked: every
//! acknowledged write is present, no partial write is visible, every edge's
//! endpoints exist, every write killed inside its commit was resolved whole
//! (published with its rows, or rolled back without them), and the graph
//! still accepts writes.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use omnigraph::{LoadMode, Omnigraph, Target};

use crate::common::{Place, assert_each_write_published_once, changes, sidecars, stored};

/// Kills per run (override with OMNIGRAPH_CHAOS_KILLS).
const KILLS: usize = 50;

const SCHEMA: &str = "node Person { name: String @key }\nedge Knows: Person -> Person";

fn rand_ms(state: &mut u64, lo: u64, hi: u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    lo + *state % (hi - lo)
}

/// Reopen the graph (recovery runs) and check it against what was
/// acknowledged: every acknowledged write is there, and every write is whole
/// across the node table and the edge table (two people and the edge
/// between them, or nothing). Returns the people it holds.
pub(crate) async fn check_graph(uri: &str, acked: &BTreeSet<u64>) -> BTreeSet<String> {
    let g = Omnigraph::open(uri).await.unwrap();
    // Every writer is dead by now: the open resolves every intent left.
    let report = g.recovery_report();
    assert!(
        report.unresolved.is_empty(),
        "recovery left intents: {report:?}"
    );
    let left = stored(uri, "_graph/recovery").await;
    assert!(
        left.iter().all(|f| !f.ends_with(".json")),
        "sidecars left after recovery: {left:?}; recovery did {report:?}"
    );
    let mut dump = Vec::new();
    g.export(&Target::main(), &mut dump).await.unwrap();
    let dump = String::from_utf8(dump).unwrap();
    let mut people = BTreeSet::new();
    let mut edges = BTreeSet::new();
    for line in dump.lines() {
        let j: serde_json::Value = serde_json::from_str(line).unwrap();
        if j["type"] == "Person" {
            people.insert(j["data"]["name"].as_str().unwrap().to_string());
        } else {
            edges.insert((
                j["from"].as_str().unwrap().to_string(),
                j["to"].as_str().unwrap().to_string(),
            ));
        }
    }
    for n in acked {
        assert!(
            people.contains(&format!("p{n}")),
            "acknowledged write {n} is missing"
        );
    }
    for p in people.iter().filter(|p| p.starts_with('p')) {
        let n = &p[1..];
        assert!(
            people.contains(&format!("q{n}")),
            "partial write {n}: p without q"
        );
        assert!(
            edges.contains(&(format!("p{n}"), format!("q{n}"))),
            "partial write {n}: nodes without their edge"
        );
    }
    for (s, d) in &edges {
        assert!(
            people.contains(s) && people.contains(d),
            "edge {s} -> {d} has a missing endpoint"
        );
    }
    assert_eq!(
        edges.len() * 2,
        people.len(),
        "every write is two people and one edge"
    );
    people
}

/// A write whose writer was killed inside the commit of one of its
/// operations (that operation's sidecar was on storage): the operation, its
/// kind, and the number of the write. A load runs a compaction after its
/// own commit when its tables have grown fragmented, so the operation is the
/// load's (kind "load") or that compaction's ("compact").
struct KilledInside {
    op: String,
    kind: String,
    n: u64,
}

/// Each write killed inside one of its commits was resolved whole. A load
/// killed inside its commit: its operation was published (by its writer, or
/// rolled forward by recovery as `recover-<op>`;
/// `assert_each_write_published_once` checks it was once) and its rows are
/// there, or it was not and they are not. A load killed inside the
/// compaction that follows its commit: its rows are there, whichever way
/// the compaction was resolved.
async fn assert_killed_writes_resolved(
    uri: &str,
    people: &BTreeSet<String>,
    killed: &[KilledInside],
) {
    let published: BTreeSet<String> = changes(uri)
        .await
        .into_iter()
        // A roll-back publishes a re-point as `recover-<op>` too: only a
        // commit carries the write's rows.
        .filter(|(kind, _)| kind == "commit")
        .map(|(_, op)| op.strip_prefix("recover-").unwrap_or(&op).to_string())
        .collect();
    for k in killed {
        let rows = people.contains(&format!("p{}", k.n));
        match k.kind.as_str() {
            "load" => assert_eq!(
                published.contains(&k.op),
                rows,
                "write {} (operation {}) was killed inside its commit: published {} but its rows visible {rows}",
                k.n,
                k.op,
                published.contains(&k.op)
            ),
            "compact" => assert!(
                rows,
                "write {} was killed inside its compaction (operation {}), after its own commit, and its rows are gone",
                k.n, k.op
            ),
            other => panic!("a stress writer ran an operation of kind {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_writes_never_loses_or_tears_a_commit() {
    let kills: usize = std::env::var("OMNIGRAPH_CHAOS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(KILLS);
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().join("chaos.omni").to_string_lossy().to_string();
    drop(Omnigraph::init(&uri, SCHEMA).await.unwrap());
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut killed_inside = Vec::new();
    let mut next = 0u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for kill in 0..kills {
        let child = spawn_writer(&uri, next);
        // Every other kill waits for the writer to be inside a commit; the
        // others land wherever a random while of writing ends.
        let stopped = if kill % 2 == 1 {
            let (stopped, killed) =
                kill_inside_a_commit(&uri, child, Duration::from_secs(10)).await;
            killed_inside.extend(killed);
            stopped
        } else {
            std::thread::sleep(Duration::from_millis(rand_ms(&mut rng, 150, 900)));
            stop_writer(child)
        };
        let last = stopped.acked.iter().copied().chain(stopped.in_flight).max();
        next = next.max(last.map_or(next, |m| m + 1)) + 1;
        acked.extend(stopped.acked);
        let people = check_graph(&uri, &acked).await;
        assert_killed_writes_resolved(&uri, &people, &killed_inside).await;
    }
    assert_each_write_published_once(&uri).await;
    let people = check_graph(&uri, &acked).await;
    // Still writable after all of that.
    let g = Omnigraph::open(&uri).await.unwrap();
    g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"final\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
    let (forward, back, compactions) = outcomes(&people, &killed_inside);
    eprintln!(
        "chaos: {kills} kills, {} writes acknowledged, {} kills inside a commit ({forward} loads resolved forward, {back} back, {compactions} inside the compaction after a load)",
        acked.len(),
        killed_inside.len(),
    );
    assert!(!acked.is_empty(), "the writer never got a write through");
    // Half the kills aim inside a commit; a run of them that never lands
    // there means the timing broke.
    assert!(
        !killed_inside.is_empty() || kills < 4,
        "none of the {} kills aimed inside a commit landed there",
        kills / 2
    );
}

/// How kills inside a commit were resolved: loads rolled forward, loads
/// rolled back, and kills inside the compaction that followed a load.
fn outcomes(people: &BTreeSet<String>, killed: &[KilledInside]) -> (usize, usize, usize) {
    let loads: Vec<_> = killed.iter().filter(|k| k.kind == "load").collect();
    let forward = loads
        .iter()
        .filter(|k| people.contains(&format!("p{}", k.n)))
        .count();
    (forward, loads.len() - forward, killed.len() - loads.len())
}

/// Writer processes alive at once in the multi-process chaos test, and how
/// many kills it makes (each kill restarts the killed writer).
const WRITERS: usize = 3;
const MULTI_KILLS: usize = 12;

/// The lease time of writer processes (object storage only): short, so
/// that a killed writer's gates pass on quickly.
const CHILD_LEASE_MS: &str = "1000";

/// What a writer process printed, line by line.
enum Line {
    Owner(String),
    Begin(u64),
    Ack(u64),
}

pub(crate) struct Child {
    proc: std::process::Child,
    reader: std::thread::JoinHandle<()>,
    lines: mpsc::Receiver<Line>,
    /// Its incarnation, once it printed it.
    owner: Option<String>,
}

impl Child {
    /// Its incarnation, waiting for it to open the graph (a writer that
    /// never does fails the test).
    fn owner(&mut self) -> String {
        while self.owner.is_none() {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(Line::Owner(o)) => self.owner = Some(o),
                Ok(_) => unreachable!("a writer prints its owner before any write"),
                Err(e) => panic!("a writer printed no owner: {e}"),
            }
        }
        self.owner.clone().expect("set above")
    }
}

/// What a killed writer had done.
pub(crate) struct Stopped {
    pub(crate) acked: BTreeSet<u64>,
    /// The write it had begun and not seen acknowledged.
    in_flight: Option<u64>,
}

pub(crate) fn spawn_writer(uri: &str, start: u64) -> Child {
    spawn_writer_dwelling(uri, start, 0)
}

/// A writer whose every commit lingers `dwell_ms` after its sidecar and
/// after each table commit, so that a kill aimed at a commit lands in one.
pub(crate) fn spawn_writer_dwelling(uri: &str, start: u64, dwell_ms: u64) -> Child {
    let mut proc = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .env("OMNIGRAPH_LEASE_MS", CHILD_LEASE_MS)
        .args([
            "stress-writer",
            "--store",
            uri,
            "--start",
            &start.to_string(),
            "--dwell-ms",
            &dwell_ms.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = proc.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let parsed = match line.split_once(' ') {
                Some(("OWNER", o)) => Line::Owner(o.to_string()),
                Some(("BEGIN", n)) => Line::Begin(n.parse().expect("a write number")),
                Some(("ACK", n)) => Line::Ack(n.parse().expect("a write number")),
                _ => continue,
            };
            let _ = tx.send(parsed);
        }
    });
    Child {
        proc,
        reader,
        lines,
        owner: None,
    }
}

/// Stop a writer; a writer that exited by itself with an error fails the
/// test with what it printed, except one whose lease lapsed (a process
/// starved of the CPU past its short lease): to the protocol that is a
/// process that died, its write in flight someone else's to resolve, and
/// it is counted as killed.
pub(crate) fn stop_writer(mut c: Child) -> Stopped {
    if let Ok(Some(status)) = c.proc.try_wait() {
        let mut err = String::new();
        if let Some(mut e) = c.proc.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        assert!(
            err.contains("error[LeaseLost]"),
            "a writer exited by itself with {status}: {err}"
        );
    }
    let _ = c.proc.kill(); // SIGKILL (a lapsed writer has exited already)
    c.proc.wait().unwrap();
    c.reader.join().unwrap();
    let mut stopped = Stopped {
        acked: BTreeSet::new(),
        in_flight: None,
    };
    for line in c.lines.try_iter() {
        match line {
            Line::Owner(_) => {}
            Line::Begin(n) => stopped.in_flight = Some(n),
            Line::Ack(n) => {
                stopped.acked.insert(n);
                stopped.in_flight = None;
            }
        }
    }
    stopped
}

/// Kill a writer the moment one of its sidecars is on storage (inside a
/// commit), or after `limit` if none shows. Returns what it had done, and
/// the operation of its sidecar if one is still on storage after the kill.
/// Such a sidecar is the write it had in flight: a writer removes a
/// write's sidecar before it prints the write's acknowledgement, and the
/// sidecar seen before the kill may belong to a write that finished in
/// between, so only the listing after the kill names the killed write.
async fn kill_inside_a_commit(
    uri: &str,
    mut c: Child,
    limit: Duration,
) -> (Stopped, Option<KilledInside>) {
    let owner = c.owner();
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline
        && !sidecars(uri).await.iter().any(|s| s.owner == owner)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let stopped = stop_writer(c);
    // A write answers at its publish and deletes its sidecar after: the
    // sidecar of a write already published is that delete cut short (the
    // write was acknowledged), not the write in flight.
    let published: BTreeSet<String> = changes(uri).await.into_iter().map(|(_, op)| op).collect();
    let Some(left) = sidecars(uri)
        .await
        .into_iter()
        .find(|s| s.owner == owner && !published.contains(&s.op))
    else {
        return (stopped, None);
    };
    let n = stopped
        .in_flight
        .expect("a killed writer that left a sidecar had a write in flight");
    let killed = KilledInside {
        op: left.op,
        kind: left.kind,
        n,
    };
    (stopped, Some(killed))
}

/// How long the writers of the multi-process test linger inside each
/// commit: a kill aimed there polls the sidecar listing every millisecond
/// and must land before the commit ends (with commits of a few ms, six
/// aims all missed in some runs).
const DWELL_MS: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writer_processes_killed_among_live_ones_lose_nothing() {
    writer_processes_killed_among_live_ones_lose_nothing_in(Place::local()).await;
}

/// On S3 a killed writer's leases lapse (after `OMNIGRAPH_LEASE_MS`, short
/// here) before the others take its gates over and resolve its intent.
pub async fn writer_processes_killed_among_live_ones_lose_nothing_in(place: Place) {
    let uri = place.uri("multi.omni");
    Omnigraph::init(&uri, SCHEMA).await.unwrap().close().await;
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    // Each writer numbers its writes from its own range.
    let mut next_start = 0u64;
    // Commits that linger inside (after the sidecar, after each table
    // commit): a kill aimed at one lands there, not after the write ended.
    let mut writers: Vec<Child> = (0..WRITERS)
        .map(|_| {
            next_start += 1_000_000;
            spawn_writer_dwelling(&uri, next_start, DWELL_MS)
        })
        .collect();
    // On S3 a killed writer holds its gates until its lease lapses, so kills
    // come slower there, or nobody would get a write through.
    let (lo, hi) = match place {
        Place::Local(_) => (200, 700),
        Place::S3 { .. } => (1_500, 3_000),
    };
    // Every other kill waits for the victim to be inside a commit; the
    // others land wherever the random wait ends.
    let mut killed_inside = Vec::new();
    for kill in 0..MULTI_KILLS {
        std::thread::sleep(Duration::from_millis(rand_ms(&mut rng, lo, hi)));
        let victim = (rand_ms(&mut rng, 0, 1_000) as usize) % WRITERS;
        next_start += 1_000_000;
        let fresh = spawn_writer_dwelling(&uri, next_start, DWELL_MS);
        let old = std::mem::replace(&mut writers[victim], fresh);
        let stopped = if kill % 2 == 1 {
            let (stopped, killed) = kill_inside_a_commit(&uri, old, Duration::from_secs(10)).await;
            killed_inside.extend(killed);
            stopped
        } else {
            stop_writer(old)
        };
        acked.extend(stopped.acked);
    }
    for w in writers {
        acked.extend(stop_writer(w).acked);
    }
    if let Place::S3 { .. } = place {
        // A killed process is known dead only once its lease has lapsed by
        // more than the observer's clock-skew margin (a fifth of the
        // observer's own lease, the default 10 s here); until then its
        // intent is a live process's and is rightly left alone.
        let lease: u64 = CHILD_LEASE_MS.parse().expect("a number of ms");
        let margin = omnigraph::OpenOptions::default().lease / 4;
        std::thread::sleep(Duration::from_millis(lease) + margin);
    }
    let people = check_graph(&uri, &acked).await;
    // Every dead writer's intent was resolved by exactly one of the others
    // (or by the last open), whole.
    assert_each_write_published_once(&uri).await;
    assert_killed_writes_resolved(&uri, &people, &killed_inside).await;
    let (forward, back, compactions) = outcomes(&people, &killed_inside);
    eprintln!(
        "multi-process chaos: {MULTI_KILLS} kills among {WRITERS} writers, {} writes acknowledged, {} kills inside a commit ({forward} loads resolved forward, {back} back, {compactions} inside the compaction after a load)",
        acked.len(),
        killed_inside.len(),
    );
    assert!(
        !killed_inside.is_empty(),
        "none of the {} kills aimed inside a commit landed there",
        MULTI_KILLS / 2
    );
    assert!(
        acked.len() >= WRITERS,
        "the writers got only {} writes through",
        acked.len()
    );
    let g = Omnigraph::open(&uri).await.unwrap();
    g.load(
        "main",
        "{\"type\":\"Person\",\"data\":{\"name\":\"final\"}}",
        LoadMode::Append,
    )
    .await
    .unwrap();
}
