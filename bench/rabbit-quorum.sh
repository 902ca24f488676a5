#!/usr/bin/env bash
# Start/stop a local 3-node RabbitMQ cluster for quorum-queue baselines.
# Everything binds to loopback.
#
#   bench/rabbit-quorum.sh start|stop|status
#
# Nodes rabbit1@localhost .. rabbitN@localhost (NODES, default 3):
#   AMQP 127.0.0.1:25701 25702 25703   (user guest/guest, vhost /)
#   dist 127.0.0.1:25711 25712 25713   (inet_dist_use_interface 127.0.0.1)
#   epmd 127.0.0.1:24369               (private epmd, ERL_EPMD_PORT)
# No plugins are enabled (no management UI). Nodes 2..N join rabbit1 with
# join_cluster. State (mnesia, Ra WAL/segments, logs, cookie, pids) lives in
# $RABBIT_DIR, default ${TMPDIR:-/tmp}/peers-rabbit; stop removes it unless
# KEEP_DATA=1.
#
# RABBIT_WAL_SYNC=datasync|sync|none sets Ra's wal_sync_method (advanced.config).
# Unset = RabbitMQ's default (datasync: the WAL is fdatasync'ed before quorum
# queue writes are acknowledged, i.e. before publisher confirms).
set -euo pipefail

NODES=${NODES:-3}
RABBIT_DIR=${RABBIT_DIR:-${TMPDIR:-/tmp}/peers-rabbit}
AMQP_PORT=${AMQP_PORT:-25701}
DIST_PORT=${DIST_PORT:-25711}
EPMD_PORT=${EPMD_PORT:-24369}
RBIN=${RABBITMQ_BIN:-/usr/lib/rabbitmq/bin}

export HOME="$RABBIT_DIR"                  # .erlang.cookie lives here
export ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$EPMD_PORT"
export RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export RABBITMQ_CTL_DIST_PORT_MIN=$((DIST_PORT + 20)) RABBITMQ_CTL_DIST_PORT_MAX=$((DIST_PORT + 40))

node() { echo "rabbit$1@localhost"; }
ctl() { "$RBIN/rabbitmqctl" "$@"; }

