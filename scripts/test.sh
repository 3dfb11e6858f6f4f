#!/usr/bin/env bash
# The test suite: unit tests of every crate and the integration tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/omnigraph-target}"
cargo test --workspace "$@"
