# Mapping while the NIC is being serviced: with no RDMA device on the compute VM, map_device
# falls back to TCP (the target answers there), the disk works, and when the device is added
# the disk moves to RDMA. B: a target with no RDMA listener (--no-rdma): the map falls back to
# TCP too (before, the CM's reject failed it with ECONNREFUSED).
#
# Acceptance: the map succeeds with rxe0 deleted, on TCP and probing RDMA; verified fio
# passes; after `rdma link add` active_transport is rdma within 60 s and verified fio passes
# again; io_errors=0; no splat.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load &&
  on compute "rdma link delete $TR_RXE && ! grep -q . /sys/class/rdmadisk/ctl/ib_devices"
if ! res $? "target; insmod; rdma link delete $TR_RXE: the driver sees no RDMA device"; then
  tr_rxe_restore; dk_cleanup; return 0 2>/dev/null || exit 0
fi

dk_map_disk d76 vol0
if ! res $? "map with no RDMA device: /dev/${DK_DEV:-?} is live"; then
  tr_rxe_restore; dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
out=$(on compute "cd /sys/block/$dev/rdmadisk && echo \$(cat active_transport session)")
[ "$out" = "tcp probing" ]
res $? "on TCP, probing RDMA (a failed map cannot tell a missing device from a missing path): active_transport, session '$out' (want 'tcp probing')"
tr_kmsg_since | grep -E 'd76: (no RDMA connection|mapped)' | indent

dk_fio f1 "--name=f1 --filename=/dev/$dev --rw=randwrite --bsrange=4k-64k --verify=crc32c --do_verify=1 --size=4M --iodepth=8 --randseed=76"
res $? "verified fio over TCP: $FIO_SUM"

read -r r0 <<<"$(tr_stat "$dev" rdma_ios)"
on compute "rdma link add $TR_RXE type rxe netdev $(tr_nic)"
tr_wait back "$dev" 60 rdma >/dev/null
res $? "rdma link add: the disk moves to RDMA: $TR_WAIT"
dk_fio f2 "--name=f2 --filename=/dev/$dev --rw=randwrite --bsrange=4k-64k --verify=crc32c --do_verify=1 --size=4M --offset=8M --iodepth=8 --randseed=761"
res $? "verified fio over RDMA: $FIO_SUM"
dk_csnap "$dev"
dk_show client "$DK_CS"
n_gt "$(cstat rdma_ios)" "${r0:-0}" && n_gt "$(cstat tcp_ios)" 0 && n_eq "$(cstat io_errors)" 0
res $? "tcp_ios=$(cstat tcp_ios), rdma_ios ${r0:-?} -> $(cstat rdma_ios), failbacks=$(cstat failbacks), io_errors=$(cstat io_errors)"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"

# B. A target with no RDMA listener (as one started before its RDMA device): the CM's reject is
#    not the target's refusal, and the map goes on to TCP.
dk_target_start --no-rdma --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d76n vol0
rc=$?
out=$(on compute "cat /sys/block/${DK_DEV:-none}/rdmadisk/active_transport" 2>&1)
[ $rc = 0 ] && [ "$out" = tcp ] && tr_kmsg_since | grep -q 'no RDMA listener on the port'
res $? "a target without an RDMA listener (--no-rdma): the map falls back to TCP (/dev/${DK_DEV:-?} on '$out')"
tr_kmsg_since | grep -E 'd76n: (no RDMA connection|mapped)|no RDMA listener' | indent
dk_unmap_rmmod 10 "${DK_DEV:-none}"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
tr_rxe_restore
dk_cleanup
