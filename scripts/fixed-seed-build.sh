#!/usr/bin/env bash
# Builds tern with the store's hash seeds fixed to [1, 2, 3, 4] and copies the binary to OUT, so
# two builds' instruction counts (scripts/instructions.sh) compare exactly: with random seeds a
# get's index probing moves the count by tens of instructions from run to run. The source edit
# is reverted whatever happens; only the seed line is touched.
#
#   scripts/fixed-seed-build.sh OUT     then   TERN=OUT ONLY=tern scripts/instructions.sh get
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/fixed-seed-build.sh OUT}
store=crates/tern-store/src/store/mod.rs
random='let seeds = hash_seeds::random_seeds();'
fixed='let seeds = [1, 2, 3, 4];'
grep -qF "$random" "$store" || { echo "$store: the seed line has changed; update this script" >&2; exit 1; }
# The fixed line as a sed pattern: its brackets escaped.
fixed_pattern='let seeds = \[1, 2, 3, 4\];'
trap 'sed -i "s/$fixed_pattern/$random/" "$store"' EXIT
sed -i "s/$random/$fixed/" "$store"
cargo build --release -q -p tern
cp "${CARGO_TARGET_DIR:-target}/release/tern" "$out"
