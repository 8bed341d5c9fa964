#!/usr/bin/env bash
# The cost of TLS (docs/performance.md): tern over TLS, tern in plain text and Debian's memcached
# over TLS (-Z), each with one worker thread pinned to core 0, driven by tern bench on core 1,
# at 32 connections x pipeline 16 and x pipeline 1. Runs alternate A, B, C, A, B, C, ... so drift
# of a shared machine touches every server alike; prints each run and the medians.
# Usage: scripts/tls-cost.sh [ROUNDS] (default 3). Needs target/release/tern and memcached.
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
taskset -c 0 $tern serve -t 1 -m 1024 -l 127.0.0.1 -p 21301 -Z -o "$o" &
taskset -c 0 $tern serve -t 1 -m 1024 -l 127.0.0.1 -p 21302 &
taskset -c 0 memcached -u root -t 1 -m 1024 -l 127.0.0.1 -p 21303 -U 0 -Z -o "$o" &
sleep 1
declare -A tput cpu
for pipeline in 16 1; do
  for round in $(seq "$rounds"); do
    for name in tern-tls tern-plain memcached-tls; do
      case $name in
        tern-tls) args=(-s 127.0.0.1:21301 --tls-ca "$dir/ca.pem") ;;
        tern-plain) args=(-s 127.0.0.1:21302) ;;
        memcached-tls) args=(-s 127.0.0.1:21303 --tls-ca "$dir/ca.pem") ;;
      esac
      out=$(taskset -c 1 $tern bench "${args[@]}" -t 1 -c 32 -p "$pipeline" -m get:8,set:2 \
        -v 256 -k 100000 --warmup 1s -d 5s)
      ops=$(awk '/throughput/ {print $2}' <<<"$out")
      us=$(awk '/server cpu/ {print $5}' <<<"$out")
      echo "p$pipeline round $round $name: $ops ops/s, $us us/request"
      tput[$name,$pipeline]+="$ops "
      cpu[$name,$pipeline]+="$us "
    done
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for pipeline in 16 1; do
  for name in tern-tls tern-plain memcached-tls; do
    echo "median p$pipeline $name: $(median <<<"${tput[$name,$pipeline]}") ops/s," \
      "$(median <<<"${cpu[$name,$pipeline]}") us/request"
  done
done
