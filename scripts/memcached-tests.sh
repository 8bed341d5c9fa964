#!/usr/bin/env bash
# Runs memcached's own test files (t/*.t, Perl, through its t/lib/MemcachedTest.pm) against tern.
#
#   MEMCACHED_SRC=/path/to/memcached/checkout TERN=path/to/tern \
#       scripts/memcached-tests.sh t/metaget.t [t/other.t ...]
#
# MemcachedTest.pm starts "$builddir/memcached-debug" (builddir: the directory prove runs in) under
# "$builddir/timedrun 600", with memcached's flags (-u root when run as root, -o
# relaxed_privileges, -s SOCKET or -p PORT -U PORT, and each test's own), and reads "-h" to learn
# what the server supports. This script makes a scratch build directory holding a copy of the
# checkout's t/ and a memcached-debug (and memcached) that exec "$TERN serve" with those flags,
# runs `prove -v` there on the given files and prints the summary. Nothing of memcached is copied
# into this repository: the tests are read from the checkout given by path.
#
# SKIP_SUBTESTS='NAME|NAME...' skips the subtests of those names (Test::More's `skip_all` at
# their start, in the scratch copy): for subtests that read memcached's internals (`watch
# sysevents`'s compaction lines, `debugitem`), which tern does not emulate; each skipped one is
# listed in the summary.
set -euo pipefail
src=${MEMCACHED_SRC:?set MEMCACHED_SRC to a memcached source checkout (with its t/)}
tern=${TERN:?set TERN to the tern binary to test}
[ $# -gt 0 ] || { echo "usage: MEMCACHED_SRC=... TERN=... $0 t/FILE.t ..." >&2; exit 2; }
[ -f "$src/t/lib/MemcachedTest.pm" ] || { echo "$src/t/lib/MemcachedTest.pm: not found" >&2; exit 2; }
command -v prove > /dev/null || { echo "prove (Perl's Test::Harness) is not installed" >&2; exit 2; }
tern=$(realpath "$tern")
[ -x "$tern" ] || { echo "$tern: not an executable" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tern-memcached-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A copy, not a link: some tests write beside themselves (certificates, log files).
cp -R "$src/t" "$work/t"
for exe in memcached-debug memcached; do
  printf '#!/bin/sh\nexec %q serve "$@"\n' "$tern" > "$work/$exe"
  chmod +x "$work/$exe"
done
if [ -x "$src/timedrun" ]; then
  ln -s "$(realpath "$src/timedrun")" "$work/timedrun"
else
  # memcached's timedrun (built by its `make test`): run a command with a time limit, passing
  # signals on. coreutils' timeout does the same.
  printf '#!/bin/sh\nexec timeout "$@"\n' > "$work/timedrun"
  chmod +x "$work/timedrun"
fi

files=()
for f in "$@"; do
  case $f in
    t/*) files+=("$f") ;;
    *) files+=("t/$(basename "$f")") ;;
  esac
  [ -f "$work/${files[-1]}" ] || { echo "$src/${files[-1]}: not found" >&2; exit 2; }
done

if [ -n "${SKIP_SUBTESTS:-}" ]; then
  for f in "${files[@]}"; do
    SKIP_SUBTESTS=$SKIP_SUBTESTS perl -0pi -e '
      for my $name (split /\|/, $ENV{SKIP_SUBTESTS}) {
        s/(subtest\s+\x27\Q$name\E\x27\s*=>\s*sub\s*\{)/$1 plan skip_all => "reads memcached internals (skipped for tern)";/g;
      }' "$work/$f"
  done
fi

cd "$work"
status=0
prove -v "${files[@]}" 2>&1 | tee "$work/prove.log" || status=$?
echo
echo "== memcached's tests against $tern ($(basename "$src"), $(date -u +%Y-%m-%dT%H:%MZ))"
for f in "${files[@]}"; do
  # Each file's own count: its "ok"/"not ok" lines between its header and the next one.
  awk -v f="$f" '
    index($0, f " ") == 1 || $0 == f " .." { on = 1; next }
    on && /^t\/.*\.t \.\./ { on = 0 }
    on && /^(    )*ok [0-9]/ { ok++ }
    on && /^(    )*not ok [0-9]/ { bad++ }
    END { printf "%s: %d ok, %d not ok (assertions, subtests'"'"' included)\n", f, ok, bad }
  ' "$work/prove.log"
done
[ -z "${SKIP_SUBTESTS:-}" ] || echo "skipped subtests: $SKIP_SUBTESTS"
sed -n '/^\(Test Summary Report\|All tests successful\)/,$p' "$work/prove.log"
exit "$status"
