#!/usr/bin/env bash
# Instructions per call of the per-request recording paths, with callgrind (repeatable on a
# noisy machine). Needs valgrind. Usage: bash crates/tern-admin/scripts/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
bin=$(cargo bench -p tern-admin --bench instructions --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "instructions" and m.get("executable"):
        print(m["executable"])')
collected() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
n=1000000
per_call() { echo $(( $(collected "$1" $((2 * n))) - $(collected "$1" "$n") )); }
loop=$(per_call baseline)
for op in record count_batch hotkey request; do
  python3 -c "print(f'$op: {($(per_call "$op") - $loop) / $n:.1f} instructions per call (loop subtracted)')"
done
