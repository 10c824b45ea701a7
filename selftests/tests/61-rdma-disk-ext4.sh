# A filesystem on /dev/rdmadisk0 survives an unmap and a fresh map: mkfs.ext4 (which also
# discards the device), mount, a few MiB of random files, sync, checksums; umount, unmap, map
# the same name again, fsck, mount and compare. The second mount reads everything from the
# target: the remapped disk is a new block device with an empty page cache. Last, the whole
# disk read through the driver must be the backing file on the storage VM, byte for byte.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
MNT=/mnt/rdmadisk61
SUMS=$TB_DIR/$DK_ID.sha256
DK_MOUNTS=$MNT

back=$(dk_backing vol0 32M)
dk_target_start --export "vol0=$back" >/dev/null &&
  dk_load && dk_map_disk d61 vol0
if ! res $? "target with a 32 MiB export; insmod; map name=d61: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

out=$(on compute "mkfs.ext4 -q -F -L rdmadisk61 /dev/$dev 2>&1 && mkdir -p $MNT && mount -t ext4 /dev/$dev $MNT && findmnt -n -o SOURCE,FSTYPE $MNT")
rc=$?
printf '%s\n' "$out" | indent
res $rc "mkfs.ext4 and mount /dev/$dev on $MNT"

# Random files of odd sizes (not multiples of a block) and a directory of small ones.
out=$(on compute "set -e; cd $MNT
head -c 1048576 /dev/urandom >a.bin
head -c 3145731 /dev/urandom >b.bin
head -c 102401 /dev/urandom >c.bin
mkdir d; for i in \$(seq 20); do head -c \$((i * 3000 + 7)) /dev/urandom >d/f\$i; done
sync
find . -type f ! -name lost+found | sort | xargs sha256sum >$SUMS
df -k $MNT | tail -n 1" 2>&1)
rc=$?
printf '%s\n' "$out" | indent
n_eq "$(grep -c . "$SUMS" 2>/dev/null)" 23 && [ $rc = 0 ]
res $? "write 23 files of random data (about 4.5 MiB), sync, record their sha256sums"

dk_csnap "$dev"
echo "  client after the writes: flushes=$(cstat flushes) discards=$(cstat discards) write_zeroes=$(cstat write_zeroes) writes=$(cstat writes) write_bytes=$(cstat write_bytes)"

out=$(dk_unmap "$dev" normal 2>&1)
grep -q 'Device or resource busy' <<<"$out" && on compute "mountpoint -q $MNT"
res $? "unmap normal while mounted: EBUSY, still mounted"

on compute "umount $MNT" && dk_unmap "$dev" normal && dk_gone "$dev" 10
res $? "umount; unmap normal: /dev/$dev gone"

dk_map_disk d61 vol0
rc=$?
res $rc "map name=d61 export=vol0 again: /dev/$DK_DEV (was /dev/$dev)"
if [ $rc = 0 ]; then
  dev=$DK_DEV
  out=$(on compute "e2fsck -fn /dev/$dev 2>&1")
  rc=$?
  printf '%s\n' "$out" | tail -n 2 | indent
  res $rc "e2fsck -fn: the filesystem is clean"
  out=$(on compute "mount -t ext4 /dev/$dev $MNT && cd $MNT && sha256sum -c --quiet $SUMS 2>&1 && echo checked \$(wc -l <$SUMS)")
  rc=$?
  printf '%s\n' "$out" | tail -n 5 | indent
  [ $rc = 0 ] && grep -q '^checked 23$' <<<"$out"
  res $? "mount again: all 23 files match their sha256sums"
  on compute "umount $MNT"
  res $? "umount"
  dk_check_image "$dev" "$back"
  res $? "the whole disk, read through /dev/$dev, is the backing file on the storage VM: $DK_BACKING"
  dk_unmap "$dev" normal && dk_gone "$dev" 10
  res $? "unmap normal"
fi

dk_tsnap
bad=
for k in crc_failures bound_violations io_errors resets rdma_errors; do
  n_eq "$(tstat $k)" 0 || bad+=" $k=$(tstat $k)"
done
[ -z "$bad" ]
res $? "target: no CRC failure, refused request, I/O error, reset or RDMA error${bad:+ (got$bad)}"
echo "  target: reads=$(tstat reads) writes=$(tstat writes) flushes=$(tstat flushes) discards=$(tstat discards) write_zeroes=$(tstat write_zeroes) bytes_written=$(tstat bytes_written)"
dk_cleanup
