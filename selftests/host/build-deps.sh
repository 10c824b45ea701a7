#!/usr/bin/env bash
# Installs, idempotently, what building rdmadisk needs on any host, without the test bed:
#
#   build-deps.sh userspace   the userspace tools (`make userspace`): libclang for bindgen and
#                             librbd/librados for the target's RBD exports. The verbs libraries
#                             are opened at run time, not linked (libibverbs1 and librdmacm1 at
#                             run time). cargo itself comes from rustup (rust-version 1.85).
#   build-deps.sh [all]       that, and what the kernel module is built with: the rustc 1.85 at
#                             /usr/bin/rustc that the kernel's Rust support takes, its standard
#                             library source, bindgen-cli (into the cache) and Kbuild's tools. The
#                             kernel tree is the host's (KDIR=/lib/modules/$(uname -r)/build) or
#                             the test kernel, which `make deps` (deps.sh) adds.
#
# deps.sh, the test bed's full set, sources this file for BUILD_PKGS, USERSPACE_PKGS and
# apt_install, and adds the rest.
set -euo pipefail

CACHE=${RDMADISK_CACHE:-$HOME/.cache/rdmadisk}
BINDGEN_VER=0.70.1
RUSTC_WEB_VER=1.85.0+dfsg3-1~deb12u3

USERSPACE_PKGS=(clang libclang-dev pkg-config librbd-dev librados-dev)
BUILD_PKGS=(
  "${USERSPACE_PKGS[@]}"
  "rustc-web=$RUSTC_WEB_VER" "rust-web-src=$RUSTC_WEB_VER" "libstd-rust-web-dev=$RUSTC_WEB_VER"
  make gcc flex bison bc libelf-dev libssl-dev cpio kmod xz-utils cmake patch
)

log() { printf '[deps] %s\n' "$*"; }

# apt_install PKG...: installs those not installed yet (PKG may pin a version, NAME=VERSION).
apt_install() {
  local p missing=()
  for p; do
    dpkg-query -W -f='${Status}' "${p%%=*}" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# build_tools: bindgen-cli for the module's bindings, and the rustc check.
build_tools() {
  if [ ! -x "$CACHE/bin/bindgen" ]; then
    log "installing bindgen-cli $BINDGEN_VER into the cache"
    cargo install -q --locked bindgen-cli --version "$BINDGEN_VER" --root "$CACHE"
  fi
  /usr/bin/rustc --version | grep -q '^rustc 1\.85' || { echo "deps: /usr/bin/rustc is not 1.85" >&2; exit 1; }
}

# Sourced (by deps.sh): definitions only.
if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

set_=${1:-all}
case $set_ in
  userspace) pkgs=("${USERSPACE_PKGS[@]}") ;;
  all) pkgs=("${BUILD_PKGS[@]}") ;;
  *) echo "usage: build-deps.sh [userspace|all]" >&2; exit 2 ;;
esac
STAMP=$CACHE/build-deps-v1-$set_.stamp
# deps.sh's stamp covers every build dependency too.
if [ -f "$STAMP" ] || [ -f "$CACHE/deps-v6.stamp" ]; then exit 0; fi
mkdir -p "$CACHE/bin"
apt_install "${pkgs[@]}"
[ "$set_" = userspace ] || build_tools
touch "$STAMP"
log "build dependencies ($set_) ready"
