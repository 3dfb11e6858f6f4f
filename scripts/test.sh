#!/usr/bin/env bash
# The test suite: unit tests of every crate and the integration tests, on
# local disk and on a local S3-compatible server this script starts; then
# the Python package's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
source ./scripts/s3-env.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/omnigraph-target}"
cargo test --workspace "$@"
./scripts/python-test.sh
