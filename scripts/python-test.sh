#!/usr/bin/env bash
# The Python package's tests: the extension built in the test build's
# target directory and profile (so it reuses the engine's compiled
# dependencies), installed into a virtualenv with the test tools; the
# remote client's against the CLI's `serve` of the same build.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/omnigraph-target}"
VENV="${OMNIGRAPH_VENV:-$HOME/.cache/omnigraph-venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -c "import maturin, pytest, pyarrow, pandas, polars, duckdb, lance, tqdm" 2>/dev/null; then
  "$VENV/bin/pip" install -q maturin pytest pyarrow pandas polars duckdb "pylance==14.*" tqdm
fi
# The remote client's tests talk to a real server: the CLI of this build.
cargo build -q --bin omnigraph
export OMNIGRAPH_BIN="$CARGO_TARGET_DIR/debug/omnigraph"
(cd python && VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH" maturin develop --profile dev --quiet)
"$VENV/bin/python" -m pytest python/tests -q "$@"
