#!/usr/bin/env bash
# Builds the Debian package tern_<version>_<arch>.deb with Debian's own tools (dpkg-deb,
# dpkg-shlibdeps): the release binary, the systemd units, /etc/tern/tern.toml (a conffile), man
# pages and shell completions generated from the binary's clap definitions, the docs and the
# Grafana dashboard. docs/install.md says how to install and run it.
#
#   scripts/package.sh [--bin PATH] [--out DIR] [--compress xz|gzip|none]
#
# --bin packages a binary already built (the tests pass the debug one) instead of running
# `cargo build --release -p tern`; --out is where the .deb goes (default target/debian);
# --compress is dpkg-deb's -Z (default xz). Needs dpkg-dev (dpkg-shlibdeps) and binutils (strip).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=""
out=target/debian
compress=xz
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --compress) compress=$2; shift 2 ;;
    *) echo "usage: $0 [--bin PATH] [--out DIR] [--compress xz|gzip|none]" >&2; exit 2 ;;
  esac
done
for tool in dpkg-deb dpkg-shlibdeps strip gzip; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is missing (apt-get install dpkg-dev binutils)" >&2; exit 1; }
done
if [ -z "$bin" ]; then
  cargo build --release -p tern
  bin=${CARGO_TARGET_DIR:-target}/release/tern
fi

version=$("$bin" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps finds the package's files under debian/<package>.
root=$work/debian/tern
mkdir -p "$root/DEBIAN"

# The binary, without its DWARF (the symbol table stays, so perf still names functions).
install -D -m 0755 "$bin" "$root/usr/bin/tern"
strip --strip-debug "$root/usr/bin/tern"

# systemd: the units, and the user they run as (created by postinst with systemd-sysusers).
install -D -m 0644 packaging/systemd/tern.service "$root/lib/systemd/system/tern.service"
install -D -m 0644 packaging/systemd/tern@.service "$root/lib/systemd/system/tern@.service"
install -D -m 0644 packaging/debian/tern.sysusers "$root/usr/lib/sysusers.d/tern.conf"

# The config: the repo's example with every key at its default, except that the service listens
# on loopback only until told otherwise, as Debian's memcached does.
default_listen='listen = ["0.0.0.0"]'
grep -qxF "$default_listen" config/tern.toml || { echo "$0: config/tern.toml has no line '$default_listen'" >&2; exit 1; }
install -d "$root/etc/tern"
sed "s|^listen = \[\"0.0.0.0\"\]\$|# The package listens on loopback only, as Debian's memcached does: set the addresses clients use.\nlisten = [\"127.0.0.1\"]|" \
  config/tern.toml >"$root/etc/tern/tern.toml"
chmod 0644 "$root/etc/tern/tern.toml"
echo /etc/tern/tern.toml >"$root/DEBIAN/conffiles"

# Man pages and completions, from the clap definitions in the binary itself.
man=$root/usr/share/man/man1
"$bin" man "$man"
gzip -9n "$man"/*.1
"$bin" completions bash | install -D -m 0644 /dev/stdin "$root/usr/share/bash-completion/completions/tern"
"$bin" completions zsh | install -D -m 0644 /dev/stdin "$root/usr/share/zsh/vendor-completions/_tern"
"$bin" completions fish | install -D -m 0644 /dev/stdin "$root/usr/share/fish/vendor_completions.d/tern.fish"

# Docs, and the Grafana dashboard for the admin endpoint's metrics.
doc=$root/usr/share/doc/tern
install -D -m 0644 packaging/debian/copyright "$doc/copyright"
install -m 0644 README.md "$doc/"
for page in install serve observability tune bench protocols storage; do
  install -m 0644 "docs/$page.md" "$doc/"
done
install -D -m 0644 config/tern.toml "$doc/examples/tern.toml"
install -D -m 0644 packaging/grafana/tern.json "$root/usr/share/tern/grafana/tern.json"

for script in postinst prerm postrm; do
  install -m 0755 "packaging/debian/$script" "$root/DEBIAN/$script"
done

# Depends from the libraries the binary links (libc6, libgcc-s1, libsasl2-2), as dh_shlibdeps
# computes it.
printf 'Source: tern\n\nPackage: tern\nArchitecture: any\n' >"$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O -edebian/tern/usr/bin/tern | sed -n 's/^shlibs:Depends=//p')
installed_kib=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: tern
Version: $version
Architecture: $arch
Maintainer: ${DEBFULLNAME:-tern developers} <${DEBEMAIL:-tern@packages.invalid}>
Installed-Size: $installed_kib
Depends: $shlibs, systemd | adduser
Suggests: nutcracker
Section: database
Priority: optional
Description: memcached-compatible cache server, load generator and topology tuner
 tern serves memcached's ASCII, meta and binary protocols with memcached's flags and replies,
 without a global lock on the hot path, and stores items compactly in segments. One binary also
 holds tern bench (throughput at a tail-latency SLO), tern tune (NUMA, CPU and interrupt layout,
 systemd drop-ins and twemproxy pool configs) and tern top (a live view of tern and memcached).
EOF
# Checksums for `dpkg --verify`; the conffile's is kept by dpkg itself, as dh_md5sums leaves it out.
(cd "$root" && find . \( -path ./DEBIAN -o -path ./etc \) -prune -o -type f -print | sed 's|^\./||' |
  LC_ALL=C sort | xargs md5sum) >"$root/DEBIAN/md5sums"

deb=$out/tern_${version}_${arch}.deb
dpkg-deb --root-owner-group -Z"$compress" --build "$root" "$deb" >/dev/null
echo "$deb"
