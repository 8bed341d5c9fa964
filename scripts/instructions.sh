#!/usr/bin/env bash
# User-space instructions per request, tern vs Debian's memcached, under callgrind (repeatable on a
# busy machine, unlike time). Each server runs with one worker thread and is driven in lockstep by
# crates/tern-server/scripts/lockstep_client.py: MODE `get` sends batches of 100 gets (pipelined),
# `single` one get at a time (unpipelined), `mix` batches of 16 requests, 80/20 get/set with 256 B
# values. Each server is run twice, with SHORT and
# LONG batch counts; the difference of the two totals divided by the difference in requests is the
# cost of a request alone (start-up, preload and shutdown cancel out).
#
#   scripts/instructions.sh [get|single|mix] [SHORT] [LONG]
#   TERN=path/to/tern scripts/instructions.sh ...   (measure another build, e.g. a baseline)
#   MEMCACHED=path/to/memcached scripts/instructions.sh ...   (another memcached; default: PATH's)
#   ONLY=tern scripts/instructions.sh ...           (tern alone; with scripts/fixed-seed-build.sh
#                                                    two builds compare exactly)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-get}; short=${2:-200}; long=${3:-1200}
case $mode in get) per_batch=100 ;; single) per_batch=1 ;; *) per_batch=16 ;; esac
client=crates/tern-server/scripts/lockstep_client.py
if [ -z "${TERN:-}" ]; then
  cargo build --release -q -p tern
fi
tern=${TERN:-${CARGO_TARGET_DIR:-target}/release/tern}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

total() { # batches, server command...
  local batches=$1; shift
  local port; port=$(free_port)
  # memcached sets RLIMIT_NOFILE to exactly -c; valgrind only allows its own hard limit, which is
  # the shell's minus 12 reserved descriptors.
  (ulimit -n 1036; exec valgrind --tool=callgrind --callgrind-out-file="$work/cg" "$@" -p "$port" \
    -l 127.0.0.1 > "$work/log" 2>&1) &
  local pid=$!
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
  python3 "$client" "$port" "$batches" "$mode"
  kill -TERM "$pid"; wait "$pid" || true
  grep -Eo 'Collected : [0-9]+' "$work/log" | grep -Eo '[0-9]+$'
}

per_request() { # server command...
  local a b
  a=$(total "$short" "$@"); b=$(total "$long" "$@")
  awk -v a="$a" -v b="$b" -v n=$(( (long - short) * per_batch )) 'BEGIN{printf "%.0f", (b - a) / n}'
}

t=$(per_request "$tern" serve -t 1)
if [ "${ONLY:-}" = tern ]; then
  echo "user-space instructions per request ($mode): tern $t"
  exit 0
fi
m=$(per_request "${MEMCACHED:-memcached}" -u root -U 0 -t 1 -c 1024)
echo "user-space instructions per request ($mode): memcached $m, tern $t, ratio tern/memcached $(awk -v a="$t" -v b="$m" 'BEGIN{printf "%.2f", a/b}')"
