#!/usr/bin/env python3
"""Reference answers for the search benchmark, computed independently of the
engine: exact cosine top 10 (numpy), the same restricted to year >= 2020, and
BM25 top 10 with the project's pinned tokenizer (lowercase Unicode letter and
digit runs, no stemming, no stop words; k1 1.2, b 0.75,
idf ln(1 + (N - df + .5) / (df + .5)), distinct query tokens).

  python3 bench/search_truth.py DIR      # writes DIR/truth.json
"""
import json
import math
import os
import re
import sys
from collections import Counter

import numpy as np
import pyarrow.parquet as pq

TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def tokens(text):
    return [t.lower() for t in TOKEN.findall(text)]


def top(scores, slugs, n, higher):
    order = sorted(range(len(slugs)), key=lambda i: ((-scores[i] if higher else scores[i]), slugs[i]))
    return [slugs[i] for i in order[:n]]


def main():
    d = sys.argv[1]
    data = pq.read_table(os.path.join(d, "docs.parquet"))
    q = json.load(open(os.path.join(d, "queries.json")))
    slugs = data.column("slug").to_pylist()
    n, dim = data.num_rows, data.schema.field("embedding").type.list_size
    E = np.asarray(data.column("embedding").combine_chunks().values, dtype=np.float64).reshape(n, dim)
    En = E / np.linalg.norm(E, axis=1, keepdims=True)
    year = np.asarray(data.column("year"))
    vec, pre = [], []
    for v in q["vectors"]:
        v = np.asarray(v, dtype=np.float64)
        dist = 1.0 - En @ (v / np.linalg.norm(v))
        vec.append(top(dist.tolist(), slugs, 10, False))
        masked = np.where(year >= 2020, dist, np.inf)
        keep = [i for i in range(n) if year[i] >= 2020]
        pre.append(top([masked[i] for i in keep], [slugs[i] for i in keep], 10, False))
    docs = [tokens(b) for b in data.column("body").to_pylist()]
    lengths = [len(t) for t in docs]
    avgdl = sum(lengths) / n
    tf = [Counter(t) for t in docs]
    df = Counter()
    for c in tf:
        df.update(c.keys())
    bm25 = []
    for text in q["texts"]:
        qt = list(dict.fromkeys(tokens(text)))
        scores, names = [], []
        for i, c in enumerate(tf):
            s, hit = 0.0, False
            for t in qt:
                f = c.get(t, 0)
                if f == 0:
                    continue
                hit = True
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * lengths[i] / avgdl))
            if hit:
                scores.append(s)
                names.append(slugs[i])
        bm25.append(top(scores, names, 10, True))
    with open(os.path.join(d, "truth.json"), "w") as f:
        json.dump({"vector": vec, "prefilter": pre, "bm25": bm25}, f)
    print(f"wrote {os.path.join(d, 'truth.json')}")


if __name__ == "__main__":
    main()
