#!/usr/bin/env bash
# Reproduces the object-storage figures of docs/benchmarks.md: the same
# operations on local disk and on the local S3-compatible server
# (scripts/s3-server.py), with the object-store requests of each.
# Usage: bench/s3.sh   (needs the s100k data of bench/run.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SHARED:-../shared/bench}
export CARGO_TARGET_DIR=${CARGO_RELEASE_DIR:-$HOME/.cache/omnigraph-release}
./scripts/setup.sh
source ./scripts/s3-env.sh
cargo build --release --bin omnigraph --bin omnigraph-bench
BIN=$CARGO_TARGET_DIR/release
OUT=${OUT:-/tmp/omnigraph-bench}
RUN=$(date +%s)
mkdir -p "$OUT"
D=/tmp/peers_data/s100k
if [ ! -f "$D/meta.json" ]; then
  python3 "$SHARED/gen_social.py" --persons 100000 --knows 1000000 --seed 42 --out "$D" > /dev/null
fi
echo "## 1-row commit, branch create, opens: local disk"
rm -rf "$OUT/costs-$RUN.omni"
"$BIN/omnigraph-bench" object-store "$OUT/costs-$RUN.omni" --n 30
echo "## the same on S3"
"$BIN/omnigraph-bench" object-store "$OMNIGRAPH_TEST_S3/bench-$RUN/costs.omni" --n 30
echo "## s100k on S3: load, then warm queries (one process)"
S3G="$OMNIGRAPH_TEST_S3/bench-$RUN/s100k.omni"
"$BIN/omnigraph-bench" queries "$D" --graph "$S3G" --repeats 3
echo "## s100k cold queries on S3 (one CLI process per query; median of 3)"
python3 bench/cold.py "$BIN/omnigraph" "$S3G" "$D/meta.json"
echo "## s100k cold queries on local disk, same sitting"
LG="$OUT/s100k-$RUN.omni"
"$BIN/omnigraph-bench" queries "$D" --graph "$LG" --repeats 3 > /dev/null
python3 bench/cold.py "$BIN/omnigraph" "$LG" "$D/meta.json"
echo "## requests of one cold q1 and q2 on S3"
for q in q1 q2; do
  "$BIN/omnigraph" query --store "$S3G" --query bench/queries.gq $q --format json \
    --params "{\"h\":\"$(python3 -c "import json;print(json.load(open('$D/meta.json'))['start']['hub'])")\"}" --stats 2>&1 >/dev/null | grep "object store"
done
