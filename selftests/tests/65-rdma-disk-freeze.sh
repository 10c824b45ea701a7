# A target that stops answering for longer than the I/O timeout, then comes back: no error may
# reach the application.
#
# io_timeout_ms=3000, loss_timeout_s=60. fio writes with crc32c verify at queue depth 8; the
# target process is frozen with SIGSTOP for 8 s (its QPs stay up in rxe, so requests are
# acknowledged by the transport but never answered), then resumed with SIGCONT. Requests time
# out; the driver may reset the connection, reconnect and requeue them (the loss timeout is far
# away), and fio must finish with no error and its data verified.
#
# Acceptance: the target process is stopped (state T) for the whole freeze; the client's
# timeouts or reconnects rise during the freeze; fio 0 errors; the client counted timeouts > 0
# or reconnects > 0 (both reported, with requeued).

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
FREEZE=${RDT65_FREEZE:-8}

back=$(dk_backing vol0 64M)
dk_target_start --export "vol0=$back" >/dev/null &&
  dk_load && dk_map_disk d65 vol0
if ! res $? "target with a 64 MiB export; insmod; map name=d65: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
A=/sys/block/$dev/rdmadisk

out=$(on compute "echo 3000 >$A/io_timeout_ms && echo 60 >$A/loss_timeout_s && echo \$(cat $A/io_timeout_ms) \$(cat $A/loss_timeout_s)")
[ "$out" = "3000 60" ]
res $? "io_timeout_ms=3000, loss_timeout_s=60 (read back '$out')"

# Rate-limited (32 MiB written at 2 MiB/s, about 16 s, then read back), so it certainly spans the freeze;
# while the target is frozen fio keeps submitting until all 8 slots are stuck.
dk_fio_bg frz "--name=frz --filename=/dev/$dev --rw=randwrite --bsrange=4k-256k --verify=crc32c --do_verify=1 --size=32M --iodepth=8 --rate=2m --randseed=65"
for _ in $(seq 60); do
  r=$(on compute "$DK_VM_DEFS
stat_of $A/stats responses; echo \$V")
  n_gt "$r" 10 && break
  sleep 1
done
dk_fio_running frz
if ! res $? "fio (32 MiB of verified random writes at 2 MiB/s, iodepth 8) under way ($r responses) before the freeze"; then
  dk_fio_wait frz 60 >/dev/null
  dk_cleanup; return 0 2>/dev/null || exit 0
fi

# tstate: the target process's state letter (T: stopped)
tstate() { on storage "sed -n 's/^State:[[:space:]]*\\(.\\).*/\\1/p' /proc/\$(cat $DK_TPID)/status" 2>/dev/null; }
dk_csnap "$dev"
read -r c_to0 c_rc0 <<<"$(cstat timeouts) $(cstat reconnects)"
on storage "kill -STOP \$(cat $DK_TPID)" >/dev/null
t0=$SECONDS
st0=$(tstate)
sleep "$FREEZE"
st1=$(tstate)
states=$(on compute "cat $A/state")
dk_csnap "$dev"
read -r c_to1 c_rc1 <<<"$(cstat timeouts) $(cstat reconnects)"
on storage "kill -CONT \$(cat $DK_TPID)" >/dev/null
st2=$(tstate)
echo "  target frozen for $((SECONDS - t0)) s; disk state at the end of the freeze: $states"
[ "$st0" = T ] && [ "$st1" = T ] && [ -n "$st2" ] && [ "$st2" != T ] && [ "$st2" != Z ]
res $? "SIGSTOP took effect: the target's state is T after the SIGSTOP ('$st0') and at the end of the freeze ('$st1'), '$st2' after SIGCONT"
n_gt "$c_to1" "$c_to0" || n_gt "$c_rc1" "$c_rc0"
res $? "the client counted the freeze while it lasted: timeouts $c_to0 -> $c_to1, reconnects $c_rc0 -> $c_rc1"
dk_fio_running frz
res $? "fio still running when the target is resumed (its I/O was held, not failed)"

dk_fio_wait frz 600
res $? "fio completes with no error and its data verified after the ${FREEZE} s freeze: $FIO_SUM"

dk_csnap "$dev"
dk_show client "$DK_CS"
n_gt "$(cstat timeouts)" 0 || n_gt "$(cstat reconnects)" 0
res $? "client noticed the freeze: timeouts=$(cstat timeouts) reconnects=$(cstat reconnects) (requeued=$(cstat requeued))"
n_eq "$(cstat io_errors)" 0 && [ "$(on compute "cat $A/state")" = live ]
res $? "client: io_errors=$(cstat io_errors), state live again"
dk_tsnap
echo "  target: rdma_connections=$(tstat rdma_connections) resets=$(tstat resets) rdma_errors=$(tstat rdma_errors) bound_violations=$(tstat bound_violations) crc_failures=$(tstat crc_failures)"
grep -E 'rdma: .*(reset|disconnected|attached)' "$DK_TLOG" | tail -n 6 | indent "target log: "

dk_fio after "--name=after --filename=/dev/$dev --rw=randwrite --bsrange=4k-256k --verify=crc32c --do_verify=1 --size=2M --offset=32M --iodepth=8 --randseed=651"
res $? "after the freeze: 2 MiB more verified with no error: $FIO_SUM"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
dk_cleanup
