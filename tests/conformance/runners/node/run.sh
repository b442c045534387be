#!/bin/sh
# Conformance runner for the Node.js client: run.sh INPUT.json OUTPUT.json
# The client is the one `make node-client` installs into var/node/node_modules
# (override with NODE_CLIENT_MODULES=/path/to/node_modules).
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
modules=${NODE_CLIENT_MODULES:-$root/var/node/node_modules}
if [ ! -f "$modules/rocketmq-client-nodejs/package.json" ]; then
  echo "run.sh: rocketmq-client-nodejs is not installed in $modules (make node-client)" >&2
  exit 2
fi
NODE_PATH="$modules${NODE_PATH:+:$NODE_PATH}" exec node "$here/runner.js" "$@"
