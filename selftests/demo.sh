#!/usr/bin/env bash
# make demo: boot the test bed, load rdmadisk on the compute host, show both RDMA links.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export TB_REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=vm/testbed.sh
source "$HERE/vm/testbed.sh"
trap 'tb_shutdown >/dev/null 2>&1' EXIT
tb_boot || exit 1
echo "== storage host: RDMA link"
on storage "rdma link show; ip -br addr show dev \$(cat $TB_DIR/storage.nic)"
echo "== compute host: RDMA link"
on compute "rdma link show; ip -br addr show dev \$(cat $TB_DIR/compute.nic)"
echo "== compute host: insmod rdmadisk.ko"
on compute "insmod $TB_REPO/rdmadisk.ko && dmesg | grep rdmadisk: && echo 'ib_devices:' \$(cat /sys/class/rdmadisk/ctl/ib_devices) && echo 'version:' \$(cat /sys/class/rdmadisk/ctl/version)" || exit 1
echo "== RDMA between the hosts: ib_send_lat over rxe0"
on storage "setsid ib_send_lat -d rxe0 -n 100 >/dev/null 2>&1 </dev/null & sleep 2" >/dev/null
on compute "timeout 300 ib_send_lat -d rxe0 -n 100 $TB_STORAGE_ADDR | grep -A1 t_typical"
on compute "rmmod rdmadisk"
