#!/usr/bin/env bash
# Builds, once, the fio the test bed runs: Debian's fio source (the version the host has
# installed, with Debian's patches), linked statically with only the engines the tests use.
# Prints the binary's path.
#
# Why: Debian's fio links 64 shared libraries (ceph, glusterfs, boost, ICU...). Under TCG with
# the debug kernel, loading them costs 4-5 s per fio start (15 s the first time), and the
# suite starts fio a few hundred times. This build starts in well under a second.
#
# The cache is keyed by the fio version and this script; a lock keeps two builds apart.
set -euo pipefail

CACHE=${RDMADISK_CACHE:-$HOME/.cache/rdmadisk}
log() { printf '[fio] %s\n' "$*" >&2; }

ver=$(dpkg-query -W -f='${Version}' fio)
key=$(printf '%s\n' "$ver" | cat - "$0" | sha256sum | cut -c1-16)
out=$CACHE/fio-$key
if [ -x "$out/fio" ]; then echo "$out/fio"; exit 0; fi

mkdir -p "$CACHE"
exec 8>"$CACHE/fio.lock"
flock 8
if [ -x "$out/fio" ]; then echo "$out/fio"; exit 0; fi

log "building a static fio $ver (libaio, io_uring, psync) into the cache"
work=$(mktemp -d "$CACHE/fio-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# The source comes from the same Debian archive as the system's packages: a private apt
# configuration whose only list is the system's own "deb" sources, as "deb-src".
mkdir -p "$work/apt/lists/partial" "$work/apt/parts"
found=0
for f in /etc/apt/sources.list.d/*.sources; do
  [ -e "$f" ] || continue
  grep -q '^Types:.*\bdeb\b' "$f" || continue
  sed 's/^Types:.*/Types: deb-src/' "$f" >"$work/apt/parts/${f##*/}"
  found=1
done
if [ -e /etc/apt/sources.list ]; then
  sed -n 's/^deb /deb-src /p' /etc/apt/sources.list >"$work/apt/parts/main.list"
  [ -s "$work/apt/parts/main.list" ] && found=1
fi
[ "$found" = 1 ] || { log "no Debian sources configured in /etc/apt"; exit 1; }
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/apt/parts"
  -o "Dir::State::Lists=$work/apt/lists" -o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" update -qq >&2
(cd "$work" && apt-get "${apt_opts[@]}" source -qq "fio=$ver" >&2)
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'fio-*' | head -n1)
[ -n "$src" ] || { log "apt-get source fio=$ver gave no source tree"; exit 1; }

cd "$src"
./configure --build-static --disable-native --disable-numa --disable-rdma --disable-rados \
  --disable-rbd --disable-http --disable-gfapi --disable-libnfs --disable-pmem \
  --disable-xnvme --disable-libzbc --disable-tcmalloc --disable-dfs >"$work/configure.log" 2>&1 ||
  { tail -n 20 "$work/configure.log" >&2; exit 1; }
grep -q '^Linux AIO support *yes' "$work/configure.log" || { log "libaio not found (libaio-dev)"; exit 1; }
make -j"$(nproc)" fio >"$work/make.log" 2>&1 || { tail -n 20 "$work/make.log" >&2; exit 1; }
./fio --enghelp | grep -qw libaio || { log "the built fio has no libaio engine"; exit 1; }

mkdir -p "$out.tmp"
cp fio "$out.tmp/fio"
rm -rf "$out"
mv "$out.tmp" "$out"
log "built $out/fio"
echo "$out/fio"
