#!/usr/bin/env python3
"""Cold search: one `omnigraph query` process per query (open, read, rank,
print), 5 runs each, median wall time.

  python3 bench/search_cold.py OMNIGRAPH_BIN DIR GRAPH_URI
"""
import json
import statistics
import subprocess
import sys
import time


def main():
    binary, d, uri = sys.argv[1:4]
    q = json.load(open(f"{d}/queries.json"))
    dim = json.load(open(f"{d}/meta.json"))["dim"]
    v, t = q["vectors"][0], q["texts"][0]
    cases = {
        "vector top 10": (f"query q($v: Vector({dim})) {{ match {{ $d: Doc }} return {{ $d.slug }} order {{ nearest($d.embedding, $v) }} limit 10 }}", {"v": v}),
        "BM25 top 10": ("query q($t: String) { match { $d: Doc } return { $d.slug, bm25($d.body, $t) as s } order { s desc } limit 10 }", {"t": t}),
        "hybrid top 10": (f"query q($v: Vector({dim}), $t: String) {{ match {{ $d: Doc }} return {{ $d.slug, rrf(nearest($d.embedding, $v), bm25($d.body, $t)) as s }} order {{ s desc }} limit 10 }}", {"v": v, "t": t}),
    }
    for name, (src, params) in cases.items():
        ms = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = subprocess.run([binary, "query", "--store", uri, "-e", src, "--params", json.dumps(params),
                                "--format", "json"], capture_output=True)
            ms.append((time.perf_counter() - t0) * 1000)
            if r.returncode != 0:
                sys.exit(r.stderr.decode())
        print(f"| {name} | {statistics.median(ms):.0f} ms |")


if __name__ == "__main__":
    main()
