#!/usr/bin/env python3
"""The Python package against the embedded Rust handle and the CLI, and
against Kùzu's and LanceDB's Python packages, on the shared social data.

  python bench/python_bench.py DIR [--big-graph G1M] [--repeats 2000]

DIR holds gen_social.py's persons.csv, knows.csv and social.jsonl. Needs
the package installed (docs/python.md), pyarrow, and for the peers kuzu
and lancedb. Prints a Markdown table; figures go in docs/benchmarks.md.

- point query: q1 (a key lookup of the hub) in a warm process, median and
  p90 of REPEATS calls, through `Graph.query` (and with `to_pylist()`);
  the embedded Rust handle's figure is `omnigraph-bench queries --only
  q1_hub` in the same sitting (BIN, default the release build).
- 1M-row result: `to_arrow()` of every Person of the s1m graph G1M (time
  and resident memory before and after: no column is copied).
- bulk load: Person and Knows from pyarrow tables (read from the CSVs
  first, not timed) into a fresh graph, against `omnigraph load` of
  social.jsonl in a fresh process; Kùzu's COPY FROM of the same CSVs and
  LanceDB's create_table of the same tables.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.csv as pacsv

import omnigraph

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = open(os.path.join(HERE, "social.pg")).read()
Q1 = "query q1($h: String) { match { $p: Person { handle: $h } } return { $p.name, $p.age } }"
ALL = "query all() { match { $p: Person } return { $p.handle, $p.age } }"


def opt(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def spread(samples_s):
    xs = sorted(samples_s)
    return statistics.median(xs) * 1e6, xs[int(len(xs) * 0.9)] * 1e6


def tables(data):
    persons = pacsv.read_csv(os.path.join(data, "persons.csv"),
                             convert_options=pacsv.ConvertOptions(column_types={"age": pa.int32()}))
    knows = pacsv.read_csv(os.path.join(data, "knows.csv"),
                           convert_options=pacsv.ConvertOptions(column_types={"since": pa.int32()}))
    return persons, knows


def time_calls(f, repeats):
    for _ in range(50):
        f()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return out


def main():
    data = sys.argv[1]
    repeats = int(opt("--repeats", "2000"))
    bin_dir = opt("--bin", os.path.expanduser("~/.cache/omnigraph-release/release"))
    meta = json.load(open(os.path.join(data, "meta.json")))
    hub = meta["start"]["hub"]
    persons, knows = tables(data)
    rows = []
    tmp = tempfile.mkdtemp()

    # Bulk load from pyarrow tables, and through the CLI from JSONL.
    loads = []
    for i in range(3):
        path = os.path.join(tmp, f"py{i}.omni")
        with omnigraph.init(path, SCHEMA) as g:
            t = time.perf_counter()
            g.load({"Person": persons, "Knows": knows}, mode="overwrite")
            loads.append(time.perf_counter() - t)
    rows.append(("load s100k from pyarrow tables (Graph.load)", f"{statistics.median(loads):.2f} s", str([round(x, 2) for x in loads])))
    cli = []
    schema_file = os.path.join(HERE, "social.pg")
    for i in range(3):
        path = os.path.join(tmp, f"cli{i}.omni")
        subprocess.run([f"{bin_dir}/omnigraph", "init", path, "--schema", schema_file], check=True, stdout=subprocess.DEVNULL)
        t = time.perf_counter()
        subprocess.run([f"{bin_dir}/omnigraph", "load", path, "--data", os.path.join(data, "social.jsonl"), "--mode", "overwrite"], check=True, stdout=subprocess.DEVNULL)
        cli.append(time.perf_counter() - t)
    rows.append(("load s100k from social.jsonl (omnigraph load, one process)", f"{statistics.median(cli):.2f} s", str([round(x, 2) for x in cli])))

    # The warm point query.
    g = omnigraph.open(os.path.join(tmp, "py0.omni"))
    assert g.query(Q1, params={"h": hub}).to_pylist()[0]["p.name"]
    med, p90 = spread(time_calls(lambda: g.query(Q1, params={"h": hub}), repeats))
    rows.append(("q1 warm, Graph.query", f"{med:.1f} µs", f"p90 {p90:.1f} µs"))
    med, p90 = spread(time_calls(lambda: g.query(Q1, params={"h": hub}).to_pylist(), repeats))
    rows.append(("q1 warm, Graph.query + to_pylist()", f"{med:.1f} µs", f"p90 {p90:.1f} µs"))
    out = os.path.join(tmp, "rust.json")
    subprocess.run([f"{bin_dir}/omnigraph-bench", "queries", data, "--graph", os.path.join(tmp, "cli0.omni"),
                    "--only", "q1_hub", "--repeats", str(repeats), "--json", out], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rust = json.load(open(out))["q1_hub"]
    rows.append(("q1 warm, embedded Rust handle (omnigraph-bench)", f"{rust['warm_ms'] * 1000:.1f} µs", "median"))
    g.close()

    big = opt("--big-graph")
    if big:
        with omnigraph.open(big, read_only=True) as gb:
            # pyarrow.table() imports pandas on its first call (a quarter
            # of a second, and its memory): paid here, not below.
            gb.query(Q1, params={"h": hub}).to_arrow()
            gb.query(ALL)
            t = time.perf_counter()
            r = gb.query(ALL)
            q = time.perf_counter() - t
            before = rss_mb()
            t = time.perf_counter()
            table = r.to_arrow()
            conv = time.perf_counter() - t
            after = rss_mb()
            rows.append((f"{table.num_rows:,}-row query (warm)", f"{q * 1000:.1f} ms", ""))
            rows.append((f"to_arrow() of {table.num_rows:,} rows ({table.nbytes / 1e6:.0f} MB of columns)",
                         f"{conv * 1e6:.0f} µs", f"RSS {before:.0f} -> {after:.0f} MB"))

    peers(data, persons, knows, hub, repeats, tmp, rows)
    print("| what | median | detail |")
    print("|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


def peers(data, persons, knows, hub, repeats, tmp, rows):
    try:
        import kuzu
    except ImportError:
        kuzu = None
    if kuzu is not None:
        loads = []
        for i in range(3):
            db = kuzu.Database(os.path.join(tmp, f"kuzu{i}"))
            conn = kuzu.Connection(db)
            conn.execute("CREATE NODE TABLE Person(handle STRING, name STRING, age INT32, city STRING, PRIMARY KEY(handle))")
            conn.execute("CREATE REL TABLE Knows(FROM Person TO Person, since INT32)")
            t = time.perf_counter()
            conn.execute(f"COPY Person FROM '{os.path.join(data, 'persons.csv')}' (HEADER=true)")
            conn.execute(f"COPY Knows FROM '{os.path.join(data, 'knows.csv')}' (HEADER=true)")
            loads.append(time.perf_counter() - t)
        rows.append(("Kùzu: COPY FROM the CSVs", f"{statistics.median(loads):.2f} s", str([round(x, 2) for x in loads])))
        stmt = "MATCH (p:Person {handle: $h}) RETURN p.name, p.age"
        med, p90 = spread(time_calls(lambda: conn.execute(stmt, {"h": hub}).get_all(), repeats))
        rows.append(("Kùzu: q1 warm, execute + get_all()", f"{med:.1f} µs", f"p90 {p90:.1f} µs"))
    try:
        import lancedb
    except ImportError:
        return
    loads = []
    for i in range(3):
        db = lancedb.connect(os.path.join(tmp, f"lancedb{i}"))
        t = time.perf_counter()
        tp = db.create_table("person", persons)
        db.create_table("knows", knows)
        loads.append(time.perf_counter() - t)
    rows.append(("LanceDB: create_table of the same pyarrow tables (no key check)", f"{statistics.median(loads):.2f} s", str([round(x, 2) for x in loads])))
    tp.create_scalar_index("handle")
    look = lambda: tp.search().where(f"handle = '{hub}'").select(["name", "age"]).limit(1).to_arrow()
    assert look().num_rows == 1
    med, p90 = spread(time_calls(look, max(200, repeats // 10)))
    rows.append(("LanceDB: q1 warm, BTREE-indexed where + to_arrow()", f"{med:.1f} µs", f"p90 {p90:.1f} µs"))


if __name__ == "__main__":
    main()
