#!/usr/bin/env bash
# Installs, idempotently, everything the host needs to build the kernel, the module,
# the userspace tools and to run the VM test bed. Safe to run on every `make`.
# The build dependencies alone (a real host's `make userspace`) are build-deps.sh's; this adds
# the test bed's: the test kernel's source, qemu and virtme-ng, Ceph, fio, the RDMA tools.
set -euo pipefail

# shellcheck source=selftests/host/build-deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/build-deps.sh"
STAMP=$CACHE/deps-v6.stamp

PKGS=(
  "${BUILD_PKGS[@]}"
  linux-source-6.12
  qemu-system-x86 busybox-static
  rdma-core ibverbs-utils ibverbs-providers libibverbs-dev librdmacm-dev librdmacm1 rdmacm-utils
  perftest iproute2 fio libaio-dev dpkg-dev e2fsprogs nftables iptables kmod procps psmisc
  nvme-cli python3-matplotlib python3-prometheus-client dkms tmux
  ceph-mon ceph-osd ceph-common
)

# Test 92 parses the target's metrics with the VMs' python3 (Debian's, not a PyPI install); before
# the stamp's check, so that a host set up before it gets it too.
/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null || apt_install python3-prometheus-client

if [ -f "$STAMP" ] && [ -x "$CACHE/bin/bindgen" ] && [ -x /usr/bin/rustc ] && command -v vng >/dev/null; then
  exit 0
fi
mkdir -p "$CACHE/bin"

apt_install "${PKGS[@]}"

if ! command -v vng >/dev/null; then
  log "installing virtme-ng (PyPI)"
  pip install -q 'virtme-ng==1.42' || pip install -q virtme-ng
fi

build_tools
touch "$STAMP"
log "host dependencies ready"
