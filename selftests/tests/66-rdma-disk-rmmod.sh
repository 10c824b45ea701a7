# rmmod with a disk mapped and I/O running: the module must tear the disk down (failing its
# I/O) and unload within 60 s, the fio process must get errors and exit (closing a device whose
# driver is gone), and the module must load and map again afterwards.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

back=$(dk_backing vol0 64M)
dk_target_start --export "vol0=$back" >/dev/null &&
  dk_load && dk_map_disk d66 vol0
if ! res $? "target with a 64 MiB export; insmod; map name=d66: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

dk_fio_bg load "--name=load --filename=/dev/$dev --rw=randrw --bsrange=4k-256k --iodepth=16 --size=64M --time_based --runtime=120"
for _ in $(seq 60); do
  r=$(on compute "sed -n 's/^responses=//p' /sys/block/$dev/rdmadisk/stats")
  n_gt "$r" 20 && break
  sleep 1
done
dk_fio_running load
res $? "fio randrw at iodepth 16 running on /dev/$dev ($r responses so far)"

# shellcheck disable=SC2016 # expanded in the VM
out=$(dk_timed rmmod 90 't0=$(date +%s); rmmod rdmadisk; rc=$?; echo "took=$(($(date +%s) - t0))"; exit $rc')
printf '%s\n' "$out" | indent
secs=$(sed -n 's/^took=//p' <<<"$out")
grep -q '^rc=0 ' <<<"$out" && n_le "$secs" 60
res $? "rmmod rdmadisk under I/O succeeds within 60 s (${secs:-?} s)"
if grep -q '^rc=timeout ' <<<"$out"; then
  echo "  rmmod is stuck in the kernel: leaving the compute VM alone (the runner's dmesg check reports the hang)"
  dk_fio_kill load; dk_target_stop >/dev/null; return 0 2>/dev/null || exit 0
fi
on compute "! grep -q '^rdmadisk ' /proc/modules && ! test -e /sys/block/$dev && ! test -e /dev/$dev && ! test -e /sys/class/rdmadisk"
res $? "module gone; /sys/block/$dev, /dev/$dev and /sys/class/rdmadisk gone"

dk_fio_wait load 60
[ "$FIO_RC" != 0 ] && [ "$FIO_RC" != killed ]
res $? "fio ends with errors (expected) within 60 s of the unload: $FIO_SUM"

dk_load && dk_map_disk d66 vol0 && [ "$DK_DEV" = rdmadisk0 ]
res $? "insmod again; map name=d66 again: /dev/${DK_DEV:-?}"
dk_fio again "--name=again --filename=/dev/rdmadisk0 --rw=randwrite --bsrange=4k-256k --verify=crc32c --do_verify=1 --size=4M --iodepth=8 --randseed=66"
res $? "the remapped disk works: 4 MiB verified: $FIO_SUM"

dk_unmap rdmadisk0 normal && dk_gone rdmadisk0 10 && on compute "rmmod rdmadisk"
res $? "unmap normal; rmmod rdmadisk"
dk_tsnap
echo "  target: rdma_connections=$(tstat rdma_connections) connections_active=$(tstat connections_active) resets=$(tstat resets) rdma_errors=$(tstat rdma_errors)"
dk_cleanup
