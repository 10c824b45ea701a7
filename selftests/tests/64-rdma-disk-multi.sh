# Two disks at once, and a forced unmap under load that must hurt only its own disk.
#
# Two exports on one target, mapped as rdmadisk0 and rdmadisk1; fio runs on both. While both
# run, "force" is written to rdmadisk0's unmap: fio on rdmadisk0 gets I/O errors (expected),
# rdmadisk0 leaves /sys/block and /dev, and fio on rdmadisk1 completes its crc32c-verified run
# with no error. Then rdmadisk1 verifies again on its own, and a new mapping takes the lowest
# free index (rdmadisk0). On each disk that stays, a seeded pattern written through it must be
# in its backing file on the storage VM at the same offset. The runner's dmesg check catches
# any splat from the teardown.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

b0=$(dk_backing vol0 64M)
b1=$(dk_backing vol1 64M)
dk_target_start --export "vol0=$b0" --export "vol1=$b1" >/dev/null &&
  dk_load && dk_map_disk d64a vol0 && d0=$DK_DEV && dk_map_disk d64b vol1 && d1=$DK_DEV
rc=$?
lines=$(on compute "cat $DK_CTL/devices")
printf '%s\n' "$lines" | indent "devices: "
[ $rc = 0 ] && [ "$d0" = rdmadisk0 ] && [ "$d1" = rdmadisk1 ] &&
  [ "$lines" = "rdmadisk0 d64a $DK_S:$DK_PORT vol0 live"$'\n'"rdmadisk1 d64b $DK_S:$DK_PORT vol1 live" ]
if ! res $? "two exports mapped at once: rdmadisk0 = d64a/vol0, rdmadisk1 = d64b/vol1, both live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi

# rdmadisk0: random I/O until it is torn away (errors expected). rdmadisk1: a verified run,
# 32 MiB written at 2 MiB/s (about 16 s), then read back.
dk_fio_bg victim "--name=victim --filename=/dev/$d0 --rw=randrw --bsrange=4k-256k --iodepth=8 --size=64M --time_based --runtime=120"
# The keeper is rate-limited so that it is still running when the victim's disk goes.
dk_fio_bg keeper "--name=keeper --filename=/dev/$d1 --rw=randwrite --bsrange=4k-256k --verify=crc32c --do_verify=1 --size=32M --iodepth=8 --rate=2m --randseed=64"

# Let both get going: more than 20 requests completed on each disk (rdma_ios: responses
# would count keepalive answers too).
busy() { # busy DEV: prints the disk's rdma_ios
  on compute "$DK_VM_DEFS
stat_of /sys/block/$1/rdmadisk/stats rdma_ios; echo \$V"
}
for _ in $(seq 60); do
  r0=$(busy rdmadisk0); r1=$(busy rdmadisk1)
  n_gt "$r0" 20 && n_gt "$r1" 20 && break
  sleep 1
done
# Under way: each disk has completed requests, and both fio runs are still going.
n_gt "$r0" 20 && n_gt "$r1" 20 && dk_fio_running keeper && dk_fio_running victim
res $? "both fio runs under way when rdmadisk0 is force-unmapped (requests completed: rdmadisk0 ${r0:-?}, rdmadisk1 ${r1:-?})"

# shellcheck disable=SC2016 # expanded in the VM
out=$(dk_timed force 60 't0=$(date +%s); echo force >/sys/block/rdmadisk0/rdmadisk/unmap; rc=$?; echo "took=$(($(date +%s) - t0))"; exit $rc')
printf '%s\n' "$out" | indent
secs=$(sed -n 's/^took=//p' <<<"$out")
grep -q '^rc=0 ' <<<"$out" && n_le "$secs" 30
res $? "echo force > rdmadisk0/rdmadisk/unmap under fio returns 0 within 30 s (${secs:-?} s)"
if grep -q '^rc=timeout ' <<<"$out"; then
  echo "  the forced unmap is stuck in the kernel: leaving the compute VM alone (the runner's dmesg check reports the hang)"
  dk_fio_kill victim; dk_fio_kill keeper; dk_target_stop >/dev/null; return 0 2>/dev/null || exit 0
fi
dk_gone rdmadisk0 30
res $? "rdmadisk0 leaves /sys/block and /dev"
[ "$(on compute "cat $DK_CTL/devices")" = "rdmadisk1 d64b $DK_S:$DK_PORT vol1 live" ]
res $? "ctl/devices lists only rdmadisk1, live"

echo "  fio on the force-unmapped disk:"
dk_fio_wait victim 60
[ "$FIO_RC" != 0 ] && [ "$FIO_RC" != killed ] && n_gt "$FIO_ERRS" 0
res $? "fio on rdmadisk0 ends with I/O errors (expected) within 60 s of the unmap: $FIO_SUM"
echo "  fio on the other disk:"
dk_fio_wait keeper 600
rc=$?
n_le $((32 * 1024)) "$FIO_WKIB" && [ $rc = 0 ]
res $? "fio on rdmadisk1 completes 32 MiB of verified writes with no error: $FIO_SUM"
dk_csnap rdmadisk1
n_eq "$(cstat io_errors)" 0
res $? "rdmadisk1: io_errors=$(cstat io_errors) (timeouts=$(cstat timeouts) reconnects=$(cstat reconnects) requeued=$(cstat requeued))"

dk_fio again "--name=again --filename=/dev/$d1 --rw=randwrite --bsrange=4k-1m --verify=crc32c --do_verify=1 --size=2M --offset=32M --iodepth=4 --randseed=641"
res $? "rdmadisk1 alone afterwards: 2 MiB verified: $FIO_SUM"
dk_check_backing "$d1" "$b1" 48 1
res $? "$d1: its backing file on the storage VM holds what was written, where it was written: $DK_BACKING"

dk_map_disk d64c vol0 && [ "$DK_DEV" = rdmadisk0 ]
res $? "a new mapping takes the lowest free index: d64c -> /dev/${DK_DEV:-?}"
if [ -n "$DK_DEV" ] && on compute "test -b /dev/$DK_DEV"; then
  dk_fio fresh "--name=fresh --filename=/dev/$DK_DEV --rw=randwrite --bsrange=4k-256k --verify=crc32c --do_verify=1 --size=4M --iodepth=4 --randseed=642"
  res $? "the new /dev/$DK_DEV works: 4 MiB verified: $FIO_SUM"
  dk_check_backing "$DK_DEV" "$b0" 16 1
  res $? "the new /dev/$DK_DEV: vol0's backing file holds what was written, where it was written: $DK_BACKING"
else
  res 1 "the new disk works: /dev/${DK_DEV:-?} is not a block device; fio not run"
fi

dk_tsnap
echo "  target: rdma_connections=$(tstat rdma_connections) connections_active=$(tstat connections_active) resets=$(tstat resets) rdma_errors=$(tstat rdma_errors) bound_violations=$(tstat bound_violations)"
dk_unmap "$DK_DEV" normal && dk_unmap "$d1" normal && dk_gone "$DK_DEV" 10 && dk_gone "$d1" 10 &&
  on compute "rmmod rdmadisk"
res $? "unmap both normally; rmmod rdmadisk"
dk_cleanup
