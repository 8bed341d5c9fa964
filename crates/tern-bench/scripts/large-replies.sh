#!/usr/bin/env bash
# Large replies, tern against Debian's memcached side by side with `tern bench`, rounds
# alternated, medians and ratios printed: 100-key multigets (keys per second) and 100 KiB values
# (bytes per second), each with the server's CPU per request. Each server runs with one worker
# thread on core 0, the generator on core 1.
#
#   crates/tern-bench/scripts/large-replies.sh [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
secs=${2:-5}

cargo build --release -q -p tern
# shellcheck source=servers.sh
source crates/tern-bench/scripts/servers.sh
m_port=$(free_port); t_port=$(free_port)
start "$m_port" memcached -u root -U 0 -t 1 -m 2048 -p "$m_port" -l 127.0.0.1
start "$t_port" "$target/tern" serve -t 1 -m 2048 -p "$t_port" -l 127.0.0.1

# shape name, units per request (keys or bytes), tern bench arguments
shapes=(
  "multiget100 100 -c 8 -p 1 -m multiget --multiget 100 -v 32 -k 100000"
  "value100k 102400 -c 4 -p 1 -m get -v 102400 -k 1000"
)
results=$(mktemp)
for round in $(seq "$rounds"); do
  for shape in "${shapes[@]}"; do
    read -r name units args <<<"$shape"
    # Keys are stored once per shape; later rounds read what the first stored.
    preload=(); [ "$round" -gt 1 ] && preload=(--no-preload)
    for server in "tern:$t_port" "memcached:$m_port"; do
      who=${server%%:*}; port=${server#*:}
      # shellcheck disable=SC2086 # $args is a word list on purpose
      taskset -c 1 "$target/tern" bench run -q --json -s "127.0.0.1:$port" -t 1 $args \
        --warmup 1s -d "${secs}s" "${preload[@]}" 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)
cpu = (r.get("cpu") or {}).get("server_cpu_us_per_request")
print(sys.argv[1], sys.argv[2], sys.argv[3], round(r["ops_per_sec"]), "%.3f" % cpu if cpu else "nan", r["errors_total"])
' "$name" "$who" "$units" | tee -a "$results"
    done
  done
done
python3 - "$results" "$rounds" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(shape, who, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == shape and r[1] == who)
print(f"medians of {sys.argv[2]} alternated rounds")
for shape, unit in (("multiget100", "keys/s"), ("value100k", "MB/s")):
    units = next(float(r[2]) for r in rows if r[0] == shape)
    scale = 1 if unit == "keys/s" else 1e-6
    t, m = med(shape, "tern", 3) * units * scale, med(shape, "memcached", 3) * units * scale
    tc, mc = med(shape, "tern", 4), med(shape, "memcached", 4)
    print(f"{shape}: tern {t:,.0f} {unit}, memcached {m:,.0f} {unit} ({t / m:.2f}x); "
          f"server CPU per request tern {tc:.2f} us, memcached {mc:.2f} us ({tc / mc:.2f}x)")
EOF
rm -f "$results"
