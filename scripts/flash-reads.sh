#!/usr/bin/env bash
# Reads from a flash tier against what the file system gives fio (issue 27's item 3).
#
#   scripts/flash-reads.sh [DIR]        (DIR: the file system to test, default /tmp)
#   TERN=target/release/tern DURATION=15s scripts/flash-reads.sh
#
# 1. fio: random 4 KiB O_DIRECT reads through io_uring of a 4 GiB file in DIR, one job at
#    queue depth 1 (what one request at a time can have), 32 and 128 (what the device can
#    have), for DURATION each: IOPS and p99 latency.
# 2. tern with `-m 64` and a 4 GiB flash file in DIR, one worker thread and two flash I/O
#    threads, holding 16 x -m of 3,500-byte values (one block each), preloaded at 20,000 sets/s
#    (`tern bench --key-space-factor 16 --preload-rate 20000 --settle 60s`): then
#    - open loop at 70 % of fio's depth-1 IOPS, 64 connections (enough that none waits for
#      another), uniform keys: throughput, latency (client side, and the server's own from
#      its admin endpoint's /stats), and the share of gets served from flash (tern bench's
#      `server gets` line);
#    - closed loop, 32 connections: the most it carries, against fio's depth-32 IOPS;
#    - closed loop, 32 connections of multigets of 8 keys (up to 256 reads in flight);
#    - closed loop, 64 connections of multigets of 8 keys (up to 512 reads in flight): the
#      most flash reads it carries, three rounds each followed by fio at depth 128 again,
#      each round's ratio and their median.
# Prints fio's and tern bench's own output. Long (a few minutes); not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp}
tern=${TERN:-target/release/tern}
duration=${DURATION:-15s}
command -v fio > /dev/null || { echo "fio is not installed (apt-get install fio)" >&2; exit 2; }
work=$(mktemp -d "$dir/tern-flash-reads.XXXXXX")
pid=
trap '[ -n "$pid" ] && kill "$pid" 2> /dev/null; rm -rf "$work"' EXIT

fio_run() { # depth
  fio --name=randread --filename="$work/fio.dat" --size=4G --rw=randread --bs=4k --direct=1 \
    --ioengine=io_uring --iodepth="$1" --numjobs=1 --time_based --runtime="${duration%s}" \
    --output-format=json | python3 -c '
import json, sys
job = json.load(sys.stdin)["jobs"][0]["read"]
p = job["clat_ns"]["percentile"]
print("iops %.0f p50_us %.0f p99_us %.0f" % (job["iops"], p["50.000000"] / 1e3, p["99.000000"] / 1e3))'
}

echo "== fio, $dir, $(date -u +%Y-%m-%dT%H:%MZ)"
fio1=$(fio_run 1); echo "depth 1:  $fio1"
fio32=$(fio_run 32); echo "depth 32: $fio32"
fio128=$(fio_run 128); echo "depth 128: $fio128"
iops1=$(echo "$fio1" | awk '{print $2}')

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
admin=$(free_port)
"$tern" serve -l 127.0.0.1 -p "$port" -t 1 -m 64 -o "ext_path=$work/flash:4g,ext_threads=2" \
  --admin-port "$admin" > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break; sleep 0.1; done
bench=("$tern" bench -s "127.0.0.1:$port" --key-space-factor 16 -v 3500 --seed 1)
echo "== tern ($("$tern" --version)), open loop at 70 % of fio's depth-1 IOPS"
"${bench[@]}" -m get:1 --preload-rate 20000 --settle 60s -c 64 -r "$(( iops1 * 7 / 10 ))" -d "$duration"
# The server's own latency of the gets so far (the open loop's: the preload only sets), from
# when a batch's request was read to when its replies were written, flash waits included.
python3 -c '
import json, sys, urllib.request
get = json.load(urllib.request.urlopen(sys.argv[1]))["commands"]["get"]["latency"]
print("server side, get: %d requests, p50 <= %s us, p99 <= %s us, p99.9 <= %s us" % (
    get["count"], get["p50_us_at_most"], get["p99_us_at_most"], get["p999_us_at_most"]))' \
  "http://127.0.0.1:$admin/stats"
echo "== tern, closed loop, 32 connections"
"${bench[@]}" -m get:1 --no-preload -c 32 -d "$duration"
echo "== tern, closed loop, 32 connections, multigets of 8 keys"
"${bench[@]}" --no-preload -c 32 -m multiget:1 --multiget 8 -d "$duration"
# The most flash reads: 64 connections of multigets of 8 ask up to 512 reads at once (the
# worker's ring holds 1,024), alternated with fio at depth 128, where the device saturates;
# the virtual disk's IOPS drift by 10-20 % within minutes, so each round's pair is a ratio.
echo "== tern, closed loop, 64 connections, multigets of 8 keys, alternated with fio at depth 128"
ratios=()
for round in 1 2 3; do
  out=$("${bench[@]}" --no-preload -c 64 -m multiget:1 --multiget 8 -d "$duration")
  reads=$(echo "$out" | awk -v d="${duration%s}" '/server gets/ {print int($7 / d)}')
  fio=$(fio_run 128 | awk '{print $2}')
  ratio=$(awk -v r="$reads" -v f="$fio" 'BEGIN {printf "%.2f", r / f}')
  ratios+=("$ratio")
  echo "round $round: tern $reads flash reads/s, fio depth 128 $fio IOPS: $ratio"
done
echo "median: $(printf '%s\n' "${ratios[@]}" | sort -n | sed -n 2p) of fio's depth 128"
