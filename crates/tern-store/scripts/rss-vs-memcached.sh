#!/usr/bin/env bash
# RSS after loading 1 M items (10-byte keys, 32-byte values) through the network into
# tern (-m 64) and into memcached (-m 1024, so that nothing is evicted), one after the other.
# usage: [MEMCACHED=path/to/memcached] crates/tern-store/scripts/rss-vs-memcached.sh [path/to/tern]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tern=${1:-target/release/tern}
items=${ITEMS:-1000000}

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

measure() {
    local name=$1 port=$2; shift 2
    "$@" &
    local pid=$!
    for _ in $(seq 50); do
        (echo version >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
        sleep 0.1
    done
    local start; start=$(rss_kib "$pid")
    local held; read -r held _ <<<"$(python3 "$here/load_items.py" "$port" "$items")"
    local end; end=$(rss_kib "$pid")
    echo "| $name | $held | $((start / 1024)) MiB | $((end / 1024)) MiB |"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "| server | items held | RSS at start | RSS after $items sets |"
echo "|---|---|---|---|"
measure "tern serve -m 64 -t 1" 22411 "$tern" serve -p 22411 -m 64 -t 1
measure "memcached 1.6 -m 1024 -t 1" 22412 "${MEMCACHED:-memcached}" -p 22412 -m 1024 -t 1 -U 0 -u root
