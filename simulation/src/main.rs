//! `omnigraph-sim`: sweep seeds, replay one seed with its trace, or prove a
//! planted bug is caught.
//!
//! ```text
//! omnigraph-sim --seeds 0..10000
//! omnigraph-sim --seed 4242 --trace
//! omnigraph-sim --seeds 0..2000 --bug skip-sidecar
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Instant;

use omnigraph_actors::Bugs;
use omnigraph_sim::run_seed;

struct Args {
    bug_stats: bool,
    seeds: std::ops::Range<u64>,
    trace: bool,
    bug: Option<String>,
    ractor: bool,
    skew_beyond_margin: bool,
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: omnigraph-sim (--seeds A..B | --seed N) [--trace] [--bug NAME] [--ractor] [--skew-beyond-margin]\n       omnigraph-sim --bug-stats   (seeds until each planted bug is found, over 21 trials)\n  --ractor: run the production ractor host on a paused runtime instead\n  bugs: {}",
        omnigraph_actors::bugs::NAMES.join(", ")
    );
    ExitCode::from(2)
}

fn parse_args() -> Option<Args> {
    let mut args = std::env::args().skip(1);
    let mut seeds = None;
    let mut trace = false;
    let mut bug = None;
    let mut ractor = false;
    let mut bug_stats = false;
    let mut skew_beyond_margin = false;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seeds" => {
                let v = args.next()?;
                let (a, b) = v.split_once("..")?;
                seeds = Some(a.parse().ok()?..b.parse().ok()?);
            }
            "--seed" => {
                let n: u64 = args.next()?.parse().ok()?;
                seeds = Some(n..n + 1);
            }
            "--trace" => trace = true,
            "--bug" => bug = Some(args.next()?),
            "--ractor" => ractor = true,
            "--skew-beyond-margin" => skew_beyond_margin = true,
            "--bug-stats" => {
                bug_stats = true;
                seeds.get_or_insert(0..0);
            }
            _ => return None,
        }
    }
    Some(Args {
        bug_stats,
        seeds: seeds?,
        trace,
        bug,
        ractor,
        skew_beyond_margin,
    })
}

