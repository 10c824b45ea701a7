#!/usr/bin/env bash
# Builds (once) the Rust-enabled 6.12 test kernel into a cache outside the clone, keyed by
# the config fragments, the patches, this recipe and the source version. Prints the tree's
# path last.
#
# KERNEL_FLAVOR picks the kernel: debug (the default: the tests' kernel, rdmadisk.config, with
# lockdep, KFENCE, kmemleak and DEBUG_ATOMIC_SLEEP) or bench (make bench's: bench.config on top,
# the same kernel without the debug options). Each flavor has its own tree, key and lock.
#
# patches/ holds fixes to soft-RoCE and the IB core that the test bed's fault injection
# reaches (a WARN in either fails the suite); each patch's header says what it fixes. They
# apply to the test kernel only: the module itself needs none of them.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${RDMADISK_CACHE:-$HOME/.cache/rdmadisk}
SRC_TAR=/usr/src/linux-source-6.12.tar.xz
FLAVOR=${KERNEL_FLAVOR:-debug}
case $FLAVOR in
  debug) FRAGMENTS=("$HERE/rdmadisk.config"); name=linux ;;
  bench) FRAGMENTS=("$HERE/rdmadisk.config" "$HERE/bench.config"); name=linux-bench ;;
  *) printf '[kernel] KERNEL_FLAVOR=%s: the flavors are debug and bench\n' "$FLAVOR" >&2; exit 2 ;;
esac
PATCHES=("$HERE"/patches/*.patch)
JOBS=${JOBS:-$(nproc)}
KMAKE=(make RUSTC=/usr/bin/rustc BINDGEN="$CACHE/bin/bindgen" HOSTRUSTC=/usr/bin/rustc)

log() { printf '[kernel] %s\n' "$*" >&2; }

"$HERE/../host/deps.sh" >&2

srcver=$(dpkg-query -W -f='${Version}' linux-source-6.12)
key=$( { cat "${FRAGMENTS[@]}" "$0" "${PATCHES[@]}"; echo "$srcver"; } | sha256sum | cut -c1-16)
tree=$CACHE/$name-$key
# One builder per tree: a second run (another clone, CI) waits here and then finds the tree
# built, instead of unpacking over a half-built one.
mkdir -p "$CACHE"
exec 9>"$tree.lock"
if ! flock -n 9; then
  log "another build of $tree is running; waiting for its lock"
  flock 9
fi
if [ -f "$tree/.rdmadisk-built" ]; then
  log "cached $FLAVOR kernel tree $tree (source $srcver)"
  echo "$tree"
  exit 0
fi

log "no cached $FLAVOR tree for key $key: building Linux $srcver (cold build, ~15 min on 2 cores)"
rm -rf "$tree"
mkdir -p "$tree"
log "unpacking $SRC_TAR"
tar -xf "$SRC_TAR" -C "$tree" --strip-components=1
cd "$tree"
for p in "${PATCHES[@]}"; do
  log "applying $(basename "$p")"
  patch -p1 --quiet --forward < "$p" || { log "ERROR: $(basename "$p") does not apply"; exit 1; }
done

log "configuring: x86_64_defconfig + virtme-ng guest options + $(for f in "${FRAGMENTS[@]}"; do basename "$f"; done | paste -sd+)"
"${KMAKE[@]}" -s x86_64_defconfig
virtme-configkernel --dry-run --defconfig | grep -E '^(CONFIG_|# CONFIG_)' >> .config
cat "${FRAGMENTS[@]}" >> .config
"${KMAKE[@]}" -s olddefconfig 2>&1 | grep -v 'override: reassigning' >&2 || true

# Fail loudly when a requested option did not survive olddefconfig (dependency missing), or
# one turned off is still on (another option selects it). The last fragment's word counts.
bad=0
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=y|CONFIG_*=m)
      grep -qx "$line" .config || { log "ERROR: $line requested but not in the final .config"; bad=1; } ;;
    CONFIG_*=n)
      grep -qx "${line%=n}=[ym]" .config && { log "ERROR: $line requested but still on in the final .config"; bad=1; } ;;
  esac
done < <(grep -h '^CONFIG_' "${FRAGMENTS[@]}" | awk -F= '{ last[$1] = $0; order[$1] = NR } END { for (k in last) print order[k], last[k] }' | sort -n | cut -d' ' -f2-)
if ! grep -qx 'CONFIG_RUST=y' .config; then
  log "ERROR: CONFIG_RUST=y did not survive olddefconfig; run 'make rustavailable' in $tree"
  "${KMAKE[@]}" rustavailable >&2 || true
  exit 1
fi
[ "$bad" = 0 ] || exit 1

log "building bzImage, Rust artifacts and modules with -j$JOBS"
start=$(date +%s)
if ! "${KMAKE[@]}" -j"$JOBS" 2>&1 | {
  n=0
  while IFS= read -r l; do
    case "$l" in
      "  CC"*|"  RUSTC"*|"  LD"*|"  AR"*) n=$((n + 1)); [ $((n % 500)) = 0 ] && log "$n objects, $(( $(date +%s) - start ))s" ;;
      *error*|*Error*|*"warning: "*) printf '%s\n' "$l" >&2 ;;
    esac
  done
}; then
  log "ERROR: kernel build failed"
  exit 1
fi
"${KMAKE[@]}" -s modules_prepare >&2
log "kernel built in $(( $(date +%s) - start ))s"
touch .rdmadisk-built
echo "$tree"
