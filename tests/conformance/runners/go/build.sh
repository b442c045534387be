#!/usr/bin/env bash
# Builds the Go conformance runner into var/conformance/go/runner (Go's build cache makes a
# rebuild with nothing changed take about a second). Idempotent.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
out="$repo/var/conformance/go/runner"
mkdir -p "$(dirname "$out")"
cd "$here"
# go.sum pins every module; -mod=readonly never edits go.mod/go.sum during a build.
go build -mod=readonly -trimpath -o "$out" .
echo "built $out"
