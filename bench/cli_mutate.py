#!/usr/bin/env python3
"""Single-row mutation latency as one `omnigraph mutate` process per commit
(process start, open, the commit, exit) on a fresh local graph, or with
--graph on an existing social graph (an insert into a large table: its key
check probes the whole id column, or its BTREE after `omnigraph optimize`).
Usage: cli_mutate.py OMNIGRAPH_BIN [--n 30] [--graph URI]"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

binary = sys.argv[1]
n = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 30
schema = os.path.join(os.path.dirname(os.path.abspath(__file__)), "social.pg")
gq = 'query add($n: String) { insert Person { handle: $n, name: $n, city: "x" } }'
given = sys.argv[sys.argv.index("--graph") + 1] if "--graph" in sys.argv else None
with tempfile.TemporaryDirectory() as tmp:
    graph = given or os.path.join(tmp, "g.omni")
    if not given:
        subprocess.run([binary, "init", "--schema", schema, graph], check=True, stdout=subprocess.DEVNULL)
    times = []
    tag = f"c{time.time_ns()}-"
    for i in range(n + 1):
        cmd = [binary, "mutate", "--store", graph, "-e", gq, "add", "--params", json.dumps({"n": f"{tag}{i}"})]
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        if i > 0:  # the first one also warms the page cache
            times.append((time.perf_counter() - t) * 1000)
    times.sort()
    p99 = times[min(len(times) - 1, round((len(times) - 1) * 0.99))]
    print("| single-row mutation, one CLI process | median ms | p99 ms | n |")
    print("|---|---|---|---|")
    print(f"| omnigraph mutate | {statistics.median(times):.0f} | {p99:.0f} | {n} |")
