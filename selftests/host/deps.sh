#!/usr/bin/env bash
# Installs, idempotently, everything the host needs to build the kernel, the module,
# the userspace tools and to run the VM test bed. Safe to run on every `make`.
set -euo pipefail

CACHE=${RDMADISK_CACHE:-$HOME/.cache/rdmadisk}
STAMP=$CACHE/deps-v6.stamp
BINDGEN_VER=0.70.1
RUSTC_WEB_VER=1.85.0+dfsg3-1~deb12u3

log() { printf '[deps] %s\n' "$*"; }

PKGS=(
  "rustc-web=$RUSTC_WEB_VER" "rust-web-src=$RUSTC_WEB_VER" "libstd-rust-web-dev=$RUSTC_WEB_VER"
  linux-source-6.12 flex bison bc libelf-dev libssl-dev cpio kmod xz-utils
  libclang-dev clang cmake pkg-config patch
  qemu-system-x86 busybox-static
  rdma-core ibverbs-utils ibverbs-providers libibverbs-dev librdmacm-dev librdmacm1 rdmacm-utils
  perftest iproute2 fio libaio-dev dpkg-dev e2fsprogs nftables iptables kmod procps psmisc
  nvme-cli python3-matplotlib dkms tmux
  ceph-mon ceph-osd ceph-common librbd-dev librados-dev
)

/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || apt-get install -y -qq --no-install-recommends python3-prometheus-client # tests/92: the VMs' python3

if [ -f "$STAMP" ] && [ -x "$CACHE/bin/bindgen" ] && [ -x /usr/bin/rustc ] && command -v vng >/dev/null; then
  exit 0
fi
mkdir -p "$CACHE/bin"

missing=()
for p in "${PKGS[@]}"; do
  name=${p%%=*}
  dpkg-query -W -f='${Status}' "$name" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v vng >/dev/null; then
  log "installing virtme-ng (PyPI)"
  pip install -q 'virtme-ng==1.42' || pip install -q virtme-ng
fi

if [ ! -x "$CACHE/bin/bindgen" ]; then
  log "installing bindgen-cli $BINDGEN_VER into the cache"
  cargo install -q --locked bindgen-cli --version "$BINDGEN_VER" --root "$CACHE"
fi

/usr/bin/rustc --version | grep -q '^rustc 1\.85' || { echo "deps: /usr/bin/rustc is not 1.85" >&2; exit 1; }
touch "$STAMP"
log "host dependencies ready"
