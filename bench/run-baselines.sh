#!/usr/bin/env bash
# Run the peer baselines one peer at a time (only that peer's servers up),
# RUNS times each, and keep the raw output under $OUT_DIR/<UTC stamp>/ (default ${TMPDIR:-/tmp}/peers-results).
#
#   bench/run-baselines.sh                 # all variants, defaults below
#   VARIANTS="nats-r3 rabbit-quorum" RUNS=1 N=50000 bench/run-baselines.sh
#
# Variants:
#   nats-r1              single JetStream server, R1 file stream   (nats-r1.sh)
#   nats-r3              3-node JetStream cluster, R3 file stream  (nats-r3.sh)
#   rabbit-quorum        3-node RabbitMQ, quorum queue, default fsync (datasync)
#   rabbit-quorum-nosync same, Ra WAL sync disabled (wal_sync_method=none) for
#                        durability parity with NATS 2.9 (no fsync before ack)
#   rocketraft-sync      3 broker processes + nameserver, flush = sync  (rocketraft.sh)
#   rocketraft-async     same, flush = async
# Interleave to compare in one window, e.g.:
#   VARIANTS="rocketraft-sync nats-r3 rocketraft-async rabbit-quorum" bench/run-baselines.sh
set -euo pipefail
# rocketraft variants use the release binaries of this repository (or of RR_ROOT).
export RR_ROOT=${RR_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$(dirname "$0")"

# PRIO=-10 gives the peer servers and the client that nice level, so that
# other work on a shared box (e.g. cargo builds) disturbs the run less. With
# CFS autogroups (kernel.sched_autogroup_enabled=1) a process nice value only
# counts inside its session, so the level is set on each peer's autogroup
# (/proc/PID/autogroup) and the client runs in its own session with it.
PRIO=${PRIO:-0}
N=${N:-200000} S=${S:-1024} C=${C:-4} INFLIGHT=${INFLIGHT:-256} RUNS=${RUNS:-2} MAX_SECS=${MAX_SECS:-120}
export N S C INFLIGHT
VARIANTS=${VARIANTS:-"nats-r1 nats-r3 rabbit-quorum rabbit-quorum-nosync"}
PEERBENCH_TARGET=${PEERBENCH_TARGET:-${TMPDIR:-/tmp}/peerbench-target}
BIN=$PEERBENCH_TARGET/release/peerbench
OUT=${OUT_DIR:-${TMPDIR:-/tmp}/peers-results}/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT"

./setup.sh >/dev/null
cargo build --release --manifest-path peerbench/Cargo.toml --target-dir "$PEERBENCH_TARGET" 2>&1 | tail -n 1

stop_all() { ./nats-r1.sh stop >/dev/null 2>&1 || true; ./nats-r3.sh stop >/dev/null 2>&1 || true; ./rabbit-quorum.sh stop >/dev/null 2>&1 || true; ./rocketraft.sh stop >/dev/null 2>&1 || true; }
trap stop_all EXIT
stop_all

calib() { # single-core speed probe: the VM's speed drifts between time windows
  local best=999 t
  for _ in 1 2 3; do
    t=$( { TIMEFORMAT=%R; time (head -c 256M /dev/zero | sha256sum >/dev/null); } 2>&1 )
    best=$(awk -v a="$best" -v b="$t" 'BEGIN{print (b<a)?b:a}')
  done
  echo "$best"
}
busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }
peer_ticks() { # utime+stime (+ reaped children) of the running peer servers
  local t=0 f pid
  for f in "${TMPDIR:-/tmp}"/peers-nats-r*/n*.pid "${TMPDIR:-/tmp}"/peers-rabbit/rabbit*/beam.pid "${TMPDIR:-/tmp}"/peers-rabbit/epmd.pid "${TMPDIR:-/tmp}"/peers-rocketraft/*.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    [ -r "/proc/$pid/stat" ] || continue
    t=$((t + $(sed 's/.*) //' "/proc/$pid/stat" | awk '{print $12+$13+$14+$15}')))
  done
  echo "$t"
}

prio_peers() { # put the running peer servers at nice $PRIO (process and autogroup)
  [ "$PRIO" != 0 ] || return 0
  local f pid task
  for f in "${TMPDIR:-/tmp}"/peers-nats-r*/n*.pid "${TMPDIR:-/tmp}"/peers-rabbit/rabbit*/beam.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    renice -n "$PRIO" -p "$pid" >/dev/null 2>&1 || true
    # every thread of the VM / server, not only the main one
    for task in /proc/"$pid"/task/*; do renice -n "$PRIO" -p "${task##*/}" >/dev/null 2>&1 || true; done
    echo "$PRIO" > "/proc/$pid/autogroup" 2>/dev/null || true
  done
}

