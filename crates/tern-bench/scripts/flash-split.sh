#!/usr/bin/env bash
# `tern bench` against memcached with a flash tier (extstore): three times its memory of 1 KiB
# values preloaded at a pace its flash writer keeps up with, the flash left to go idle, then
# uniform gets; the report splits the gets between memory and flash. Needs a memcached built
# with extstore (memcached 1.6.45 from source; Debian's package has it too).
#
#   MEMCACHED=/path/to/memcached crates/tern-bench/scripts/flash-split.sh [tern bench args...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
memcached=${MEMCACHED:-memcached}

cargo build --release -q -p tern
# shellcheck source=servers.sh
source crates/tern-bench/scripts/servers.sh
flash=$(mktemp -d)
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$flash"' EXIT
port=$(free_port)
"$memcached" -V
start "$port" "$memcached" -u root -U 0 -t 1 -m 64 -p "$port" -l 127.0.0.1 \
  -o "ext_path=$flash/extstore:1g"

# The preload rate: memcached's flash writer kept up with 20,000 1 KiB sets a second on the
# project's 2-core VM, and fell behind (evicting) at 60,000.
(set -x; taskset -c 1 "$target/tern" bench -s "127.0.0.1:$port" --key-space-factor 3 -v 1024 \
  -m get:1 --preload-rate 20000 --settle 30s -d 5s -q "$@")
