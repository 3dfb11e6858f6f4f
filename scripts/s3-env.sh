# Sourced by the test and benchmark scripts: makes sure a local S3-compatible
# server (scripts/s3-server.py, moto) answers on 127.0.0.1, starting one if
# needed, and exports the usual AWS environment that points the graph's
# `s3://` URIs at it, plus OMNIGRAPH_TEST_S3, the bucket the tests use.
OMNIGRAPH_S3_PORT="${OMNIGRAPH_S3_PORT:-45123}"
if ! python3 -c "import moto.server, werkzeug" >/dev/null 2>&1; then
  python3 -m pip install -q --disable-pip-version-check 'moto[server]==5.2.1' >/dev/null 2>&1 \
    || python3 -m pip install -q --disable-pip-version-check --break-system-packages 'moto[server]==5.2.1'
fi
if ! python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 1)" "$OMNIGRAPH_S3_PORT" 2>/dev/null; then
  _log="${TMPDIR:-/tmp}/omnigraph-s3-${OMNIGRAPH_S3_PORT}.log"
  nohup python3 "$(dirname "${BASH_SOURCE[0]}")/s3-server.py" "$OMNIGRAPH_S3_PORT" omni-test >"$_log" 2>&1 &
  for _ in $(seq 1 100); do
    grep -q '^ready' "$_log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q '^ready' "$_log" || { echo "the local S3 server did not start:"; cat "$_log"; exit 1; }
fi
export AWS_ENDPOINT_URL="http://127.0.0.1:${OMNIGRAPH_S3_PORT}"
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-omnigraph}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-omnigraph}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ALLOW_HTTP=true
export OMNIGRAPH_TEST_S3="s3://omni-test"
