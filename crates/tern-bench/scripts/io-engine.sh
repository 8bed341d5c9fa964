#!/usr/bin/env bash
# tern's two worker loops side by side: `--io-engine=epoll`, `--io-engine=uring`, and the
# minimal epoll responder (examples/path_limit_responder.rs) as the epoll path's floor, measured
# with `tern bench`, rounds alternated, medians and ratios printed. Each server runs one worker
# thread on core 0, the generator on core 1. Extra tern-serve flags for both tern servers come
# from TERN_ARGS (e.g. TERN_ARGS="-R 100").
#
#   crates/tern-bench/scripts/io-engine.sh [ROUNDS] [SECONDS] [extra tern bench args...]
#
# Default workload: unpipelined, open loop (SHAPE="-c 50 -p 1 -r 20000": 50 connections x
# pipeline 1 at 20,000 requests/s), 80/20 get/set, 256 B values, 100,000 keys. SHAPE="-c 32 -p 16"
# is the pipelined closed loop at saturation; extra args replace the rest piecewise.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
secs=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
value_bytes=${VALUE_BYTES:-256}
read -r -a tern_args <<< "${TERN_ARGS:-}"
read -r -a shape <<< "${SHAPE:--c 50 -p 1 -r 20000}"

cargo build --release -q -p tern
cargo build --release -q -p tern-bench --example path_limit_responder
# shellcheck source=servers.sh
source crates/tern-bench/scripts/servers.sh
e_port=$(free_port); u_port=$(free_port); r_port=$(free_port)
start "$e_port" "$target/tern" serve -t 1 -m 1024 -p "$e_port" -l 127.0.0.1 --io-engine=epoll "${tern_args[@]}"
start "$u_port" "$target/tern" serve -t 1 -m 1024 -p "$u_port" -l 127.0.0.1 --io-engine=uring "${tern_args[@]}"
start "$r_port" "$target/examples/path_limit_responder" "$r_port" "$value_bytes"

results=$(mktemp)
for round in $(seq "$rounds"); do
  preload=(); [ "$round" -gt 1 ] && preload=(--no-preload)
  for server in "responder:$r_port" "epoll:$e_port" "uring:$u_port"; do
    name=${server%%:*}; port=${server#*:}
    taskset -c 1 "$target/tern" bench run -q --json -s "127.0.0.1:$port" -t 1 "${shape[@]}" \
      -m get:8,set:2 -v "$value_bytes" -k 100000 --warmup 1s -d "${secs}s" "${preload[@]}" "$@" \
      2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
cpu = (r.get("cpu") or {}).get("server_cpu_us_per_request")
lat = r["latency_us"]
print(sys.argv[1], round(r["ops_per_sec"]), "%.3f" % cpu if cpu else "nan",
      lat["p50"], lat["p99"], lat["p999"], r["errors_total"])
' "$name" | tee -a "$results"
  done
done
python3 - "$results" "$rounds" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
names = ("responder", "epoll", "uring")
med = lambda name, col: statistics.median(float(r[col]) for r in rows if r[0] == name)
print(f"medians of {sys.argv[2]} alternated rounds")
print(f"{'':28}" + "".join(f"{n:>12}" for n in names))
for label, col, fmt in (("throughput (ops/s)", 1, ".0f"), ("server CPU (us/request)", 2, ".3f"),
                        ("latency p50 (us)", 3, ".1f"), ("latency p99 (us)", 4, ".1f"),
                        ("latency p99.9 (us)", 5, ".1f")):
    print(f"{label:28}" + "".join(f"{med(n, col):>12{fmt}}" for n in names))
# Each round's servers ran back to back, so a ratio within a round shares that round's noise;
# the median of those ratios is the steadier figure on a busy machine.
by_round = lambda name: [r for r in rows if r[0] == name]
paired = lambda a, b, col: statistics.median(
    float(x[col]) / float(y[col]) for x, y in zip(by_round(a), by_round(b)))
print(f"per-round ratios, median: uring/epoll CPU {paired('uring', 'epoll', 2):.2f}x, "
      f"throughput {paired('uring', 'epoll', 1):.2f}x; uring/responder CPU "
      f"{paired('uring', 'responder', 2):.2f}x, throughput {paired('uring', 'responder', 1):.2f}x")
cpu = {n: med(n, 2) for n in names}
ops = {n: med(n, 1) for n in names}
print(f"uring / responder: CPU per request {cpu['uring'] / cpu['responder']:.2f}x, throughput {ops['uring'] / ops['responder']:.2f}x")
print(f"uring / epoll:     CPU per request {cpu['uring'] / cpu['epoll']:.2f}x, throughput {ops['uring'] / ops['epoll']:.2f}x")
PY
rm -f "$results"
