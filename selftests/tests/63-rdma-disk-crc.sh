# End-to-end CRC32C with retries. Two target fault switches:
#   --corrupt-read-every 7     the target flips a byte of 1 in 7 reads' data after computing
#                              the CRC it sends: the client must detect it and reissue the read;
#   --fail-write-crc-every 7   the target answers CrcMismatch to 1 in 7 writes (and writes
#                              nothing): the client must reissue the write.
# fio writes with crc32c verify headers and reads everything back; no error may reach it.
#
# One fio job at queue depth 1, so each reissue is the target's very next read (or write) and
# can never be the 7th again: the retries succeed deterministically whatever the driver's retry
# bound (at depth > 1 a reissue could be hit again).

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
N=7

back=$(dk_backing vol0 64M)
dk_target_start --corrupt-read-every $N --export "vol0=$back" >/dev/null &&
  dk_load && dk_map_disk d63 vol0
if ! res $? "target with --corrupt-read-every $N; insmod; map name=d63: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
FIO="--filename=/dev/$dev --rw=randwrite --bsrange=4k-256k --verify=crc32c --do_verify=1 --size=6M --iodepth=1"

# 1. Corrupted reads.
dk_fio rd "--name=rd $FIO --offset=0 --randseed=631"
res $? "fio: 6 MiB written and read back with 1 in $N reads corrupted on the target: $FIO_SUM"
dk_csnap "$dev"
dk_tsnap
dk_show client "$DK_CS"
inj=$(tstat injected_read_corruptions)
n_gt "$inj" 0 && n_eq "$(cstat crc_read_errors)" "$inj"
res $? "client: every corrupted read detected (crc_read_errors=$(cstat crc_read_errors), target injected_read_corruptions=$inj)"
n_gt "$(cstat crc_retries)" 0 && n_le "$(cstat crc_read_errors)" "$(cstat crc_retries)"
res $? "client: each reissued (crc_retries=$(cstat crc_retries) >= crc_read_errors=$(cstat crc_read_errors) > 0)"
n_eq "$(cstat io_errors)" 0 && n_eq "$(cstat crc_write_errors)" 0
res $? "client: io_errors=$(cstat io_errors), crc_write_errors=$(cstat crc_write_errors)"
retries_after_reads=$(cstat crc_retries)

# 2. Refused write CRCs: a fresh target (same backing file), the disk mapped again.
dk_unmap "$dev" normal && dk_gone "$dev" 10 &&
  dk_target_start --fail-write-crc-every $N --export "vol0=$back" >/dev/null &&
  dk_map_disk d63 vol0
if res $? "unmap; target restarted with --fail-write-crc-every $N; map again: /dev/$DK_DEV"; then
  dev=$DK_DEV
  dk_fio wr "--name=wr $FIO --offset=16M --randseed=632"
  res $? "fio: 6 MiB written and verified with 1 in $N write CRCs refused by the target: $FIO_SUM"
  dk_csnap "$dev"
  dk_tsnap
  dk_show client "$DK_CS"
  inj=$(tstat injected_write_crc_failures)
  n_gt "$inj" 0 && n_eq "$(cstat crc_write_errors)" "$inj" && n_eq "$(tstat crc_failures)" "$inj"
  res $? "client: every refused write seen (crc_write_errors=$(cstat crc_write_errors), target injected_write_crc_failures=$inj, crc_failures=$(tstat crc_failures))"
  n_le "$(cstat crc_write_errors)" "$(cstat crc_retries)" && n_gt "$(cstat crc_retries)" 0
  res $? "client: each reissued (crc_retries=$(cstat crc_retries) >= crc_write_errors; the first disk had $retries_after_reads)"
  n_eq "$(cstat io_errors)" 0 && n_eq "$(cstat crc_read_errors)" 0
  res $? "client: io_errors=$(cstat io_errors), crc_read_errors=$(cstat crc_read_errors)"
  dk_unmap "$dev" normal && dk_gone "$dev" 10
  res $? "unmap normal"
fi

on compute "rmmod rdmadisk"
res $? "rmmod rdmadisk"
dk_cleanup
