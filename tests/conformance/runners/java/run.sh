#!/usr/bin/env bash
# Runs the Java conformance runner built by build.sh:  run.sh INPUT.json OUTPUT.json
# The client's own log goes to <OUTPUT's directory>/java-client-logs/; progress to stderr.
set -euo pipefail
if [[ $# -ne 2 ]]; then
    echo "usage: $0 INPUT.json OUTPUT.json" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
out=${CONFORMANCE_JAVA_OUT:-$repo/var/conformance/java}
if [[ ! -f $out/runner.jar || ! -f $out/classpath.txt ]]; then
    echo "java runner: not built; run $here/build.sh first" >&2
    exit 1
fi
input=$(realpath "$1")
mkdir -p "$(dirname "$2")"
output=$(realpath "$2")
logs="$(dirname "$output")/java-client-logs"
mkdir -p "$logs"
# C1 only and the serial collector: a JVM of a minute or two spends less CPU
# compiling and collecting (the suite runs on two cores).
exec java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
    -Drocketmq.log.root="$logs" -Dmq.consoleAppender.enabled=false \
    -cp "$out/runner.jar:$(cat "$out/classpath.txt")" \
    conformance.Runner "$input" "$output"
