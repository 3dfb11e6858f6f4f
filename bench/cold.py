#!/usr/bin/env python3
"""Cold query timings: one `omnigraph query` process per run (the OS page
cache stays warm; the process, its runtime cache and graph index start empty).
Usage: cold.py OMNIGRAPH_BIN GRAPH META_JSON [--repeats 3] [--branch B]
[--only q2_hub,q5,...] [--json FILE]   (FILE: {variant: median ms})"""
import json
import os
import statistics
import subprocess
import sys
import time

binary, graph, meta_path = sys.argv[1:4]
def opt(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default

repeats = int(opt("--repeats", 3))
branch = opt("--branch", "main")
only = opt("--only")
out = opt("--json")
figures = {}
meta = json.load(open(meta_path))
hub, median = meta["start"]["hub"], meta["start"]["median"]
gq = os.path.join(os.path.dirname(os.path.abspath(__file__)), "queries.gq")
variants = [
    ("q1", "q1_hub", {"h": hub}), ("q1", "q1_median", {"h": median}),
    ("q2", "q2_hub", {"h": hub}), ("q2", "q2_median", {"h": median}),
    ("q3", "q3_hub", {"h": hub}), ("q4", "q4_hub", {"h": hub}),
    ("q5", "q5", None), ("q6", "q6", None),
]
print("| variant | cold median ms | runs |")
print("|---|---|---|")
for q, name, params in variants:
    if only and name not in only.split(","):
        continue
    cmd = [binary, "query", "--store", graph, "--branch", branch, "--query", gq, q, "--format", "json"]
    if params:
        cmd += ["--params", json.dumps(params)]
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append((time.perf_counter() - t) * 1000)
    figures[name] = statistics.median(times)
    print(f"| {name} | {figures[name]:.0f} | {', '.join(f'{x:.0f}' for x in times)} |")
if out:
    with open(out, "w") as f:
        json.dump(figures, f)
