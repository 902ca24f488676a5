#!/usr/bin/env bash
# The W1 workload against bench/rocketraft.sh's cluster through the project's own SDK bench
# (rocketraft-bench --namesrv), then a drain by one push consumer; prints a RESULT line in the
# peerbench format. Args: LABEL. Env: N S C INFLIGHT RR_ROOT.
set -euo pipefail
RR_ROOT=${RR_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
label=$1
out=$(mktemp)
TIMEFORMAT='%U %S'
{ time "$RR_ROOT/target/release/rocketraft-bench" --namesrv 127.0.0.1:29876 -n "$N" -s "$S" -c "$C" --inflight "$INFLIGHT" \
  --topic W1 --consume w1-drain >"$out" 2>&1; } 2>"$out.time"
cat "$out"
client=$(awk '{print $1+$2}' "$out.time")
pub=$(grep -oE 'sent [0-9]+ in [0-9.]+ s: [0-9]+ msg/s' "$out" | grep -oE '[0-9]+ msg/s' | grep -oE '[0-9]+')
p50=$(grep -oE 'p50 [0-9.]+' "$out" | head -1 | cut -d' ' -f2)
p99=$(grep -oE 'p99 [0-9.]+' "$out" | head -1 | cut -d' ' -f2)
cons=$(grep -iE 'drain|consum' "$out" | grep -oE '[0-9]+ msg/s' | tail -1 | grep -oE '[0-9]+')
echo "RESULT target=rocketraft label=$label n=$N size=$S publishers=$C inflight=$INFLIGHT replicas=3 pub_msgs_s=${pub:-0} p50_ms=${p50:-} p99_ms=${p99:-} cons_msgs_s=${cons:-0} client_cpu_s=${client:-0}"
rm -f "$out" "$out.time"
