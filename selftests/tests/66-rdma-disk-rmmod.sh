# rmmod with disks mapped and I/O running. An open block device holds a reference on the module
# that owns its operations (the kernel calls them on close), so while fio has the disk open rmmod
# must be refused at once ("in use") without disturbing the I/O. A forced unmap is how an
# operator takes a busy disk away: fio gets errors, and then rmmod removes the remaining (idle)
# mapped disk and unloads. The module must load and map again afterwards.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

back=$(dk_backing vol0 64M)
back1=$(dk_backing vol1 16M)
dk_target_start --export "vol0=$back" --export "vol1=$back1" >/dev/null &&
  dk_load && dk_map_disk d66 vol0
if ! res $? "target with 64 and 16 MiB exports; insmod; map name=d66: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

dk_fio_bg load "--name=load --filename=/dev/$dev --rw=randrw --bsrange=4k-256k --iodepth=16 --size=64M --time_based --runtime=120"
# Under way: more than 20 requests completed (rdma_ios; responses would count keepalive
# answers too), and fio still going.
for _ in $(seq 60); do
  r=$(on compute "$DK_VM_DEFS
stat_of /sys/block/$dev/rdmadisk/stats rdma_ios; echo \$V")
  n_gt "$r" 20 && break
  sleep 1
done
n_gt "$r" 20 && dk_fio_running load
res $? "fio randrw at iodepth 16 running on /dev/$dev (${r:-?} requests completed so far)"

out=$(on compute "rmmod rdmadisk 2>&1; echo rc=\$?")
printf '%s\n' "$out" | indent
grep -q 'in use' <<<"$out" && ! grep -q '^rc=0$' <<<"$out" && on compute "test -e /sys/block/$dev" && dk_fio_running load
res $? "rmmod while fio has /dev/$dev open is refused (module in use); the disk and fio carry on"

dk_map_disk d66b vol1
res $? "map name=d66b: /dev/${DK_DEV:-?}, left idle"
idle=$DK_DEV

# shellcheck disable=SC2016 # expanded in the VM
out=$(dk_timed unmap 60 't0=$(date +%s); echo force > /sys/block/'"$dev"'/rdmadisk/unmap; rc=$?; echo "took=$(($(date +%s) - t0))"; exit $rc')
printf '%s\n' "$out" | indent
grep -q '^rc=0 ' <<<"$out" && dk_gone "$dev" 30
res $? "force unmap of the busy /dev/$dev: done, the disk is gone"
dk_fio_wait load 60
[ "$FIO_RC" != 0 ] && [ "$FIO_RC" != killed ]
res $? "fio ends with errors (expected) after the forced unmap: $FIO_SUM"

# shellcheck disable=SC2016 # expanded in the VM
out=$(dk_timed rmmod 90 't0=$(date +%s); rmmod rdmadisk; rc=$?; echo "took=$(($(date +%s) - t0))"; exit $rc')
printf '%s\n' "$out" | indent
secs=$(sed -n 's/^took=//p' <<<"$out")
grep -q '^rc=0 ' <<<"$out" && n_le "$secs" 60
res $? "rmmod with /dev/$idle still mapped unmaps it and unloads within 60 s (${secs:-?} s)"
if grep -q '^rc=timeout ' <<<"$out"; then
  echo "  rmmod is stuck in the kernel: leaving the compute VM alone (the runner's dmesg check reports the hang)"
  dk_target_stop >/dev/null; return 0 2>/dev/null || exit 0
fi
on compute "! grep -q '^rdmadisk ' /proc/modules && ! test -e /sys/block/$idle && ! test -e /sys/block/$dev && ! test -e /sys/class/rdmadisk"
res $? "module gone; /sys/block/$dev, /sys/block/$idle and /sys/class/rdmadisk gone"

dk_load && dk_map_disk d66 vol0 && [ "$DK_DEV" = rdmadisk0 ]
res $? "insmod again; map name=d66 again: /dev/${DK_DEV:-?}"
if [ -n "$DK_DEV" ] && on compute "test -b /dev/$DK_DEV"; then
  dk_fio again "--name=again --filename=/dev/$DK_DEV --rw=randwrite --bsrange=4k-256k --verify=crc32c --do_verify=1 --size=4M --iodepth=8 --randseed=66"
  res $? "the remapped /dev/$DK_DEV works: 4 MiB verified: $FIO_SUM"
else
  res 1 "the remapped disk works: /dev/${DK_DEV:-?} is not a block device; fio not run"
fi

dk_unmap_rmmod 10 "$DK_DEV"
res $? "unmap normal; rmmod rdmadisk"
dk_tsnap
echo "  target: rdma_connections=$(tstat rdma_connections) connections_active=$(tstat connections_active) resets=$(tstat resets) rdma_errors=$(tstat rdma_errors)"
dk_cleanup
