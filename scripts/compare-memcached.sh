#!/usr/bin/env bash
# Throughput of tern vs Debian's memcached, side by side in one run, with Debian's memcaslap as the
# load generator. Each server is pinned to core 0 with one worker thread, the generator to core 1;
# runs alternate between the servers and the medians are compared (the machine is noisy).
#
#   scripts/compare-memcached.sh [rounds] [seconds] [extra memcaslap args...]
#   MEMCACHED=/path/to/memcached scripts/compare-memcached.sh ...   (another memcached, e.g. the
#                                       newest release built from its repository; default: PATH's)
#
# Prints per-run TPS and server CPU-us per request (utime+stime from /proc/PID/stat), then the
# medians and the ratio tern/memcached. Builds tern in release mode first.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
secs=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
extra=("$@")
[ ${#extra[@]} -gt 0 ] || extra=(-T 1 -c 32 -X 256)

cargo build --release -q -p tern
tern=${CARGO_TARGET_DIR:-target}/release/tern
ticks=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_one() { # name, command...
  local name=$1; shift
  local port; port=$(free_port)
  taskset -c 0 "$@" -p "$port" -l 127.0.0.1 &
  local pid=$!
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
  local before; before=$(cpu_ticks "$pid")
  local out; out=$(taskset -c 1 memcaslap -s 127.0.0.1:"$port" -t "${secs}s" "${extra[@]}" 2>&1 | grep -E '^Run time')
  local after; after=$(cpu_ticks "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local tps ops; tps=$(sed -E 's/.*TPS: ([0-9]+).*/\1/' <<<"$out"); ops=$(sed -E 's/.*Ops: ([0-9]+).*/\1/' <<<"$out")
  local us_per_req; us_per_req=$(awk -v t=$((after - before)) -v hz="$ticks" -v ops="$ops" 'BEGIN{printf "%.2f", t / hz * 1e6 / ops}')
  echo "$name $tps $us_per_req"
}

median() { sort -n | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

results=$(mktemp)
for i in $(seq "$rounds"); do
  run_one memcached "${MEMCACHED:-memcached}" -u root -U 0 -t 1 | tee -a "$results"
  run_one tern "$tern" serve -t 1 | tee -a "$results"
done
m_tps=$(awk '$1=="memcached"{print $2}' "$results" | median)
t_tps=$(awk '$1=="tern"{print $2}' "$results" | median)
m_cpu=$(awk '$1=="memcached"{print $3}' "$results" | median)
t_cpu=$(awk '$1=="tern"{print $3}' "$results" | median)
echo "median TPS: memcached $m_tps, tern $t_tps, ratio tern/memcached $(awk -v a="$t_tps" -v b="$m_tps" 'BEGIN{printf "%.2f", a/b}')"
echo "median server CPU-us/request: memcached $m_cpu, tern $t_cpu"
rm -f "$results"