// The command line: parse, then one branch per mode (a sweep, one seed,
// a planted bug, the ractor host, bug statistics), each printed in full.
fn main() -> ExitCode {
    let Some(args) = parse_args() else {
        return usage();
    };
    let bugs = match &args.bug {
        None => Bugs::default(),
        Some(name) => match Bugs::parse(name) {
            Some(b) => b,
            None => {
                eprintln!("unknown bug {name:?} (or this build has no planted bugs)");
                return usage();
            }
        },
    };
    if args.bug_stats {
        return bug_stats();
    }
    if args.ractor {
        return ractor_sweep(&args, bugs);
    }
    let single = args.seeds.end - args.seeds.start == 1;
    let started = Instant::now();
    let mut digests = BTreeSet::new();
    let (mut runs, mut steps, mut checks, mut crashes, mut committed, mut merges) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut applies, mut adopting) = (0u64, 0u64);
    let (mut pauses, mut takeovers, mut fences, mut collections) = (0u64, 0u64, 0u64, 0u64);
    let mut cleanups = 0u64;
    let mut failures = Vec::new();
    for seed in args.seeds.clone() {
        let report = if args.skew_beyond_margin {
            omnigraph_sim::run_seed_beyond_margin(seed, single && args.trace)
        } else {
            run_seed(seed, bugs, single && args.trace)
        };
        runs += 1;
        steps += report.steps as u64;
        checks += report.checks;
        crashes += report.crashes as u64;
        committed += report.committed as u64;
        merges += report.merges as u64;
        adopting += report.adopting_merges as u64;
        applies += report.schema_applies as u64;
        pauses += u64::from(report.pauses);
        takeovers += report.takeovers as u64;
        fences += report.fences as u64;
        collections += report.collections as u64;
        cleanups += report.cleanups as u64;
        digests.insert(report.digest);
        if single {
            for line in &report.trace {
                println!("{line}");
            }
            println!(
                "seed {seed}: {} steps, digest {:016x}",
                report.steps, report.digest
            );
        }
        if let Some(v) = report.violation {
            failures.push((seed, v));
            if args.bug.is_some() {
                break; // the planted bug is found
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{runs} seeds in {secs:.2} s ({:.0} seeds/s): {steps} steps, {checks} invariant checks, {crashes} crashes, {pauses} pauses, {takeovers} lease takeovers ({fences} fences), {committed} writes committed ({merges} merges, {adopting} of them taking tables as the source had them, {applies} schema applies), {collections} index-file collections, {cleanups} version cleanups, {} distinct trace digests",
        runs as f64 / secs.max(1e-9),
        digests.len()
    );
    if args.bug.is_none() && runs > 1 {
        // A clean sweep that drove none of a fault kind tested nothing of it.
        let drove = [
            ("crashes", crashes),
            ("pauses", pauses),
            ("lease takeovers", takeovers),
            ("merges", merges),
            ("merges taking the source's tables", adopting),
            ("schema applies", applies),
            ("index-file collections", collections),
            ("version cleanups", cleanups),
        ];
        if let Some((what, _)) = drove.iter().find(|(_, n)| *n == 0) {
            println!("FAIL: the sweep drove no {what}");
            return ExitCode::FAILURE;
        }
    }
    match (&args.bug, failures.first()) {
        (Some(bug), Some((seed, v))) => {
            let meant = omnigraph_sim::catches(bug);
            if !omnigraph_sim::caught_by_its_invariant(bug, v.invariant) {
                println!(
                    "planted bug {bug} was caught at seed {seed} by \"{}\", not by the invariant meant to catch it ({meant:?}): {}",
                    v.invariant, v.detail
                );
                print_prefix(*seed, bugs, v.step);
                return ExitCode::FAILURE;
            }
            println!(
                "planted bug {bug} found at seed {seed} (after {runs} seeds) by its invariant: {} — {}",
                v.invariant, v.detail
            );
            print_prefix(*seed, bugs, v.step);
            ExitCode::SUCCESS
        }
        (Some(bug), None) => {
            println!("planted bug {bug} was NOT found in {runs} seeds");
            ExitCode::FAILURE
        }
        (None, None) => ExitCode::SUCCESS,
        (None, Some(_)) => {
            for (seed, v) in failures.iter().take(5) {
                println!(
                    "FAIL seed {seed}: {} — {} (step {})",
                    v.invariant, v.detail, v.step
                );
            }
            let (seed, v) = &failures[0];
            print_prefix(*seed, bugs, v.step);
            println!(
                "{} failing seeds; replay one with --seed N --trace",
                failures.len()
            );
            ExitCode::FAILURE
        }
    }
}

/// Replay a failing seed and print the end of its trace up to the violation.
fn print_prefix(seed: u64, bugs: Bugs, step: usize) {
    let report = run_seed(seed, bugs, true);
    let upto: Vec<&String> = report
        .trace
        .iter()
        .take_while(|l| {
            l.split_whitespace()
                .next()
                .and_then(|s| s.parse::<usize>().ok())
                .is_none_or(|s| s <= step)
        })
        .collect();
    let shown = 60.min(upto.len());
    println!(
        "trace of seed {seed} up to step {step} (last {shown} of {} lines; digest {:016x}):",
        upto.len(),
        report.digest
    );
    for l in &upto[upto.len() - shown..] {
        println!("  {l}");
    }
}

/// The secondary mode: the real ractor wiring, each seed run twice to show
/// that the paused runtime replays it identically.
fn ractor_sweep(args: &Args, bugs: Bugs) -> ExitCode {
    let started = Instant::now();
    let mut digests = BTreeSet::new();
    let mut committed = 0;
    for seed in args.seeds.clone() {
        let a = omnigraph_sim::ractor_mode::run_seed(seed, bugs);
        let b = omnigraph_sim::ractor_mode::run_seed(seed, bugs);
        if a.digest != b.digest {
            println!(
                "FAIL seed {seed}: the ractor run is not deterministic ({:016x} vs {:016x})",
                a.digest, b.digest
            );
            return ExitCode::FAILURE;
        }
        digests.insert(a.digest);
        committed += a.committed;
        if let Some((inv, detail)) = a.violation {
            println!("FAIL seed {seed} (ractor host): {inv} — {detail}");
            return if args.bug.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    }
    let n = args.seeds.end - args.seeds.start;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "ractor host: {n} seeds, each run twice with identical digests, in {secs:.2} s ({:.0} runs/s): {committed} writes committed, {} distinct digests",
        (2 * n) as f64 / secs.max(1e-9),
        digests.len()
    );
    if args.bug.is_some() {
        println!("planted bug NOT found by the ractor mode");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// For every planted bug: in 21 independent trials (seed ranges starting at
/// t * 100000), how many seeds until it is found (at most 2000).
fn bug_stats() -> ExitCode {
    let mut ok = true;
    println!(
        "| bug | median seeds to find | worst of 21 trials | invariant that caught it (every trial) |"
    );
    println!("|---|---|---|---|");
    for name in omnigraph_actors::bugs::NAMES {
        let Some(bugs) = Bugs::parse(name) else {
            eprintln!("this build has no planted bugs");
            return ExitCode::FAILURE;
        };
        let mut counts = Vec::new();
        let meant = omnigraph_sim::catches(name).unwrap_or("(none named)");
        for trial in 0..21u64 {
            let start = trial * 100_000;
            let found = (start..start + 2000).find_map(|seed| {
                run_seed(seed, bugs, false)
                    .violation
                    .map(|v| (seed - start + 1, v.invariant))
            });
            match found {
                Some((n, inv)) if omnigraph_sim::caught_by_its_invariant(name, inv) => {
                    counts.push(n)
                }
                Some((_, inv)) => {
                    eprintln!("{name}, trial {trial}: caught by \"{inv}\", not by \"{meant}\"");
                    ok = false;
                    counts.push(u64::MAX);
                }
                None => {
                    ok = false;
                    counts.push(u64::MAX);
                }
            }
        }
        counts.sort_unstable();
        let show = |n: u64| {
            if n == u64::MAX {
                "not found".to_string()
            } else {
                n.to_string()
            }
        };
        println!(
            "| {name} | {} | {} | {meant} |",
            show(counts[10]),
            show(counts[20])
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
