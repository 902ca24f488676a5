#!/usr/bin/env bash
# Start/stop a local NATS JetStream cluster for baselines. Loopback only.
#
#   bench/nats-r3.sh start|stop|status
#
# Default: 3 nodes (n1..n3), JetStream file storage, for R3 streams:
#   client  127.0.0.1:14222 14223 14224
#   route   127.0.0.1:16222 16223 16224
#   monitor 127.0.0.1:18222 18223 18224   (http://127.0.0.1:18222/jsz)
# State (configs, store dirs, logs, pids) lives in $NATS_DIR, default
# ${TMPDIR:-/tmp}/peers-nats-r3; stop removes it unless KEEP_DATA=1.
#
# NODES=1 gives a single non-clustered JetStream server (used by nats-r1.sh).
# Env overrides: NODES, NATS_DIR, CLIENT_PORT, ROUTE_PORT, MON_PORT (bases).
set -euo pipefail

NODES=${NODES:-3}
NATS_DIR=${NATS_DIR:-${TMPDIR:-/tmp}/peers-nats-r$NODES}
CLIENT_PORT=${CLIENT_PORT:-14222}
ROUTE_PORT=${ROUTE_PORT:-16222}
MON_PORT=${MON_PORT:-18222}
BIN=${NATS_SERVER:-nats-server}

pidfile() { echo "$NATS_DIR/n$1.pid"; }

is_running() { # node index
  local pf; pf=$(pidfile "$1")
  [ -f "$pf" ] && kill -0 "$(cat "$pf")" 2>/dev/null
}

write_conf() { # node index
  local i=$1 c=$((CLIENT_PORT + i - 1)) r=$((ROUTE_PORT + i - 1)) m=$((MON_PORT + i - 1))
  local f="$NATS_DIR/n$i.conf"
  {
    echo "server_name: n$i"
    echo "listen: 127.0.0.1:$c"
    echo "http: 127.0.0.1:$m"
    echo "max_payload: 1MB"
    echo "jetstream {"
    echo "  store_dir: \"$NATS_DIR/store-n$i\""
    echo "  max_memory_store: 256MB"
    echo "  max_file_store: 32GB"
    echo "}"
    if [ "$NODES" -gt 1 ]; then
      echo "cluster {"
      echo "  name: peers-r$NODES"
      echo "  listen: 127.0.0.1:$r"
      echo "  routes: ["
      for j in $(seq 1 "$NODES"); do echo "    nats-route://127.0.0.1:$((ROUTE_PORT + j - 1))"; done
      echo "  ]"
      echo "}"
    fi
  } > "$f"
}

start() {
  command -v "$BIN" >/dev/null || { echo "nats-server not found; run bench/setup.sh" >&2; exit 1; }
  mkdir -p "$NATS_DIR"
  for i in $(seq 1 "$NODES"); do
    if is_running "$i"; then echo "n$i already running (pid $(cat "$(pidfile "$i")"))"; continue; fi
    write_conf "$i"
    "$BIN" -t -c "$NATS_DIR/n$i.conf" >/dev/null 2>&1 || { "$BIN" -t -c "$NATS_DIR/n$i.conf"; exit 1; }
    setsid "$BIN" -c "$NATS_DIR/n$i.conf" -l "$NATS_DIR/n$i.log" </dev/null >/dev/null 2>&1 &
    echo $! > "$(pidfile "$i")"
    echo "n$i pid $! client 127.0.0.1:$((CLIENT_PORT + i - 1))"
  done
  # Wait until every node reports healthy (JetStream meta leader known).
  for i in $(seq 1 "$NODES"); do
    local m=$((MON_PORT + i - 1)) ok=0
    for _ in $(seq 1 100); do
      if curl -fsS "http://127.0.0.1:$m/healthz?js-enabled=true" 2>/dev/null | grep -q '"ok"'; then ok=1; break; fi
      sleep 0.2
    done
    [ "$ok" = 1 ] || { echo "n$i not healthy; see $NATS_DIR/n$i.log" >&2; exit 1; }
  done
  urls=$(for i in $(seq 1 "$NODES"); do printf 'nats://127.0.0.1:%d,' $((CLIENT_PORT + i - 1)); done)
  echo "ready: ${urls%,}"
}

stop() {
  for i in $(seq 1 "$NODES"); do
    local pf; pf=$(pidfile "$i")
    [ -f "$pf" ] || continue
    local pid; pid=$(cat "$pf")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
      echo "n$i (pid $pid) stopped"
    fi
    rm -f "$pf"
  done
  if [ "${KEEP_DATA:-0}" != 1 ]; then rm -rf "$NATS_DIR"; fi
}

status() {
  for i in $(seq 1 "$NODES"); do
    if is_running "$i"; then echo "n$i running pid $(cat "$(pidfile "$i")")"; else echo "n$i stopped"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
