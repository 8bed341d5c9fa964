#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a bounded time each.
#
#   scripts/fuzz.sh [seconds-per-target] [target...]     (default: 60 s, all targets)
#
# cargo-fuzz passes nightly-only flags (-Zsanitizer=address); RUSTC_BOOTSTRAP=1 lets the stable
# toolchain accept them. Each run starts from the committed seeds (fuzz/seeds/<target>) plus the
# corpus earlier runs grew (fuzz/corpus/<target>, not committed). A crash stops the script with
# the reproducer in fuzz/artifacts/<target>/: turn it into a unit test beside the parser.
set -euo pipefail

secs=${1:-60}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/fuzz"

export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/fuzz/target}
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

start=$(date +%s)
cargo fuzz build -O
echo "fuzz: build took $(( $(date +%s) - start )) s"

mkdir -p logs
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    echo "fuzz: $t for $secs s (log: fuzz/logs/$t.log)"
    status=0
    cargo fuzz run -O "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$secs" -max_len=4096 -print_final_stats=1 >"logs/$t.log" 2>&1 || status=$?
    grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY)' "logs/$t.log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 40 "logs/$t.log" >&2
        echo "fuzz: $t failed (exit $status); reproducer, if any: $(ls artifacts/$t 2>/dev/null)" >&2
        exit 1
    fi
done
echo "fuzz: all targets ran ${secs} s without a crash"
