#!/usr/bin/env bash
# Builds the CLI and runs the guided demo on a fresh embedded graph.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/omnigraph-target}"
cargo run --quiet --bin omnigraph -- demo "$@"
