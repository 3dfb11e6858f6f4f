#!/usr/bin/env bash
# Reproduces docs/benchmarks.md: Omnigraph and its peers, side by side, on
# the shared social workload. Needs python3 with pyarrow numpy pylance kuzu
# (pip install pyarrow numpy pylance 'kuzu==0.11.*').
# Usage: bench/run.sh [s100k] [s1m]
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/bench}
export CARGO_TARGET_DIR=${CARGO_RELEASE_DIR:-$HOME/.cache/omnigraph-release}
./scripts/setup.sh
cargo build --release --bin omnigraph --bin omnigraph-bench
BIN=$CARGO_TARGET_DIR/release
OUT=${OUT:-/tmp/omnigraph-bench}
mkdir -p "$OUT"
for tag in ${*:-s100k}; do
  case $tag in
    s100k) N=100000;  M=1000000 ;;
    s1m)   N=1000000; M=10000000 ;;
    *) echo "unknown size $tag"; exit 2 ;;
  esac
  D=/tmp/peers_data/$tag
  if [ ! -f "$D/meta.json" ]; then
    python3 "$SHARED/gen_social.py" --persons $N --knows $M --seed 42 --out "$D" > /dev/null
  fi
  [ -f "$OUT/ref_$tag.json" ] || python3 "$SHARED/reference_answers.py" "$D" --out "$OUT/ref_$tag.json" > /dev/null
  echo "## $tag: load (overwrite of social.jsonl)"
  "$BIN/omnigraph-bench" load "$D" --repeats ${REPEATS:-1}
  echo "## $tag: peers' load"
  python3 "$SHARED/lance_floor.py" "$D" --repeats 1 --target "$OUT/lance_$tag" --out "$OUT/lance_$tag.json" 2>&1 | tail -3
  python3 "$SHARED/kuzu_bench.py" "$D" --load-repeats 1 --db "$OUT/kuzu_$tag" --out "$OUT/kuzu_$tag.json" 2>&1 | tail -25
  echo "## $tag: queries, warm (one process)"
  rm -rf "$OUT/$tag.omni"
  "$BIN/omnigraph-bench" queries "$D" --graph "$OUT/$tag.omni" --repeats 10 --reference "$OUT/ref_$tag.json"
  echo "## $tag: queries, cold (one CLI process per query; median of 3)"
  python3 bench/cold.py "$BIN/omnigraph" "$OUT/$tag.omni" "$D/meta.json"
  echo "## $tag: cold after optimize (persisted graph index, id BTREE)"
  "$BIN/omnigraph" optimize "$OUT/$tag.omni" --branch main > /dev/null
  python3 bench/cold.py "$BIN/omnigraph" "$OUT/$tag.omni" "$D/meta.json" --repeats 5
  echo "## $tag: cold right after small writes"
  bench/after_write.sh "$BIN/omnigraph" "$OUT/$tag.omni" "$D/meta.json" --repeats 5
  echo "## $tag: first and warm traversals after small writes (one process)"
  "$BIN/omnigraph-bench" delta "$D" --graph "$OUT/$tag.omni" --repeats 5
  echo "## $tag: schema applies, then one-row inserts"
  "$BIN/omnigraph-bench" schema "$D" --repeats 2
done
echo "## blobs: 64 MiB in 4 MiB ranges vs a plain file and pylance; stat; first byte of blob get"
"$BIN/omnigraph-bench" blob "$OUT/blob" --mib 64 --repeats 5
echo "## single-row mutation as one CLI process"
python3 bench/cli_mutate.py "$BIN/omnigraph" --n 30
echo "## 1-row append latency (10 types)"
"$BIN/omnigraph-bench" append --n 300
echo "## mutations: latency, writer scaling, latency vs history"
"$BIN/omnigraph-bench" mutations --n 300 --history 10000