bench() { # variant target run
  local v=$1 t=$2 r=$3 log="$OUT/$1-run$3.txt"
  echo "== $v run $r" | tee "$log"
  echo "loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$log"
  local cmd=("$BIN" -t "$t" -n "$N" -s "$S" -c "$C" --inflight "$INFLIGHT" --max-secs "$MAX_SECS" --label "$v/run$r")
  if [ "$t" = rocketraft ]; then cmd=(./rocketraft-bench.sh "$v/run$r"); fi
  echo "cmd: ${cmd[*]}  (PRIO=$PRIO)" >> "$log"
  # CPU time split during the run: peer servers, the bench client, everything
  # else on the box (other work on a shared 2-core machine skews results).
  local tot0 peer0 tot1 peer1 t0 t1 st0 st1
  tot0=$(busy_ticks); peer0=$(peer_ticks); st0=$(steal_ticks); t0=$(date +%s.%N)
  if [ "$PRIO" != 0 ]; then
    setsid -w bash -c 'p=$1; shift; echo "$p" > /proc/self/autogroup 2>/dev/null || true; exec nice -n "$p" "$@"' _ "$PRIO" "${cmd[@]}" 2>&1 | tee -a "$log"
  else
    "${cmd[@]}" 2>&1 | tee -a "$log"
  fi
  tot1=$(busy_ticks); peer1=$(peer_ticks); st1=$(steal_ticks); t1=$(date +%s.%N)
  local client; client=$(grep -o 'client_cpu_s=[0-9.]*' "$log" | tail -n1 | cut -d= -f2)
  awk -v w0="$t0" -v w1="$t1" -v a="$tot0" -v b="$tot1" -v p="$peer0" -v q="$peer1" -v c="${client:-0}" -v st="$((st1 - st0))" -v hz="$(getconf CLK_TCK)" 'BEGIN{
      wall=w1-w0; all=(b-a)/hz; peers=(q-p)/hz; other=all-peers-c; if (other<0) other=0;
      printf "cpu: wall %.1f s, all %.1f s (%.0f%% of %d cores), peers %.1f s, client %.1f s, other %.1f s, steal %.1f s\n",
        wall, all, 100*all/(wall*'"$(nproc)"'), '"$(nproc)"', peers, c, other, st/hz }' | tee -a "$log"
  echo "top other processes after run:" >> "$log"
  ps -eo pcpu,etimes,comm --sort=-pcpu | grep -v -E 'nats-server|beam.smp|peerbench' | head -n 6 >> "$log"
}

{
  echo "# environment"
  echo "date: $(date -u +%FT%TZ)  nice: $PRIO"
  echo "cpus: $(nproc)  mem: $(free -g | awk '/Mem:/{print $2}') GiB  kernel: $(uname -r)"
  nats-server --version
  dpkg-query -W -f='${Package} ${Version}\n' rabbitmq-server erlang-base
  echo "cpu calibration (best of 3, sha256 of 256 MiB, one core): $(calib) s"
  # fsync cost of the disk under the temp dir: 2000 x 4 KiB O_DSYNC writes
  f=$(mktemp)
  echo "disk 4KiB O_DSYNC writes: $(dd if=/dev/zero of="$f" bs=4k count=2000 oflag=dsync 2>&1 | tail -n1)"
  rm -f "$f"
} | tee "$OUT/env.txt"

for v in $VARIANTS; do
  case $v in
    nats-r1) nice -n "$PRIO" ./nats-r1.sh start; t=nats-r1 ;;
    nats-r3) nice -n "$PRIO" ./nats-r3.sh start; t=nats-r3 ;;
    rabbit-quorum) nice -n "$PRIO" ./rabbit-quorum.sh start; t=rabbit-quorum ;;
    rabbit-quorum-nosync) RABBIT_WAL_SYNC=none nice -n "$PRIO" ./rabbit-quorum.sh start; t=rabbit-quorum ;;
    rocketraft-sync) FLUSH=sync ./rocketraft.sh start; t=rocketraft ;;
    rocketraft-async) FLUSH=async ./rocketraft.sh start; t=rocketraft ;;
    *) echo "unknown variant $v" >&2; exit 2 ;;
  esac
  prio_peers
  sleep 2
  for r in $(seq 1 "$RUNS"); do bench "$v" "$t" "$r"; sleep 2; done
  stop_all
done

echo "cpu calibration at end: $(calib) s" | tee -a "$OUT/env.txt"
echo
echo "RESULT lines:"
for v in $VARIANTS; do grep -h '^RESULT' "$OUT/$v"-run*.txt; done | tee "$OUT/results.txt"
echo "raw output in $OUT"
