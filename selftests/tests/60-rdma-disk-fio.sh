# The block data path over RDMA, checked end to end with fio and both sides' counters.
#
# A 64 MiB sparse export; /dev/rdmadisk0 mapped with two hardware queues; fio writes random
# 4 KiB-1 MiB blocks with crc32c verify headers and reads them all back, two jobs of 6 MiB on
# disjoint 16 MiB halves, at queue depth 1 and then 16 (24 MiB written and verified in all).
#
# Then 4 KiB random writes, verified, which go inline (inline_max, default 4096): the data in
# the request's Send, with no MR and no RDMA Read.
#
# Acceptance: no fio error; the target pulled every write with RDMA Read but the inline ones,
# which both sides count alike, and pushed every read with RDMA Write; every data response but
# an inline write's was a Send-with-Invalidate and the client saw each as a remote
# invalidation of that request's rkey (so no local invalidation, no rkey mismatch); the
# data-less responses (flush, discard, write-zeroes, nop; rkey 0) and the inline writes' were
# plain Sends; no CRC
# error, retry, timeout or reconnect; a seeded pattern written through the disk is in the
# backing file on the storage VM at the same offset. Then a read-only mapping (ro) of the same export reads
# the same data and refuses writes before they reach the target.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

back=$(dk_backing vol0 64M)
dk_target_start --export "vol0=$back" >/dev/null
res $? "target listens on $DK_S:$DK_PORT with a 64 MiB sparse export vol0 ($back)" &&
  dk_load && dk_map_disk d60 vol0 queues=2
if ! res $? "insmod; map name=d60 export=vol0 queues=2: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
dk_tsnap
nq=$(on compute "ls /sys/block/$dev/mq | wc -l")
n_eq "$nq" 2 && n_eq "$(tstat rdma_connections)" 2
res $? "queues=2: two blk-mq hardware queues (got $nq), two RDMA connections at the target (got $(tstat rdma_connections))"

# 1. fio: random writes, then every block read back and verified, two disjoint jobs.
fio_args() { # fio_args NAME IODEPTH SEED
  echo "--name=$1 --filename=/dev/$dev --rw=randwrite --bsrange=4k-1m --verify=crc32c --do_verify=1" \
    "--numjobs=2 --size=6M --offset_increment=16M --iodepth=$2 --randseed=$3"
}
for qd in 1 16; do
  dk_fio "qd$qd" "$(fio_args "qd$qd" $qd $((60 + qd)))"
  rc=$?
  [ $rc = 0 ] && n_le 12288 "$FIO_WKIB" && n_le 12288 "$FIO_RKIB"
  res $? "fio iodepth $qd, 2 jobs x 6 MiB of 4 KiB-1 MiB random writes, crc32c-verified: $FIO_SUM"
done
# 4 KiB writes go inline; fio reads them back through RDMA Writes as usual. No merging, so that
# every write stays 4 KiB.
dk_csnap "$dev"; i0=$(cstat inline_writes)
on compute "echo 2 >/sys/block/$dev/queue/nomerges"
dk_fio inline "--name=inline --filename=/dev/$dev --rw=randwrite --bs=4k --verify=crc32c --do_verify=1 --size=2M --offset=48M --iodepth=4 --randseed=604"
rc=$?
on compute "echo 0 >/sys/block/$dev/queue/nomerges"
dk_csnap "$dev"
[ $rc = 0 ] && n_le 2048 "$FIO_WKIB" && n_le 512 $(($(cstat inline_writes) - ${i0:-0}))
res $? "fio iodepth 4, 2 MiB of 4 KiB random writes, crc32c-verified, every one inline (client inline_writes ${i0:-?} -> $(cstat inline_writes)): $FIO_SUM"

