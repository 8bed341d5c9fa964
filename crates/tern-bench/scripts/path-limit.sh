#!/usr/bin/env bash
# How close tern is to the path's limit: tern, a responder that stores nothing
# (examples/path_limit_responder.rs) and memcached (MEMCACHED, default the one on PATH), measured side by side with
# `tern bench`, rounds alternated, medians and ratios printed. Each server runs with one worker
# thread on core 0, the generator on core 1.
#
#   [SHAPE="-c 50 -p 1 -r 20000"] [KEYS=10000] [MEMCACHED=path] [TERN=path] \
#     crates/tern-bench/scripts/path-limit.sh \
#     [ROUNDS] [SECONDS] [extra tern bench args...]
#
# Default workload: the README's headline (SHAPE "-c 32 -p 16": 32 connections x pipeline 16;
# 80/20 get/set, 256 B values, 100,000 keys; KEYS=10000 is tern bench's own default, whose
# items stay in the caches). SHAPE="-c 50 -p 1 -r 20000" is the unpipelined,
# open-loop shape. Extra args are added to the tern bench command line (not ones it already
# has: clap refuses a flag given twice). The responder answers gets with a value of the size
# given by VALUE_BYTES (default 256). TERN= serves another tern build (a baseline); the load
# generator is always this checkout's.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
secs=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
value_bytes=${VALUE_BYTES:-256}
keys=${KEYS:-100000}
read -r -a shape <<< "${SHAPE:--c 32 -p 16}"

cargo build --release -q -p tern
cargo build --release -q -p tern-bench --example path_limit_responder
# shellcheck source=servers.sh
source crates/tern-bench/scripts/servers.sh
m_port=$(free_port); t_port=$(free_port); r_port=$(free_port)
start "$m_port" "${MEMCACHED:-memcached}" -u root -U 0 -t 1 -m 1024 -p "$m_port" -l 127.0.0.1
start "$t_port" "${TERN:-$target/tern}" serve -t 1 -m 1024 -p "$t_port" -l 127.0.0.1
start "$r_port" "$target/examples/path_limit_responder" "$r_port" "$value_bytes"

results=$(mktemp)
for round in $(seq "$rounds"); do
  # Keys are stored once; later rounds read what the first stored.
  preload=(); [ "$round" -gt 1 ] && preload=(--no-preload)
  for server in "responder:$r_port" "tern:$t_port" "memcached:$m_port"; do
    name=${server%%:*}; port=${server#*:}
    taskset -c 1 "$target/tern" bench run -q --json -s "127.0.0.1:$port" -t 1 "${shape[@]}" \
      -m get:8,set:2 -v "$value_bytes" -k "$keys" --warmup 1s -d "${secs}s" "${preload[@]}" "$@" \
      2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
cpu = (r.get("cpu") or {}).get("server_cpu_us_per_request")
print(sys.argv[1], round(r["ops_per_sec"]), "%.3f" % cpu if cpu else "nan", r["errors_total"])
' "$name" | tee -a "$results"
  done
done
python3 - "$results" "$rounds" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda name, col: statistics.median(float(r[col]) for r in rows if r[0] == name)
ops = {n: med(n, 1) for n in ("responder", "tern", "memcached")}
cpu = {n: med(n, 2) for n in ("responder", "tern", "memcached")}
print(f"medians of {sys.argv[2]} alternated rounds")
print(f"{'':28}{'responder':>12}{'tern':>12}{'memcached':>12}")
print(f"{'throughput (ops/s)':28}{ops['responder']:>12.0f}{ops['tern']:>12.0f}{ops['memcached']:>12.0f}")
print(f"{'server CPU (us/request)':28}{cpu['responder']:>12.3f}{cpu['tern']:>12.3f}{cpu['memcached']:>12.3f}")
print(f"tern / responder: throughput {ops['tern'] / ops['responder']:.2f}x, CPU per request {cpu['tern'] / cpu['responder']:.2f}x")
print(f"tern / memcached: throughput {ops['tern'] / ops['memcached']:.2f}x, CPU per request {cpu['tern'] / cpu['memcached']:.2f}x")
EOF
rm -f "$results"
