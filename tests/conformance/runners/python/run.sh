#!/usr/bin/env bash
# The Python runner with the project's venv (rocketmq-python-client from PyPI).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
exec "$root/.venv/bin/python" "$here/runner.py" "$1" "$2"
