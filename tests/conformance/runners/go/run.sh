#!/usr/bin/env bash
# run.sh INPUT.json OUTPUT.json: runs the built Go conformance runner (build.sh builds it,
# and is run here first when the binary is missing). The client's own logs go to files,
# never to stdout: $CONFORMANCE_GO_LOG_DIR, default var/conformance/go/logs (the last run's).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 INPUT.json OUTPUT.json" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
bin="$repo/var/conformance/go/runner"
if [ ! -x "$bin" ]; then
  "$here/build.sh" >&2
fi
if [ -z "${CONFORMANCE_GO_LOG_DIR:-}" ]; then
  export CONFORMANCE_GO_LOG_DIR="$repo/var/conformance/go/logs"
  rm -rf "$CONFORMANCE_GO_LOG_DIR"
fi
# The client reads these at start-up (the runner sets the same defaults itself).
exec env "rocketmq.client.logRoot=$CONFORMANCE_GO_LOG_DIR" "mq.consoleAppender.enabled=false" \
  "$bin" "$1" "$2"
