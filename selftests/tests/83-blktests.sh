# Cases modeled on blktests' nvme and srp groups:
#   reconnect:  forced reconnects (a QP moved to the error state) under verified I/O;
#   teardown:   the target shut down (SIGTERM) during I/O and started again;
#   unplug:     the RDMA device removed while a map is connecting;
#   rmmod-map:  rmmod while a map is connecting;
#   unmap-io:   a normal unmap during I/O (EBUSY), then a forced one.
#
# Acceptance: verified I/O sees no error through reconnects and a target restart; a device
# removal is not held up by a map in progress (returns within 10 s) and the map ends with a
# clean error or a disk; rmmod during a map is refused at once (the map holds the module) and
# works after; unmap during I/O is EBUSY, force fails the I/O and the disk goes; no splat.
# timeout: 1500

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

back=$(dk_backing vol0 32M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d83 vol0 queues=2
if ! res $? "target; insmod; map name=d83 queues=2: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
F=/sys/kernel/debug/rdmadisk/$dev

# map_started NAME: waits (30 s at most) until NAME is in ctl/devices, connecting. Short
# commands from here: the VM's agent runs one command at a time, and a loop there could take
# the agent before the map's own command (started in the background just before) reaches it.
map_started() {
  local i
  for ((i = 0; i < 60; i++)); do
    on compute "cat $DK_CTL/devices" 2>/dev/null |
      awk -v n="$1" '$2 == n && $5 == "connecting" { f = 1 } END { exit !f }' && return 0
    sleep 0.5
  done
  return 1
}

# reconnect: three forced QP errors under verified fio rounds.
tr_rounds_start r "$(tr_fio_args r83)"
r0=$(tr_stat "$dev" reconnects)
# The injection stays armed until the disk counts the reconnect (at most 30 s): a fixed
# window can fall between two fio rounds, when no request reaches the QP.
for i in 1 2 3; do
  sleep 3
  on compute "$DK_VM_DEFS
stat_of /sys/block/$dev/rdmadisk/stats reconnects; b=\${V:-0}; n=0
echo 1 >$F/qp_error_every
while [ \$n -lt 300 ]; do stat_of /sys/block/$dev/rdmadisk/stats reconnects; [ \"\${V:-0}\" -gt \$b ] && break; n=\$((n + 1)); pause 0.1; done
echo 0 >$F/qp_error_every" >/dev/null
  tr_wait rc$i "$dev" 60 rdma reconnects "$((r0 + i - 1))" >/dev/null
done
r1=$(tr_stat "$dev" reconnects)
n_le $((r0 + 3)) "$r1"
res $? "reconnect: three forced QP errors under I/O, reconnects $r0 -> $r1"

# teardown: the target shut down during I/O, back 3 s later.
on storage "kill -TERM \$(cat $DK_TPID)" >/dev/null
sleep 3
dk_target_start --export "vol0=$back" >/dev/null
tr_wait back "$dev" 90 rdma ios "$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2 }')"
res $? "teardown: target stopped with SIGTERM during I/O and started again: I/O resumes ($TR_WAIT)"
tr_rounds_stop r 300
res $? "reconnect + teardown: every fio round verified with no error: $FIO_SUM"

# unmap-io: normal unmap during I/O is EBUSY; force fails the I/O and removes the disk.
# fio must have the disk open before the unmap: under TCG it takes seconds to start, and a
# normal unmap of an idle disk succeeds. Its first I/Os show that it has.
ios0=$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2 }')
dk_fio_bg busy "--name=busy --filename=/dev/$dev --rw=randwrite --bs=4k --size=4M --iodepth=4 --time_based --runtime=300"
tr_wait busy "$dev" 60 any ios "$((ios0 + 20))" >/dev/null
res $? "unmap-io: fio is writing to the disk ($TR_WAIT)"
out=$(dk_unmap "$dev" normal 2>&1); rc=$?
[ $rc != 0 ] && grep -q 'busy' <<<"$out"
res $? "unmap-io: a normal unmap of a disk in use is refused (EBUSY: $out)"
dk_timed force 60 "echo force >/sys/block/$dev/rdmadisk/unmap" >/dev/null && dk_gone "$dev" 30
res $? "unmap-io: a forced unmap under I/O removes the disk"
dk_fio_wait busy 60 >/dev/null
[ "$FIO_RC" != 0 ] && [ "$FIO_RC" != killed ]
res $? "unmap-io: fio saw its I/O fail and ended by itself (exit $FIO_RC)"

# unplug: a map connecting to a frozen target; the RDMA device removed meanwhile.
on storage "kill -STOP \$(cat $DK_TPID)" >/dev/null
dk_timed mapping 60 "$(dk_map_cmd "name=u83 addr=$DK_S export=vol0")" >"$TB_DIR/$DK_ID.map-bg.out" &
mp=$!
map_started u83
res $? "unplug: a map of u83 is connecting"
out=$(dk_timed unplug 30 "t0=\$(date +%s%N); rdma link delete rxe0; echo ms=\$(( (\$(date +%s%N) - t0) / 1000000 ))")
ms=$(sed -n 's/^ms=//p' <<<"$out")
is_num "$ms" && (( ms < 10000 ))
res $? "unplug: 'rdma link delete' during a map returns in ${ms:-?} ms"
on storage "kill -CONT \$(cat $DK_TPID)" >/dev/null
wait $mp
mo=$(cat "$TB_DIR/$DK_ID.map-bg.out")
# The map's own line (with err=), not dk_timed's "rc=timeout" for a map stuck in the kernel.
grep -qE '^rc=[0-9]+ secs=[0-9]+ err=' <<<"$mo"
res $? "unplug: the map ended ($(grep -m1 '^rc=' <<<"$mo"))"
tr_rxe_restore
on compute "for d in \$(awk '{ print \$1 }' $DK_CTL/devices); do echo force >/sys/block/\$d/rdmadisk/unmap; done" >/dev/null

# rmmod-map: rmmod while a map is connecting to a frozen target.
on storage "kill -STOP \$(cat $DK_TPID)" >/dev/null
dk_timed mapping2 60 "$(dk_map_cmd "name=m83 addr=$DK_S export=vol0")" >"$TB_DIR/$DK_ID.map-bg2.out" &
mp=$!
map_started m83
res $? "rmmod-map: a map of m83 is connecting"
out=$(dk_timed rmmod-busy 30 "t0=\$(date +%s%N); rmmod rdmadisk 2>&1; echo rc=\$? ms=\$(( (\$(date +%s%N) - t0) / 1000000 ))")
rc=$(sed -n 's/.*rc=\([0-9]*\) ms.*/\1/p' <<<"$out"); ms=$(sed -n 's/.* ms=\([0-9]*\).*/\1/p' <<<"$out")
on storage "kill -CONT \$(cat $DK_TPID)" >/dev/null
wait $mp
[ "$rc" != 0 ] && is_num "$ms" && (( ms < 5000 ))
res $? "rmmod-map: rmmod during a map is refused at once (rc=$rc in ${ms:-?} ms: $(grep -m1 -i 'in use\|rmmod:' <<<"$out"))"
on compute "for d in \$(awk '{ print \$1 }' $DK_CTL/devices); do echo force >/sys/block/\$d/rdmadisk/unmap; done" >/dev/null
dk_timed rmmod 60 "rmmod rdmadisk" >/dev/null
res $? "rmmod-map: after the map, rmmod unloads"
tr_splat_check
dk_cleanup