# 2. The counters of both sides, with the disk idle.
dk_csnap "$dev"
dk_tsnap
dk_show client "$DK_CS"
dk_show target "$DK_TS"
# Inline writes carry data but no rkey: answered with plain Sends. Every write here is a
# multiple of 4 KiB, so an inline one is exactly 4096 bytes. sum A B / sub A B (at least 0):
# empty, and so failing every check, unless both are numbers.
sum() { is_num "${1:-}" && is_num "${2:-}" && echo $(($1 + $2)); }
sub() { is_num "${1:-}" && is_num "${2:-}" && echo $(($1 > $2 ? $1 - $2 : 0)); }
t_inl=$(tstat inline_writes); c_inl=$(cstat inline_writes)
inl_bytes=$(is_num "$t_inl" && echo $((t_inl << 12)))
t_data=$(sub "$(tsum reads writes)" "$t_inl")
t_nodata=$(sum "$(tsum flushes discards write_zeroes nops)" "$t_inl")
# A connection reset (see the last check) requeues the requests on the wire; the target may
# have executed some of them already, and answered some whose responses were flushed. Then
# its counts may exceed the client's by at most the requeued requests; without a reset they
# must be equal.
rq=$(cstat requeued); is_num "$rq" || rq=0
[ "$rq" -gt 0 ] && echo "  a connection reset requeued $rq requests: the sides' counts are compared within $rq"
# A reset counted as an RDMA failure may fail the disk over to TCP until a probe brings it
# back. The target counts the requests served over TCP in its totals (reads, writes, bytes,
# served) but in none of its RDMA counters: those may fall short of the totals by the
# client's TCP requests (tcp_ios, tcp_bytes) too.
tio=$(cstat tcp_ios); is_num "$tio" || tio=0
tby=$(cstat tcp_bytes); is_num "$tby" || tby=0
[ "$tio" -gt 0 ] && echo "  $tio requests ($tby bytes) went over TCP: the target's RDMA counters are compared within them"
within() { # within CLIENT TARGET [bytes] [MORE]: CLIENT <= TARGET <= CLIENT + rq (bytes: rq MiB) + MORE
  local slack=$rq; [ "${3:-}" = bytes ] && slack=$((rq << 20))
  n_le "$1" "$2" && n_le "$2" $(($1 + slack + ${4:-0}))
}
rdma_of() { # rdma_of RDMA TOTAL [bytes]: within, plus what went over TCP
  if [ "${3:-}" = bytes ]; then within "$1" "$2" bytes "$tby"; else within "$1" "$2" "" "$tio"; fi
}
# A write taken off a reset connection may have been received and not yet pulled: the
# target's writes may exceed its RDMA Reads by the requeued requests too. Pulled bytes may
# exceed the written ones by the requeued requests (pulled, then flushed), and fall short of
# them by the bytes written over TCP.
pulled=$(sum "$(tstat rdma_read_bytes)" "$inl_bytes")
bw=$(tstat bytes_written)
rdma_of "$(sum "$(tstat rdma_reads)" "$t_inl")" "$(tstat writes)" && n_le $((26 << 20)) "$bw" &&
  n_le "$(sub "$bw" "$tby")" "$pulled" && n_le "$pulled" "$(sum "$bw" $((rq << 20)))" &&
  n_le "$c_inl" "$(sum "$t_inl" "$rq")" && n_le "$t_inl" "$(sum "$c_inl" "$rq")"
res $? "target: every write pulled by RDMA Read or inline, at least 26 MiB (writes=$(tstat writes) rdma_reads=$(tstat rdma_reads), $(tstat rdma_read_bytes) bytes; inline_writes=$t_inl, client's $(cstat inline_writes))"
# A read taken off a reset connection may have been received and its RDMA Write flushed: the
# target's reads may exceed its RDMA Writes by the requeued requests.
rdma_of "$(tstat rdma_writes)" "$(tstat reads)" && rdma_of "$(tstat rdma_write_bytes)" "$(tstat bytes_read)" bytes
res $? "target: every read pushed by RDMA Write (reads=$(tstat reads) rdma_writes=$(tstat rdma_writes), $(tstat rdma_write_bytes) bytes)"
# A reset may leave requests the target counted unanswered (their responses flushed), inline
# writes among them; those served over TCP were answered there.
n_le "$(tstat send_with_inv)" "$t_data" && n_le "$(sub "$t_data" $((rq + tio)))" "$(tstat send_with_inv)" &&
  n_le "$(tstat plain_sends)" "$t_nodata" && n_le "$(sub "$t_nodata" $((rq + tio)))" "$(tstat plain_sends)"
res $? "target: every data response but an inline write's a Send-with-Invalidate (send_with_inv=$(tstat send_with_inv) of reads+writes-inline $t_data), data-less ones and inline writes plain Sends (plain_sends=$(tstat plain_sends) of flush+discard+write_zeroes+nop+inline $t_nodata)"
# Every posted response counts once in `served`, with its time in the target (README of the
# userspace tools): means, for the record. Over RDMA, a response is a Send.
served=$(tstat served)
rdma_of "$(tsum send_with_inv plain_sends)" "$served" && n_le "$served" $(($(tsum send_with_inv plain_sends) + tio)) &&
  n_gt "$(tstat service_us)" 0 && n_le "$(tstat backing_us)" "$(tstat service_us)"
res $? "target: served=$served, every response posted (send_with_inv+plain_sends $(tsum send_with_inv plain_sends), and $tio over TCP); mean time in the target $(is_num "$served" && [ "$served" -gt 0 ] && echo $(($(tstat service_us) / served))) us; mean backing I/O $(is_num "$(tstat backing_ops)" && [ "$(tstat backing_ops)" -gt 0 ] && echo $(($(tstat backing_us) / $(tstat backing_ops)))) us"
within "$(cstat reads)" "$(tstat reads)" && within "$(cstat writes)" "$(tstat writes)" &&
  within "$(cstat read_bytes)" "$(tstat bytes_read)" bytes && within "$(cstat write_bytes)" "$(tstat bytes_written)" bytes
