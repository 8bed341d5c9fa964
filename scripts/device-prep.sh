#!/usr/bin/env bash
# Readies target/device/ for the scaling study on a lent machine (docs/bench.md, "Scaling study"),
# whose 15 minutes should go to measuring: a stripped release build of tern, the memcached build
# given in MEMCACHED, and in target/device/lib the shared libraries they link beyond the C
# library (libsasl2; memcached's libevent, libssl, libcrypto), which the lent machine may lack.
#
#   MEMCACHED=/path/to/memcached scripts/device-prep.sh
#
# then, in one device call carrying target/device (about 16 MiB; the limit is 64 MiB):
#
#   LD_LIBRARY_PATH=$PWD/target/device/lib TERN=target/device/tern \
#     MEMCACHED=target/device/memcached OUT=$OUT/scaling scripts/scaling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MEMCACHED=${MEMCACHED:?set MEMCACHED to a memcached build (the newest release)}
[ -x "$MEMCACHED" ] || { echo "device-prep.sh: no memcached binary at '$MEMCACHED'" >&2; exit 1; }
out=target/device
rm -rf "$out"
mkdir -p "$out/lib"
cargo build --release -q -p tern
strip -o "$out/tern" "${CARGO_TARGET_DIR:-target}/release/tern"
cp "$MEMCACHED" "$out/memcached"
for bin in "$out/tern" "$out/memcached"; do
  # `name => /path (address)` lines; the C library, the loader and libgcc/libm come with any Linux.
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
    case $(basename "$lib") in
      libc.so.* | libm.so.* | libgcc_s.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
done
# Each binary must start with only these libraries beside the base system's.
for bin in "$out/tern" "$out/memcached"; do
  LD_LIBRARY_PATH=$PWD/$out/lib "$bin" --version >/dev/null 2>&1 \
    || LD_LIBRARY_PATH=$PWD/$out/lib "$bin" -V >/dev/null \
    || { echo "device-prep.sh: $bin does not start" >&2; exit 1; }
done
du -sh "$out"
ls "$out" "$out/lib"