node_env() { # node index -> exports for that node's server
  local i=$1 d="$RABBIT_DIR/rabbit$1"
  export RABBITMQ_NODENAME; RABBITMQ_NODENAME=$(node "$i")
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT=$((AMQP_PORT + i - 1))
  export RABBITMQ_DIST_PORT=$((DIST_PORT + i - 1))
  export RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf"
  export RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config"
  export RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins"
  export RABBITMQ_MNESIA_BASE="$d/mnesia"
  export RABBITMQ_LOG_BASE="$d/log"
  export RABBITMQ_PID_FILE="$d/beam.pid"
  export RABBITMQ_PLUGINS_EXPAND_DIR="$d/plugins-expand"
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

write_node_files() { # node index
  local i=$1 d="$RABBIT_DIR/rabbit$1"
  mkdir -p "$d/mnesia" "$d/log"
  cat > "$d/rabbitmq.conf" <<CONF
listeners.tcp.1 = 127.0.0.1:$((AMQP_PORT + i - 1))
log.file.level = info
log.console = false
CONF
  echo '[].' > "$d/enabled_plugins"
  if [ -n "${RABBIT_WAL_SYNC:-}" ]; then
    echo "[{ra, [{wal_sync_method, ${RABBIT_WAL_SYNC}}]}]." > "$d/advanced.config"
  else
    echo '[].' > "$d/advanced.config"
  fi
}

start_node() { # node index
  local i=$1 d="$RABBIT_DIR/rabbit$1"
  write_node_files "$i"
  ( node_env "$i"; setsid "$RBIN/rabbitmq-server" </dev/null >"$d/log/console.out" 2>&1 & echo $! > "$d/wrapper.pid" )
  echo "$(node "$i") starting (wrapper pid $(cat "$d/wrapper.pid"), AMQP 127.0.0.1:$((AMQP_PORT + i - 1)))"
}

await_node() { # node index
  local i=$1 d="$RABBIT_DIR/rabbit$1" ok=0
  # First wait for the VM to register with our epmd (await_startup fails at
  # once on a node that is not up yet), then for the broker to finish booting.
  for _ in $(seq 1 600); do
    if epmd -port "$EPMD_PORT" -names 2>/dev/null | grep -q "^name rabbit$i "; then ok=1; break; fi
    kill -0 "$(cat "$d/wrapper.pid")" 2>/dev/null || break
    sleep 0.2
  done
  if [ "$ok" = 1 ] && ctl -n "$(node "$i")" await_startup --timeout 180 >/dev/null; then return 0; fi
  echo "$(node "$i") failed to start; see $d/log (run '$0 stop' to clean up)" >&2
  exit 1
}

start() {
  [ -x "$RBIN/rabbitmq-server" ] || { echo "rabbitmq-server not found; run bench/setup.sh" >&2; exit 1; }
  if [ -f "$RABBIT_DIR/epmd.pid" ] && kill -0 "$(cat "$RABBIT_DIR/epmd.pid")" 2>/dev/null; then
    echo "already running (epmd pid $(cat "$RABBIT_DIR/epmd.pid")); stop first" >&2; exit 1
  fi
  mkdir -p "$RABBIT_DIR"
  if [ ! -f "$RABBIT_DIR/.erlang.cookie" ]; then
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$RABBIT_DIR/.erlang.cookie"
    chmod 400 "$RABBIT_DIR/.erlang.cookie"
  fi
  # Private epmd bound to loopback (the nodes would otherwise spawn one on all interfaces).
  setsid epmd -address 127.0.0.1 -port "$EPMD_PORT" </dev/null >"$RABBIT_DIR/epmd.log" 2>&1 &
  echo $! > "$RABBIT_DIR/epmd.pid"
  for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/"$EPMD_PORT") 2>/dev/null && break; sleep 0.1; done

  for i in $(seq 1 "$NODES"); do start_node "$i"; done
  for i in $(seq 1 "$NODES"); do await_node "$i"; done
  for i in $(seq 2 "$NODES"); do
    ctl -n "$(node "$i")" stop_app >/dev/null
    ctl -n "$(node "$i")" join_cluster "$(node 1)" >/dev/null
    ctl -n "$(node "$i")" start_app >/dev/null
  done
  ctl -n "$(node 1)" cluster_status --formatter json 2>/dev/null \
    | grep -o '"running_nodes":\[[^]]*\]' || true
  echo "ra wal_sync_method: $(ctl -n "$(node 1)" eval 'application:get_env(ra, wal_sync_method).' 2>/dev/null) (undefined = default datasync)"
  urls=$(for i in $(seq 1 "$NODES"); do printf 'amqp://127.0.0.1:%d/%%2f,' $((AMQP_PORT + i - 1)); done)
  echo "ready: ${urls%,}"
}

kill_pidfile() { # file [grace seconds]
  local f=$1 grace=${2:-20}
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((grace * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

stop() {
  [ -d "$RABBIT_DIR" ] || { echo "not running"; return 0; }
  for i in $(seq "$NODES" -1 1); do
    local d="$RABBIT_DIR/rabbit$i"
    [ -d "$d" ] || continue
    if [ -f "$d/beam.pid" ] && kill -0 "$(cat "$d/beam.pid")" 2>/dev/null; then
      timeout 60 "$RBIN/rabbitmqctl" -n "$(node "$i")" stop >/dev/null 2>&1 || true
    fi
    kill_pidfile "$d/beam.pid" 10
    kill_pidfile "$d/wrapper.pid" 10
    echo "$(node "$i") stopped"
  done
  kill_pidfile "$RABBIT_DIR/epmd.pid" 5
  if [ "${KEEP_DATA:-0}" != 1 ]; then rm -rf "$RABBIT_DIR"; fi
}

status() {
  for i in $(seq 1 "$NODES"); do
    local f="$RABBIT_DIR/rabbit$i/beam.pid"
    if [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; then echo "$(node "$i") running pid $(cat "$f")"; else echo "$(node "$i") stopped"; fi
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
