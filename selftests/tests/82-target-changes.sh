# A target that comes back serving the export otherwise than the mapped disk was built with:
# the disk must not take the new export for the old one. And a write the target refuses as
# read-only must fail with the errno that says so.
#
# The disk (queues=1, loss_timeout_s=300, so that no outage here fails it) is mapped on a 16 MiB
# file; a pattern is written at 8 MiB. Then the target is restarted serving export vol0
#   A. grown to 32 MiB (no online resize);
#   B. read-only (--export-ro);
#   C. with a smaller largest request (--max-io-bytes 65536; the disk issues up to 1 MiB);
#   D. with other block sizes (the same file through a loop device of 4096-byte sectors);
# and each time: the kernel says why it refuses the connection, and 10 s later the disk is still
# not live (it keeps trying); the target restarted as it was, the disk is live again.
#   E. the target answers writes ReadOnly (--refuse-writes-file: an export turned read-only
#      under a disk that attached it read-write): a direct write fails with ENODATA, "No data
#      available" (BLK_STS_MEDIUM, as nvme maps NVME_SC_READ_ONLY; not EILSEQ, which says the
#      data failed its integrity check), and the target counted the write; with the marker
#      gone, the same write succeeds.
# Acceptance: as above; the pattern at 8 MiB reads back the same at the end; io_errors is the one
# refused write; unmap and rmmod; no kernel splat.
# timeout: 900

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
MARK=/run/rdmadisk-tests/refuse-writes
tr_dmesg_mark

on storage "mkdir -p /run/rdmadisk-tests; rm -f $MARK" >/dev/null
back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d82 vol0
if ! res $? "target; insmod; map name=d82: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
tr_set "$dev" loss_timeout_s=300 >/dev/null
dk_check_backing "$dev" "$back" 8 1
res $? "a pattern written at 8 MiB is in the backing file: $DK_BACKING"
sum8() { on compute "dd if=/dev/$dev bs=1M count=1 skip=8 iflag=direct status=none | sha256sum | cut -c1-16"; }
sum0=$(sum8)

# refused TAG WORDS TARGET-ARGS...: restarts the target with TARGET-ARGS; the disk must refuse
# it, saying WORDS, and still not be live 10 s later; then the target as it was brings it back.
refused() {
  local tag=$1 words=$2 line st act t0
  shift 2
  tr_dmesg_mark
  dk_target_start "$@" >/dev/null
  res $? "[$tag] target restarted with $*" || return
  t0=$SECONDS
  until line=$(tr_kmsg_since | grep "d82: .*$words" | tail -n1); [ -n "$line" ] || (( SECONDS - t0 > 60 )); do
    sleep 2
  done
  sleep 10
  st=$(tr_get "$dev" state); act=$(tr_get "$dev" active_transport)
  [ -n "$line" ] && [ "$st" != live ] && [ "$act" = none ]
  res $? "[$tag] the disk refuses it: '${line#*] }'; 10 s later state $st, active_transport $act (want not live, none)"
  dk_target_start --export "vol0=$back" >/dev/null && tr_wait "back$tag" "$dev" 120 any
  res $? "[$tag] the target as it was: the disk is live again ($TR_WAIT)"
}

on storage "cp --sparse=always $back $back.big && truncate -s 32M $back.big" >/dev/null
refused grow "now reports 65536 sectors for export vol0, not the 32768" --export "vol0=$back.big"
refused ro "now serves export vol0 read-only, not read-write" --export-ro "vol0=$back"
refused maxio "now takes requests of at most 65536 bytes" --export "vol0=$back" --max-io-bytes 65536
loop=$(on storage "losetup -b 4096 -f --show $back")
if res $? "a loop device of 4096-byte sectors on the same file: $loop"; then
  refused bs "now reports block sizes 4096/4096 (logical/physical) for export vol0" --export "vol0=$loop"
  on storage "losetup -d $loop" >/dev/null
fi
on storage "rm -f $back.big" >/dev/null

# E. Writes answered ReadOnly.
dk_target_start --export "vol0=$back" --refuse-writes-file "$MARK" >/dev/null && tr_wait backE "$dev" 120 any
res $? "[readonly] target restarted with --refuse-writes-file: the disk is live ($TR_WAIT)"
dk_tsnap; w0=$(tstat writes); ie0=$(tr_stat "$dev" io_errors)
n_eq "$ie0" 0
res $? "[readonly] no I/O error so far, through the four refused targets (io_errors ${ie0:-?})"
on storage "touch $MARK" >/dev/null
out=$(on compute "dd if=/dev/zero of=/dev/$dev bs=4k count=1 seek=100 oflag=direct conv=notrunc status=none 2>&1; echo dd=\$?")
dk_tsnap; w1=$(tstat writes); ie1=$(tr_stat "$dev" io_errors)
printf '%s\n' "$out" | indent
grep -q 'No data available' <<<"$out" && ! grep -q '^dd=0$' <<<"$out" && n_gt "$w1" "${w0:-x}" && n_eq "$ie1" $((${ie0:-x} + 1))
res $? "[readonly] a direct write the target refuses ReadOnly fails with ENODATA ('No data available'); the target counted it (writes ${w0:-?} -> ${w1:-?}); io_errors ${ie0:-?} -> ${ie1:-?}"
on storage "rm -f $MARK" >/dev/null
out=$(on compute "dd if=/dev/zero of=/dev/$dev bs=4k count=1 seek=100 oflag=direct conv=notrunc status=none 2>&1; echo dd=\$?")
[ "$out" = dd=0 ]
res $? "[readonly] the marker gone, the same write succeeds ($out)"

sum1=$(sum8)
[ -n "$sum0" ] && [ "$sum1" = "$sum0" ]
res $? "after it all, the pattern at 8 MiB reads back the same ($sum0 -> $sum1)"
dk_unmap_rmmod 30 "$dev"
res $? "unmap normal; rmmod"
tr_splat_check
dk_cleanup
