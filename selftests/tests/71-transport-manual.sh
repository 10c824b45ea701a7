# A manual switch to TCP and back under verified I/O.
#
# fio in rounds (each: 2 jobs on disjoint 4 MiB halves, random 50/50 reads and writes of
# 4-64 KiB at queue depth 16 with crc32c headers, then every written block read back and
# verified) runs while the test writes tcp to transport, waits for active_transport to read
# tcp, lets the I/O run over TCP, then writes auto and waits for active_transport rdma.
#
# Acceptance: each switch completes within RDT71_SWITCH_S (default 60 s) with I/O then
# flowing on the new transport (tcp_ios, then rdma_ios, rising); while on TCP, rdma_ios stays
# put and the target sees a TCP connection; every fio round finishes with no error and
# verified; a seeded pattern written through the disk on TCP, and another on RDMA again, is
# in the backing file on the storage VM at the same offset; io_errors=0, state live; no kernel
# splat.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
SW=${RDT71_SWITCH_S:-60}
TCP_RUN=${RDT71_TCP_RUN_S:-8}
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d71 vol0
if ! res $? "target (RDMA $DK_PORT, TCP $DK_TCP_PORT); insmod; map name=d71: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

read -r r0 t0 <<<"$(tr_stat "$dev" rdma_ios tcp_ios)"
tr_rounds_start m "$(tr_fio_args m71)"
tr_wait io "$dev" 120 rdma rdma_ios "${r0:-0}"
if ! res $? "fio rounds under way over RDMA (rdma_ios ${r0:-?} -> $(word rdma_ios "$TR_WAIT"), tcp_ios ${t0:-?}): $TR_WAIT"; then
  tr_rounds_stop m 300 >/dev/null; dk_cleanup; return 0 2>/dev/null || exit 0
fi

# 1. To TCP.
read -r _ t1 <<<"$(tr_stat "$dev" rdma_ios tcp_ios)"
out=$(on compute "echo tcp >/sys/block/$dev/rdmadisk/transport 2>&1 && cat /sys/block/$dev/rdmadisk/transport")
[ "$out" = tcp ]
res $? "write tcp to transport: accepted, reads '$out'"
tr_wait totcp "$dev" "$SW" tcp tcp_ios "${t1:-0}"
res $? "active_transport tcp and tcp_ios rising within $SW s: $TR_WAIT"
ses=$(tr_get "$dev" session)
ls=$(tr_get "$dev" last_switch)
[ "$ses" = tcp ] && [[ $ls == "to=tcp reason=manual "* ]]
res $? "session reads tcp (got '$ses'); last_switch '$ls'"
read -r r2 t2 <<<"$(tr_stat "$dev" rdma_ios tcp_ios)"
sleep "$TCP_RUN"
read -r r3 t3 act <<<"$(tr_stat "$dev" rdma_ios tcp_ios) $(tr_get "$dev" active_transport)"
n_gt "$t3" "$t2" && n_eq "$r3" "$r2" && [ "$act" = tcp ]
res $? "$TCP_RUN s on TCP: tcp_ios $t2 -> $t3, rdma_ios unchanged ($r2 -> $r3), active_transport $act"
dk_tsnap
n_gt "$(tstat tcp_connections)" 0
res $? "target: tcp_connections=$(tstat tcp_connections) (rdma_connections=$(tstat rdma_connections))"
dk_check_backing "$dev" "$back" 8 1
rc=$?
act=$(tr_get "$dev" active_transport)
[ $rc = 0 ] && [ "$act" = tcp ]
res $? "over TCP (active_transport $act): the backing file holds what was written, where it was written: $DK_BACKING"
tr_rounds_running m
res $? "fio still running ($(tr_rounds_count m) rounds done) when switching back"

# 2. Back to RDMA.
read -r r4 _ <<<"$(tr_stat "$dev" rdma_ios tcp_ios)"
out=$(on compute "echo auto >/sys/block/$dev/rdmadisk/transport 2>&1 && cat /sys/block/$dev/rdmadisk/transport")
[ "$out" = auto ]
res $? "write auto to transport: accepted, reads '$out'"
tr_wait tordma "$dev" "$SW" rdma rdma_ios "${r4:-0}"
res $? "active_transport rdma and rdma_ios rising within $SW s: $TR_WAIT"
sleep 5

tr_rounds_stop m 300
res $? "fio: every round finished with no error, data verified: $FIO_SUM"
dk_check_backing "$dev" "$back" 10 1
rc=$?
act=$(tr_get "$dev" active_transport)
[ $rc = 0 ] && [ "$act" = rdma ]
res $? "back on RDMA (active_transport $act): the backing file holds what was written, where it was written: $DK_BACKING"

dk_csnap "$dev"
dk_show client "$DK_CS"
n_gt "$(cstat tcp_ios)" "${t1:-x}" && n_gt "$(cstat rdma_ios)" "${r4:-x}" && n_gt "$(cstat tcp_bytes)" 0 &&
  n_gt "$(cstat rdma_bytes)" 0
res $? "stats: tcp_ios ${t1:-?} -> $(cstat tcp_ios) ($(cstat tcp_bytes) bytes), rdma_ios ${r4:-?} -> $(cstat rdma_ios) ($(cstat rdma_bytes) bytes); switch_requeued=$(cstat switch_requeued) tcp_connects=$(cstat tcp_connects)"
out=$(on compute "cd /sys/block/$dev/rdmadisk && echo \$(cat state) \$(cat active_transport) \$(cat session)")
n_eq "$(cstat io_errors)" 0 && [ "$out" = "live rdma rdma" ]
res $? "io_errors=$(cstat io_errors); state, active_transport, session: '$out' (want 'live rdma rdma')"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
dk_cleanup
