#!/usr/bin/env bash
# Builds the newest memcached a package registry ships — Debian 13 (trixie)'s source package —
# into target/third-party/memcached-VERSION/memcached, once: the tests' second live peer beside
# Debian 12's packaged 1.6.18 (tern-testkit's `memcached_newest_bin`). The source comes through
# a private sources list (deb-src trixie) and private apt state under target/third-party/apt:
# the system's apt configuration is not touched. Prints the binary's path.
#
#   scripts/third-party-memcached.sh        (.ci/run runs it; a second run only prints the path)
set -euo pipefail
cd "$(dirname "$0")/.."
third=${CARGO_TARGET_DIR:-target}/third-party
existing=$(ls -d "$third"/memcached-1.*/memcached 2>/dev/null | sort -V | tail -n 1 || true)
if [ -n "$existing" ] && [ -x "$existing" ]; then
  echo "$existing"
  exit 0
fi

apt_dir=$(realpath -m "$third/apt")
mkdir -p "$apt_dir/sources" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat >"$apt_dir/sources/trixie.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_options=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/sources"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
apt-get "${apt_options[@]}" update -qq >&2
# What the build needs (the same configure line as memcached's own tests use: TLS and SASL).
need=()
for pkg in build-essential libevent-dev libssl-dev libsasl2-dev dpkg-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
work="$third/memcached-source"
rm -rf "$work"
mkdir -p "$work"
(cd "$work" && apt-get "${apt_options[@]}" source -qq memcached >&2)
src=$(ls -d "$work"/memcached-1.*/ | head -n 1)
version=$(basename "$src" | sed 's/^memcached-//')
(
  cd "$src"
  ./configure -q --enable-tls --enable-sasl --enable-sasl-pwdb >&2
  make -s -j"$(nproc)" memcached >&2
)
mkdir -p "$third/memcached-$version"
cp "$src/memcached" "$third/memcached-$version/memcached"
rm -rf "$work"
echo "$third/memcached-$version/memcached"
