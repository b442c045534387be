#!/usr/bin/env bash
# Builds the Java conformance runner (Maven) and records its classpath, so that run.sh needs
# only `java`. Idempotent: when pom.xml, the sources and this script are unchanged since the
# last successful build (stamp), it returns at once.
#   outputs: $CONFORMANCE_JAVA_OUT (default <repo>/var/conformance/java)/{runner.jar,classpath.txt,build.stamp}
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
out=${CONFORMANCE_JAVA_OUT:-$repo/var/conformance/java}
mkdir -p "$out"

fingerprint() {
    (cd "$here" && find pom.xml build.sh src -type f -print0 | sort -z | xargs -0 sha256sum
     java -version 2>&1) | sha256sum | cut -d' ' -f1
}
fp=$(fingerprint)
if [[ -f $out/build.stamp && "$(cat "$out/build.stamp")" == "$fp" \
      && -f $out/runner.jar && -f $out/classpath.txt ]]; then
    echo "java runner: up to date ($out)"
    exit 0
fi

rm -f "$out/build.stamp"
cd "$here"
mvn -q -B package dependency:build-classpath -Dmdep.outputFile="$out/classpath.txt"
cp target/conformance-runner-java-1.0.jar "$out/runner.jar"
# Check that every dependency on the classpath is really there.
tr ':' '\n' < "$out/classpath.txt" | while read -r jar; do
    [[ -z $jar || -f $jar ]] || { echo "java runner: missing $jar" >&2; exit 1; }
done
echo "$fp" > "$out/build.stamp"
echo "java runner: built ($out)"
