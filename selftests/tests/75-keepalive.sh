# Keepalives on an idle RDMA disk: a NOP after keepalive_ms without traffic, and an unanswered
# one is an RDMA failure, found while no I/O runs.
#
# 1. keepalive_ms=500 on an idle disk for 6 s: the client's keepalives rise, the target counts
#    as many NOPs (it answers each), and nothing fails.
# 2. keepalive_ms=0: keepalives stop.
# 3. keepalive_ms=1000, failover_threshold=1: the target is frozen (SIGSTOP) with the disk idle.
#    The unanswered keepalive resets the connection ("keepalive unanswered" in dmesg) and
#    counts as an RDMA failure, which with F=1 fails over (TCP to a frozen target hangs
#    too, so I/O would wait). The target resumes: the disk is live again, and a verified fio
#    run passes with no error.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d75 vol0
if ! res $? "target; insmod; map name=d75: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

# 1. Idle, keepalive_ms=500; then off, and the counts compared once the last answer is in.
dk_tsnap
n0=$(tstat nops)
read -r k0 <<<"$(tr_stat "$dev" keepalives)"
tr_set "$dev" keepalive_ms=500 >/dev/null
sleep 6
tr_set "$dev" keepalive_ms=0 >/dev/null
sleep 2
read -r k1 f1 r1 <<<"$(tr_stat "$dev" keepalives failovers reconnects)"
dk_tsnap
n1=$(tstat nops)
n_gt "$k1" $((k0 + 2)) && n_eq $((k1 - k0)) $((n1 - n0)) && n_eq "$f1" 0 && n_eq "$r1" 0
res $? "idle for 6 s with keepalive_ms=500: keepalives $k0 -> $k1, the target answered as many NOPs ($n0 -> $n1), failovers=$f1 reconnects=$r1"

# 2. Off.
sleep 3
read -r k2 <<<"$(tr_stat "$dev" keepalives)"
n_eq "$k1" "$k2"
res $? "keepalive_ms=0: no keepalive in 3 s ($k1 -> $k2)"

# 3. A frozen target, found while idle.
tr_set "$dev" keepalive_ms=1000 failover_threshold=1 loss_timeout_s=120 >/dev/null
on storage "kill -STOP \$(cat $DK_TPID)" >/dev/null
sleep 6
out=$(tr_kmsg_since | grep -c 'keepalive unanswered')
ses=$(tr_get "$dev" session)
on storage "kill -CONT \$(cat $DK_TPID)" >/dev/null
n_gt "$out" 0 && [ "$ses" = draining-to-tcp ]
res $? "target frozen 6 s, disk idle: 'keepalive unanswered' logged ($out times), counted as an RDMA failure: with F=1 the session is '$ses' (want draining-to-tcp)"

tr_wait back "$dev" 120 any >/dev/null
back_rc=$?
read -r f2 <<<"$(tr_stat "$dev" failovers)"
[ $back_rc = 0 ] && n_gt "$f2" 0
res $? "target resumed: the disk has a transport again within 120 s, failovers=$f2: ${TR_WAIT:-no WAIT line}"
dk_fio after "--name=after --filename=/dev/$dev --rw=randwrite --bsrange=4k-64k --verify=crc32c --do_verify=1 --size=4M --iodepth=8 --randseed=75"
res $? "then 4 MiB of verified writes with no error: $FIO_SUM"
dk_csnap "$dev"
dk_show client "$DK_CS"
n_eq "$(cstat io_errors)" 0
res $? "io_errors=$(cstat io_errors)"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
dk_cleanup
