#!/usr/bin/env bash
# Single-node (non-clustered) NATS JetStream server for the R1 baseline.
#   bench/nats-r1.sh start|stop|status
#   client 127.0.0.1:14232, monitor 127.0.0.1:18232; state in ${TMPDIR:-/tmp}/peers-nats-r1
set -euo pipefail
NODES=1 CLIENT_PORT=${CLIENT_PORT:-14232} MON_PORT=${MON_PORT:-18232} ROUTE_PORT=${ROUTE_PORT:-16232} \
  exec "$(dirname "$0")/nats-r3.sh" "$@"
