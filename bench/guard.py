#!/usr/bin/env python3
"""The read-path regression guard: q1..q6 warm (one process) and cold (one
CLI process per query) on s100k, and the first run of q1..q5 right after a
1-row write in a warm process (`omnigraph-bench delta`: an edge insert, a
person update, insert and delete, a 1,000-edge append), on a freshly
loaded graph and again after `omnigraph optimize`, each beside the last
recorded figure
(bench/guard_figures.json) with the ratio now / recorded. Run it before
pushing a change to a read or write path. Once new figures are in
docs/benchmarks.md, `--record` makes them the ones compared against.

Usage: bench/guard.py [--data DIR] [--repeats 10] [--cold-repeats 5] [--record]

Builds the release binaries (in CARGO_RELEASE_DIR, as bench/run.sh does)
and generates the s100k data into DIR (default /tmp/peers_data/s100k) when
it is missing. Ratios over 1.5 are marked SLOWER; the guard never fails on
speed (figures are read by people, not asserted)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIGURES = os.path.join(HERE, "guard_figures.json")
SLOWER = 1.5


def opt(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    data = opt("--data", "/tmp/peers_data/s100k")
    repeats = opt("--repeats", "10")
    cold_repeats = opt("--cold-repeats", "5")
    target = os.environ.get(
        "CARGO_RELEASE_DIR", os.path.expanduser("~/.cache/omnigraph-release")
    )
    env = dict(os.environ, CARGO_TARGET_DIR=target)
    subprocess.run(["./scripts/setup.sh"], cwd=ROOT, check=True)
    subprocess.run(
        ["cargo", "build", "-q", "--release", "--bin", "omnigraph", "--bin", "omnigraph-bench"],
        cwd=ROOT, env=env, check=True,
    )
    bin_dir = os.path.join(target, "release")
    if not os.path.exists(os.path.join(data, "meta.json")):
        shared = os.environ.get("SHARED", os.path.join(ROOT, "..", "shared", "bench"))
        subprocess.run(
            [sys.executable, os.path.join(shared, "gen_social.py"), "--persons", "100000",
             "--knows", "1000000", "--seed", "42", "--out", data],
            check=True, stdout=subprocess.DEVNULL,
        )
    now = {}
    with tempfile.TemporaryDirectory() as tmp:
        graph = os.path.join(tmp, "s100k.omni")
        for state in ["loaded", "optimized"]:
            if state == "optimized":
                subprocess.run(
                    [os.path.join(bin_dir, "omnigraph"), "optimize", graph, "--branch", "main"],
                    check=True, stdout=subprocess.DEVNULL,
                )
            warm = os.path.join(tmp, f"warm_{state}.json")
            cold = os.path.join(tmp, f"cold_{state}.json")
            # The first state's run loads the data into the empty graph.
            subprocess.run(
                [os.path.join(bin_dir, "omnigraph-bench"), "queries", data, "--graph", graph,
                 "--repeats", repeats, "--json", warm],
                check=True, stdout=subprocess.DEVNULL,
            )
            subprocess.run(
                [sys.executable, os.path.join(HERE, "cold.py"), os.path.join(bin_dir, "omnigraph"),
                 graph, os.path.join(data, "meta.json"), "--repeats", cold_repeats, "--json", cold],
                check=True, stdout=subprocess.DEVNULL,
            )
            # On a branch of its own: main, which the next state reads,
            # stays as it was.
            after = os.path.join(tmp, f"after_write_{state}.json")
            subprocess.run(
                [os.path.join(bin_dir, "omnigraph-bench"), "delta", data, "--graph", graph,
                 "--repeats", "5", "--json", after],
                check=True, stdout=subprocess.DEVNULL,
            )
            for variant, f in json.load(open(warm)).items():
                now[f"{state} warm {variant}"] = f["warm_ms"]
            for variant, f in json.load(open(after)).items():
                if not variant.startswith("no_write:"):
                    now[f"{state} first_after_write {variant}"] = f["first_ms"]
            for variant, ms in json.load(open(cold)).items():
                now[f"{state} cold {variant}"] = ms
    recorded = json.load(open(FIGURES)) if os.path.exists(FIGURES) else {}
    print("| state | mode | query | now ms | recorded ms | now / recorded |")
    print("|---|---|---|---|---|---|")
    for key, ms in now.items():
        state, mode, variant = key.split(" ")
        was = recorded.get(key)
        if was:
            ratio = ms / was
            mark = " SLOWER" if ratio > SLOWER else ""
            cells = f"{was:.2f} | {ratio:.2f}x{mark}"
        else:
            cells = "- | -"
        print(f"| {state} | {mode} | {variant} | {ms:.2f} | {cells} |")
    if "--record" in sys.argv:
        with open(FIGURES, "w") as f:
            json.dump({k: round(v, 3) for k, v in now.items()}, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"\nrecorded in {FIGURES}")


if __name__ == "__main__":
    main()
