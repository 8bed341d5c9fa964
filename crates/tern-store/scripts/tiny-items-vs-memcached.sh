#!/usr/bin/env bash
# Items held and RSS after N pipelined sets of tiny items (8-byte keys, 1-byte values) into
# tern -m 64 and memcached -m 64, one after the other: where the index weighs most beside the
# items, so whether -m covers it shows.
# usage: crates/tern-store/scripts/tiny-items-vs-memcached.sh [path/to/tern] [N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tern=${1:-target/release/tern}
items=${2:-4000000}

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

measure() {
    local name=$1; shift
    local port; port=$(free_port)
    "$@" -p "$port" -l 127.0.0.1 &
    local pid=$!
    for _ in $(seq 100); do
        (echo version >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
        sleep 0.1
    done
    local start; start=$(rss_kib "$pid")
    local held; held=$(python3 "$here/load_items.py" "$port" "$items" tiny)
    local end; end=$(rss_kib "$pid")
    read -r curr evicted hash <<<"$held"
    echo "| $name | $curr | $evicted | $hash | $((start / 1024)) MiB | $((end / 1024)) MiB | $(((end - start) / 1024)) MiB |"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "| server | items held | evicted | hash_bytes | RSS at start | RSS after $items sets | growth |"
echo "|---|---|---|---|---|---|---|"
measure "tern serve -m 64" "$tern" serve -m 64
measure "memcached -m 64" memcached -m 64 -U 0 -u root
