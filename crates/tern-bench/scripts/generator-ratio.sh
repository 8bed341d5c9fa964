#!/usr/bin/env bash
# Is tern bench the bottleneck? Drive one Debian memcached (-t 1, pinned to core 0) with
# memcaslap (memaslap), memcslap and tern bench (each pinned to core 1), alternating, and print
# each tool's median throughput and its own CPU time per request (user+sys, from /usr/bin/time:
# on a shared, noisy machine the CPU cost is the steadier figure, and a 16-thread tool such as
# memcslap wins more of a contended core than a one-thread one).
#
# usage: [NICE=-10] generator-ratio.sh [TERN_BINARY] [ROUNDS] [SECONDS]
# NICE (root only) runs server and generators at that niceness, so a machine busy with other work
# (builds) takes less of their cores and the figures reflect the tools more than the neighbours.
set -euo pipefail
nice=${NICE:-0}
tern=${1:-target/release/tern}
rounds=${2:-5}
secs=${3:-5}
port=$((20000 + RANDOM % 20000))
tmp=$(mktemp -d)

nice -n "$nice" taskset -c 0 memcached -t 1 -m 1024 -l 127.0.0.1 -p "$port" -U 0 -u root &
mc=$!
trap 'kill $mc; rm -rf "$tmp"' EXIT
sleep 0.5

timed() { /usr/bin/time -f "%U %S" -o "$tmp/cpu" nice -n "$nice" taskset -c 1 "$@"; }
# Prints "<ops/s> <CPU us per request>" given the requests made and the measured ops/s.
result() { awk -v ops="$1" -v reqs="$2" '{printf "%d %.2f\n", ops, ($1 + $2) * 1e6 / reqs}' "$tmp/cpu"; }

# Same shape for every tool: 16 connections, 64-byte keys, 1024-byte values.
memaslap_run() { # 9:1 get/set, memaslap's default mix
  timed memcaslap -s "127.0.0.1:$port" -T 1 -c 16 -t "${secs}s" -X 1024 >"$tmp/out" 2>&1
  local line
  line=$(grep '^Run time:' "$tmp/out")
  result "$(echo "$line" | awk '{for (i = 1; i <= NF; i++) if ($i == "TPS:") print $(i + 1)}')" \
    "$(echo "$line" | awk '{for (i = 1; i <= NF; i++) if ($i == "Ops:") print $(i + 1)}')"
}
tern_run() { # args: mix keys
  timed "$tern" bench -s "127.0.0.1:$port" -t 1 -c 16 -p 1 -m "$1" -k "$2" --key-len 64 -v 1024 \
    -d "${secs}s" -q --json >"$tmp/out" 2>/dev/null
  read -r ops reqs < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["ops_per_sec"]), d["requests"] + d["preload"]["keys"])' "$tmp/out")
  result "$ops" "$reqs"
}
tern_mixed_run() { tern_run get:9,set:1 100000; }
memcslap_run() { # gets only, 16 blocking threads; it first sets the -e keys
  local n=$((secs * 2000))
  timed memcslap -s "127.0.0.1:$port" -c 16 -e "$n" -t get >"$tmp/out" 2>&1
  result "$(awk -v n="$n" '/Time to get/ {printf "%d\n", n * 16 / $(NF - 1)}' "$tmp/out")" $((n * 17))
}
tern_get_run() { tern_run get:1 10000; }

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

tools=(memaslap_run tern_mixed_run memcslap_run tern_get_run)
for ((r = 1; r <= rounds; r++)); do
  for tool in "${tools[@]}"; do
    $tool >>"$tmp/$tool"
    echo "round $r $tool: $(tail -1 "$tmp/$tool") (ops/s, generator CPU us/request)" >&2
  done
done
declare -A ops cpu
for tool in "${tools[@]}"; do
  ops[$tool]=$(cut -d' ' -f1 "$tmp/$tool" | median)
  cpu[$tool]=$(cut -d' ' -f2 "$tmp/$tool" | median)
  echo "$tool: median ${ops[$tool]} ops/s, ${cpu[$tool]} CPU us/request"
done
awk -v a="${ops[tern_mixed_run]}" -v b="${ops[memaslap_run]}" -v c="${cpu[tern_mixed_run]}" -v d="${cpu[memaslap_run]}" \
  'BEGIN {printf "tern bench / memcaslap (9:1 get/set): throughput %.2f, CPU per request %.2f\n", a / b, c / d}'
awk -v a="${ops[tern_get_run]}" -v b="${ops[memcslap_run]}" -v c="${cpu[tern_get_run]}" -v d="${cpu[memcslap_run]}" \
  'BEGIN {printf "tern bench / memcslap (gets): throughput %.2f, CPU per request %.2f\n", a / b, c / d}'
