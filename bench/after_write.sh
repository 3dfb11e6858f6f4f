#!/usr/bin/env bash
# Cold traversals right after a small write: on branches of an optimized
# social graph, one with no write, one after a one-edge insert, one after a
# one-person update (a row that moves), one after a 1,000-edge insert and
# one after a one-person delete (its edges deleted with it), then cold.py's
# q2..q5 on each.
# Usage: bench/after_write.sh OMNIGRAPH_BIN GRAPH META_JSON [--repeats N]
set -euo pipefail
bin=$1 graph=$2 meta=$3
repeats=${5:-5}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hub=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['start']['hub'])" "$meta")
median=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['start']['median'])" "$meta")
persons=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['persons'])" "$meta")
echo "{\"edge\":\"Knows\",\"from\":\"$hub\",\"to\":\"$median\",\"data\":{\"since\":2020}}" > "$tmp/edge.jsonl"
echo "{\"type\":\"Person\",\"data\":{\"handle\":\"$median\",\"name\":\"Moved Person\",\"age\":40,\"city\":\"Lagos\"}}" > "$tmp/person.jsonl"
python3 - "$persons" "$tmp/edges.jsonl" <<'PY'
import random, sys
n, out = int(sys.argv[1]), sys.argv[2]
rng = random.Random(7)
with open(out, "w") as f:
    for _ in range(1000):
        f.write('{"edge":"Knows","from":"p%d","to":"p%d","data":{"since":2021}}\n'
                % (rng.randrange(n), rng.randrange(n)))
PY
for b in after/none after/edge after/person after/edges after/delete; do
  "$bin" branch delete "$b" --store "$graph" >/dev/null 2>&1 || true
  "$bin" branch create --from main "$b" --store "$graph" >/dev/null
done
"$bin" load --data "$tmp/edge.jsonl" --mode append --branch after/edge "$graph" >/dev/null
"$bin" load --data "$tmp/person.jsonl" --mode merge --branch after/person "$graph" >/dev/null
"$bin" load --data "$tmp/edges.jsonl" --mode append --branch after/edges "$graph" >/dev/null
"$bin" mutate --store "$graph" --branch after/delete \
  -e "query d() { delete Person where handle = \"$median\" }" >/dev/null
for b in after/none after/edge after/person after/edges after/delete; do
  echo "## $b"
  python3 "$here/cold.py" "$bin" "$graph" "$meta" --repeats "$repeats" --branch "$b" --only q2_hub,q3_hub,q4_hub,q5
done
