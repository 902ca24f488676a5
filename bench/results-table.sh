#!/usr/bin/env bash
# Print a markdown table of one run-baselines.sh output folder.
#   bench/results-table.sh bench/results/<stamp>
set -euo pipefail
dir=${1:?usage: $0 results/<stamp>}
echo "| variant | run | publish msgs/s | publish MB/s | ack p50 ms | ack p99 ms | consume msgs/s | CPU s peers / client / other |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for f in $(for v in nats-r1 nats-r3 rabbit-quorum rabbit-quorum-nosync; do ls "$dir/$v"-run*.txt 2>/dev/null; done); do
  v=$(basename "$f" .txt); run=${v##*-run}; v=${v%-run*}
  awk -v v="$v" -v run="$run" '
    /^RESULT/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] } }
    /^cpu:/   { match($0, /peers [0-9.]+ s, client [0-9.]+ s, other [0-9.]+ s/); c = substr($0, RSTART, RLENGTH);
                gsub(/peers |client |other | s/, "", c); gsub(/,/, " /", c) }
    END { printf "| %s | %s | %d | %.1f | %.1f | %.1f | %d | %s |\n", v, run, r["pub_msgs_s"], r["pub_mb_s"], r["p50_ms"], r["p99_ms"], r["cons_msgs_s"], c }
  ' "$f"
done
