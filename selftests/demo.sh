#!/usr/bin/env bash
# make demo: boot the test bed, load rdmadisk on the compute host, show both RDMA links; then
# serve a 64 MiB export from the storage host and run fio on /dev/rdmadisk0 over RDMA, through
# a NIC servicing cycle (the device removed: TCP; added back: RDMA again).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TB_REPO=$(cd "$HERE/.." && pwd)
export TB_REPO
# shellcheck source-path=SCRIPTDIR source=vm/testbed.sh
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

# The block device: the userspace target on the storage host, /dev/rdmadisk0 on the compute host.
TB_TEST=demo
# shellcheck source-path=SCRIPTDIR source=tests/lib/disk.sh
source "$HERE/tests/lib/disk.sh"
echo "== storage host: rdmadisk-target serving a 64 MiB sparse file as export disk0"
back=$(dk_backing disk0 64M) && dk_target_start --export "disk0=$back" || exit 1
head -n 4 "$DK_TLOG" | sed 's/^/  /'
echo "== compute host: insmod rdmadisk.ko; map disk0 as /dev/rdmadisk0"
echo "  echo 'name=demo0 addr=$DK_S port=$DK_PORT export=disk0' > $DK_CTL/map_device"
if ! dk_load || ! dk_map_disk demo0 disk0; then
  echo "mapping failed; kernel log:"; on compute "dmesg | grep rdmadisk | tail -n 20"
  dk_cleanup; exit 1
fi
on compute "cat $DK_CTL/devices; ls -l /dev/$DK_DEV; echo size: \$((\$(cat /sys/block/$DK_DEV/size) / 2048)) MiB"
demo_fio() { # demo_fio TITLE FIO-ARGS: runs fio on the disk and prints its summary
  echo "== fio: $1"
  dk_fio "$2" "--name=$2 --filename=/dev/$DK_DEV ${*:3}"
}
demo_fio "4 KiB random reads, queue depth 16, 10 s" randread --rw=randread --bs=4k --iodepth=16 --time_based --runtime=10
demo_fio "64 KiB sequential writes, queue depth 16, 16 MiB" seqwrite --rw=write --bs=64k --iodepth=16 --size=16M
A=/sys/block/$DK_DEV/rdmadisk
wait_transport() { # wait_transport WANT: polls active_transport for up to 60 s, prints the time
  on compute "t0=\$(date +%s%N); for i in \$(seq 300); do [ \$(cat $A/active_transport) = $1 ] && break; sleep 0.2; done
    echo \"  active_transport=\$(cat $A/active_transport) session=\$(cat $A/session) after \$(( (\$(date +%s%N) - t0) / 1000000 )) ms\""
}
echo "== NIC servicing: 'rdma link delete rxe0' on the compute host; the disk moves to TCP"
on compute "t0=\$(date +%s%N); rdma link delete rxe0 && echo \"  deleted in \$(( (\$(date +%s%N) - t0) / 1000000 )) ms\""
wait_transport tcp
demo_fio "4 KiB random reads over TCP, queue depth 16, 10 s" randread-tcp --rw=randread --bs=4k --iodepth=16 --time_based --runtime=10
echo "== the device returns: 'rdma link add rxe0'; the disk moves back to RDMA"
on compute "rdma link add rxe0 type rxe netdev \$(cat $TB_DIR/compute.nic)"
wait_transport rdma
demo_fio "4 KiB random reads over RDMA again, queue depth 16, 10 s" randread-back --rw=randread --bs=4k --iodepth=16 --time_based --runtime=10
echo "== counters"
dk_csnap "$DK_DEV"
dk_show client "$(grep -E '^(reads|writes|read_bytes|write_bytes|responses|remote_invalidations|max_outstanding|credit_waits|io_errors|rdma_ios|tcp_ios|failovers|failbacks|switch_requeued)=' <<<"$DK_CS")"
dk_tsnap
dk_show "target" "$(grep -E '^(reads|writes|rdma_reads|rdma_writes|send_with_inv|plain_sends|rdma_connections|credit_waits)=' <<<"$DK_TS")"
echo "== unmap and unload"
dk_unmap "$DK_DEV" normal && on compute "rmmod rdmadisk && echo 'unmapped; rdmadisk unloaded'"
rc=$?
dk_target_stop >/dev/null
on storage "rm -f $back" >/dev/null
exit $rc