res $? "client and target agree: reads $(cstat reads)/$(tstat reads), writes $(cstat writes)/$(tstat writes), bytes read $(cstat read_bytes)/$(tstat bytes_read), written $(cstat write_bytes)/$(tstat bytes_written)"
n_le "$(cstat remote_invalidations)" "$(tstat send_with_inv)" && n_le $(($(tstat send_with_inv) - rq)) "$(cstat remote_invalidations)" &&
  n_eq "$(cstat local_invalidations)" 0 && n_eq "$(cstat rkey_mismatches)" 0
res $? "client: every data response invalidated the request's rkey remotely (remote_invalidations=$(cstat remote_invalidations), target send_with_inv $(tstat send_with_inv)), local_invalidations=$(cstat local_invalidations), rkey_mismatches=$(cstat rkey_mismatches)"
# Keepalive NOPs may land between the two snapshots, so only a bound here.
n_le $(($(tstat send_with_inv) - rq)) "$(cstat responses)" && n_le "$(cstat responses)" $(($(tsum send_with_inv plain_sends) + tio))
res $? "client: responses=$(cstat responses) within [send_with_inv, send_with_inv+plain_sends+tcp_ios] of the target"
bad=
for k in crc_read_errors crc_write_errors crc_retries io_errors timeouts; do
  n_eq "$(cstat $k)" 0 || bad+=" $k=$(cstat $k)"
done
for k in crc_failures bound_violations io_errors rdma_errors resets; do
  n_eq "$(tstat $k)" 0 || bad+=" target:$k=$(tstat $k)"
done
[ -z "$bad" ]
res $? "no CRC error, retry, I/O error or timeout on either side, no reset by the target${bad:+ (got$bad)}"
# No connection reset at all (lib/disk.sh, dk_resets_ok).
dk_resets_ok d60
res $? "no connection reset: $DK_RESETS"
n_gt "$(cstat max_outstanding)" 1 && n_le "$(cstat max_outstanding)" 32
res $? "client: max_outstanding=$(cstat max_outstanding) (more than one request in flight per queue at depth 16, within the target's 32 credits)"

# 3. What landed on the storage VM: 2 MiB of a seeded pattern written at 40 MiB (past fio's
#    32 MiB) must be in the backing file at 40 MiB, not only readable through the driver.
dk_check_backing "$dev" "$back" 40 2
res $? "the backing file on the storage VM holds what was written, where it was written: $DK_BACKING"

# 4. Read-only: the same export mapped with ro reads the same bytes and refuses writes.
# pipefail: a failed read must not pass as the sha256 of nothing.
sum_rw=$(on compute "set -o pipefail; dd if=/dev/$dev bs=1M count=8 iflag=direct status=none | sha256sum") || sum_rw=
dk_unmap "$dev" normal && dk_gone "$dev" 10
res $? "unmap normal after fio: /sys/block/$dev and /dev/$dev gone"
if dk_map_disk d60 vol0 ro; then
  ro=$DK_DEV
  dk_tsnap; w0=$(tstat writes)
  sum_ro=$(on compute "set -o pipefail; dd if=/dev/$ro bs=1M count=8 iflag=direct status=none | sha256sum") || sum_ro=
  out=$(on compute "cat /sys/block/$ro/ro; blockdev --getro /dev/$ro; (dd if=/dev/zero of=/dev/$ro bs=4k count=1 oflag=direct conv=notrunc status=none) 2>&1; echo dd=\$?")
  printf '%s\n' "$out" | indent
  dk_tsnap
  [ "$(head -n2 <<<"$out" | tr '\n' ' ')" = "1 1 " ] && ! grep -q '^dd=0$' <<<"$out" && n_eq "$(tstat writes)" "$w0"
  res $? "map ro: /sys/block/$ro/ro and blockdev --getro are 1; a 4 KiB direct write fails and never reaches the target (writes $w0 -> $(tstat writes))"
  on storage "set -o pipefail; dd if=$back bs=1M count=8 status=none | sha256sum" >"$TB_DIR/$DK_ID.sum-back"
  [ -n "$sum_rw" ] && [ "$sum_ro" = "$sum_rw" ] && [ "${sum_rw%% *}" = "$(cut -d' ' -f1 "$TB_DIR/$DK_ID.sum-back")" ]
  res $? "map ro: the first 8 MiB read the same as through the read-write mapping and as the backing file (${sum_ro%% *})"
  dk_unmap "$ro" normal && dk_gone "$ro" 10
  res $? "unmap normal of the read-only disk"
else
  res 1 "map name=d60 export=vol0 ro"
fi

on compute "rmmod rdmadisk"
res $? "rmmod rdmadisk"
dk_cleanup
