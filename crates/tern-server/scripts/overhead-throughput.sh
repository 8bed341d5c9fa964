#!/bin/bash
# Throughput and server CPU per request of two tern builds: BASE (say, one built before a change)
# and NEW, the latter with hot-key sampling on (default 1 in 64) and off (--hotkey-sample-rate
# 0). Server `taskset -c 0 ... -t 1`, NEW's `tern bench` as generator on `taskset -c 1` (32
# connections x pipeline 16, 80/20 get/set, 256 B values); rounds alternate the three (order
# rotated each round); prints every run, then medians.
# usage: overhead-throughput.sh BASE_BINARY NEW_BINARY ROUNDS SECONDS
set -euo pipefail
base=$1; new=$2; rounds=$3; secs=$4
configs=("base:$base:" "on:$new:" "off:$new:--hotkey-sample-rate 0")
run() {
  local bin=$1 extra=$2 port=$(python3 -c "import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])")
  taskset -c 0 $bin serve -t 1 -l 127.0.0.1 -p $port $extra &
  local pid=$!
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
  taskset -c 1 "$new" bench -s 127.0.0.1:$port -t 1 -c 32 -p 16 -m get:8,set:2 -v 256 \
    --warmup 1s -d ${secs}s --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(round(d['ops_per_sec']), round(d['cpu']['server_cpu_us_per_request'], 3))"
  kill $pid; wait $pid 2>/dev/null || true
}
declare -A results cpus
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for r in $(seq $rounds); do
  for i in 0 1 2; do
    c=${configs[$(( (i + r) % 3 ))]}
    name=${c%%:*}; rest=${c#*:}; bin=${rest%%:*}; extra=${rest#*:}
    read ops cpu < <(run $bin "$extra")
    echo "round $r $name $ops ops/s $cpu us/request"
    results[$name]="${results[$name]:-} $ops"
    cpus[$name]="${cpus[$name]:-} $cpu"
  done
done
for name in base on off; do
  echo "$name median $(echo ${results[$name]} | median) ops/s of:${results[$name]}"
  echo "$name median $(echo ${cpus[$name]} | median) server CPU us/request of:${cpus[$name]}"
done
