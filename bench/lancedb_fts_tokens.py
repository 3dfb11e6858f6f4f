#!/usr/bin/env python3
"""LanceDB 0.40's FTS with Omnigraph's tokenizer, for the BM25 comparison:
lowercase runs of letters and digits, no stemming, no stop words, no ASCII
folding, no token length cap. Builds the index on the table
lancedb_bench.py made (DIR's docs in DB), times the corpus's 20 text
queries (one warm-up pass, then --repeats passes; median and p90), and
reports the top-10 overlap with the independent BM25 of DIR/truth.json.

  python3 bench/lancedb_fts_tokens.py DIR --db /tmp/lancedb_search/35k [--repeats 3]
"""
import argparse
import json
import statistics
import time

import lancedb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--db", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    texts = json.load(open(f"{a.dir}/queries.json"))["texts"]
    truth = json.load(open(f"{a.dir}/truth.json"))["bm25"]
    tbl = lancedb.connect(a.db).open_table("docs")
    t = time.perf_counter()
    tbl.create_fts_index("body", replace=True, base_tokenizer="simple", lower_case=True,
                         stem=False, remove_stop_words=False, ascii_folding=False,
                         max_token_length=None)
    build_s = time.perf_counter() - t

    def run(q):
        return [r["slug"] for r in tbl.search(q, query_type="fts", fts_columns="body")
                .select(["slug"]).limit(10).to_list()]

    for q in texts:
        run(q)
    ms, first = [], None
    for _ in range(a.repeats):
        got = []
        for q in texts:
            t = time.perf_counter()
            got.append(run(q))
            ms.append((time.perf_counter() - t) * 1000)
        first = first or got
    ms.sort()
    overlap = statistics.mean(len(set(g) & set(w)) / max(len(w), 1) for g, w in zip(first, truth))
    print(f"| LanceDB FTS, Omnigraph's tokenizer | build {build_s:.2f} s | median {statistics.median(ms):.2f} ms "
          f"| p90 {ms[int(len(ms) * 0.9)]:.2f} ms | top-10 overlap with the independent BM25 {overlap:.3f} |")


if __name__ == "__main__":
    main()
