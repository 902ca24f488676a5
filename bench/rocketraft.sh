#!/usr/bin/env bash
# Start/stop a rocketraft cluster of real processes for side-by-side runs. Loopback only.
#
#   bench/rocketraft.sh start|stop
#
# One nameserver (127.0.0.1:29876) and one broker group of 3 `broker` processes
# (127.0.0.1:20911-20913), flush = $FLUSH (sync|async, default sync), from the
# release binaries of the checkout in $RR_ROOT (default: this repository).
# State lives in ${TMPDIR:-/tmp}/peers-rocketraft (pid files n*.pid, ns.pid).
set -euo pipefail
RR_ROOT=${RR_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=$RR_ROOT/target/release
DIR=${TMPDIR:-/tmp}/peers-rocketraft
FLUSH=${FLUSH:-sync}
NS=127.0.0.1:29876

start() {
  [ -x "$BIN/broker" ] || { echo "no $BIN/broker: cargo build --release --bins in $RR_ROOT" >&2; exit 1; }
  rm -rf "$DIR"; mkdir -p "$DIR"
  "$BIN/nameserver" --listen "$NS" >"$DIR/ns.log" 2>&1 & echo $! >"$DIR/ns.pid"
  for n in 1 2 3; do
    mkdir -p "$DIR/n$n"
    cat >"$DIR/n$n/broker.toml" <<TOML
cluster = "PeerCluster"
group = "broker-a"
node_id = $n
listen = "127.0.0.1:$((20910 + n))"
namesrv = ["$NS"]
data_dir = "$DIR/n$n/data"
flush = "$FLUSH"
auto_create_topic = true
bootstrap = $([ "$n" = 1 ] && echo true || echo false)

[peers]
1 = "127.0.0.1:20911"
2 = "127.0.0.1:20912"
3 = "127.0.0.1:20913"
TOML
    RUST_LOG=warn,openraft=error "$BIN/broker" --config "$DIR/n$n/broker.toml" >"$DIR/n$n.log" 2>&1 & echo $! >"$DIR/n$n.pid"
  done
  for _ in $(seq 1 60); do
    "$BIN/mqadmin" --namesrv "$NS" --json cluster-list 2>/dev/null | grep -q '"leader_addr":"127' && break
    sleep 0.5
  done
  "$BIN/mqadmin" --namesrv "$NS" --json cluster-list
  echo "ready: namesrv $NS flush=$FLUSH"
}

stop() {
  for f in "$DIR"/n*.pid "$DIR"/ns.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  sleep 1
  for f in "$DIR"/n*.pid "$DIR"/ns.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
  [ "${KEEP_DATA:-0}" = 1 ] || rm -rf "$DIR"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
