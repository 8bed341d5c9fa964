#!/bin/bash
# What a server change costs per request, in user-space instructions (callgrind: repeatable on a
# busy machine). BASE and NEW (e.g. builds before and after wiring in the metrics) each serve,
# with -t 1, lockstep_client.py's preload of 10,000 keys and BATCHES batches of 16 requests
# (80/20 get/set, 256 B values). Instructions are compared by source file: the store's files
# (crates/tern-store) vary by tens of instructions per request from run to run (the index's
# probing depends on the per-process hash seed), everything else repeats within ~1, so the
# change is reported outside the store. Under valgrind clock_gettime is a system call: the
# vDSO's ~20 instructions per clock read are not in the figures.
# MODE=get (batches of 100 pipelined gets) or MODE=single (one get at a time) measures gets instead.
# usage: [MODE=mix|get|single] overhead-instructions.sh BASE_BINARY NEW_BINARY BATCHES [serve options for NEW...]
set -euo pipefail
base=$1; new=$2; batches=$3; shift 3
mode=${MODE:-mix}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
profile() {
  local bin=$1 name=$2; shift 2
  local port pid
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.cg" "$bin" serve -t 1 -l 127.0.0.1 \
    -p "$port" "$@" 2>/dev/null &
  pid=$!
  for _ in $(seq 300); do (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
  python3 "$here/lockstep_client.py" "$port" "$batches" "$mode"
  kill -TERM $pid; wait $pid || true
  callgrind_annotate --inclusive=no --threshold=100 "$work/$name.cg" > "$work/$name.txt" 2>/dev/null
}
profile "$base" base
profile "$new" new "$@"
python3 - "$work" "$batches" "$mode" <<'PY'
import re, sys
work, batches, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
requests = 10_000 + {"get": 100, "single": 1}.get(mode, 16) * batches
def by_file(name):
    totals = {}
    for line in open(f"{work}/{name}.txt"):
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+?):", line)
        if m:
            source = re.sub(r"^.*?/crates/", "crates/", m.group(2))
            totals[source] = totals.get(source, 0) + int(m.group(1).replace(",", ""))
    return totals
base, new = by_file("base"), by_file("new")
store = lambda t: sum(v for k, v in t.items() if k.startswith("crates/tern-store/"))
per = lambda v: v / requests
print(f"{requests} requests; instructions per request: base {per(sum(base.values())):.0f}, "
      f"new {per(sum(new.values())):.0f}")
outside = per(sum(new.values()) - store(new) - sum(base.values()) + store(base))
print(f"new - base outside the store: {outside:+.1f} per request "
      f"({100 * outside / per(sum(base.values())):+.2f}% of base)")
PY
rm -rf "$work"
