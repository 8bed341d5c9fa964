#!/usr/bin/env bash
# The cost of TLS (docs/performance.md): tern over TLS, tern in plain text and Debian's memcached
# over TLS (-Z), each with one worker thread pinned to core 0, driven by tern bench on core 1,
# at 32 connections x pipeline 16 and x pipeline 1. Runs alternate A, B, C, A, B, C, ... so drift
# of a shared machine touches every server alike; prints each run and the medians: throughput,
# the server's CPU per request (tern bench reads it from /proc) and the generator's (its user +
# system time over its start, the warm-up and the measured seconds, per request; the keys are stored once per
# server before the rounds, so no run's preload is in it).
# Usage: scripts/tls-cost.sh [ROUNDS] (default 3). Needs target/release/tern and memcached.
# TLS_COST_RT=1 runs the servers and the generator under SCHED_FIFO (chrt -f 10), so the other
# load of a shared machine cannot delay their wake-ups: the cores are theirs while they have work,
# as on a quiet machine (the kernel's real-time throttling still leaves 5% to everything else).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
  -days 1 -subj /CN=bench-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key -out srv.csr \
  -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >ext
openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 1 \
  -extfile ext 2>/dev/null
cd - >/dev/null
tern=target/release/tern
o="ssl_chain_cert=$dir/srv.pem,ssl_key=$dir/srv.key"
rt=()
if [[ ${TLS_COST_RT:-0} == 1 ]]; then
  rt=(chrt -f 10)
fi
"${rt[@]}" taskset -c 0 $tern serve -t 1 -m 1024 -l 127.0.0.1 -p 21301 -Z -o "$o" &
"${rt[@]}" taskset -c 0 $tern serve -t 1 -m 1024 -l 127.0.0.1 -p 21302 &
"${rt[@]}" taskset -c 0 memcached -u root -t 1 -m 1024 -l 127.0.0.1 -p 21303 -U 0 -Z -o "$o" &
sleep 1
target() {
  case $1 in
    tern-tls) args=(-s 127.0.0.1:21301 --tls-ca "$dir/ca.pem") ;;
    tern-plain) args=(-s 127.0.0.1:21302) ;;
    memcached-tls) args=(-s 127.0.0.1:21303 --tls-ca "$dir/ca.pem") ;;
  esac
}
workload=(-m get:8,set:2 -v 256 -k 100000)
for name in tern-tls tern-plain memcached-tls; do
  target $name
  $tern bench "${args[@]}" "${workload[@]}" -n 1 -q >/dev/null
done
declare -A tput cpu client
for pipeline in 16 1; do
  for round in $(seq "$rounds"); do
    for name in tern-tls tern-plain memcached-tls; do
      target $name
      out=$(/usr/bin/time -o "$dir/time" -f '%U %S' "${rt[@]}" taskset -c 1 $tern bench \
        "${args[@]}" "${workload[@]}" -t 1 -c 32 -p "$pipeline" --no-preload --warmup 1s -d 5s \
        -q)
      ops=$(awk '/throughput/ {print $2}' <<<"$out")
      us=$(awk '/server cpu/ {print $5}' <<<"$out")
      # The warm-up second is counted at the measured rate.
      gen=$(awk -v ops="$ops" '{printf "%.2f", ($1 + $2) * 1e6 / (ops * 6)}' "$dir/time")
      echo "p$pipeline round $round $name: $ops ops/s, server $us us/request, generator $gen us/request"
      tput[$name,$pipeline]+="$ops "
      cpu[$name,$pipeline]+="$us "
      client[$name,$pipeline]+="$gen "
    done
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for pipeline in 16 1; do
  for name in tern-tls tern-plain memcached-tls; do
    echo "median p$pipeline $name: $(median <<<"${tput[$name,$pipeline]}") ops/s," \
      "server $(median <<<"${cpu[$name,$pipeline]}") us/request," \
      "generator $(median <<<"${client[$name,$pipeline]}") us/request"
  done
done
