# Requests a live target never answers, and connections that must not be reset: the cases
# where an earlier design hung I/O for ever or reset a healthy disk.
#   A. stuck region: the target (--stall-sector) never answers reads or writes of one sector but
#      answers everything else, keepalives included. io_timeout_ms=3000, loss_timeout_s=8: a
#      read of that sector times out, the connection is reset and the read reissued, again and
#      again; once it was first issued more than loss_timeout_s ago it fails (EIO), while
#      verified I/O elsewhere on the disk carries on and the disk stays live.
#   B. no credits: the target grants none back (--grant-no-credits, 8 at attach), keepalives
#      off. A connection that runs out, with nothing in flight, is reset after an I/O timeout
#      and the new one brings fresh credits: verified fio finishes, with no error.
#   C. TCP after a quiet spell: the disk on TCP, keepalive_ms=1000, every response delayed
#      1000 ms by the client's fault injection; the disk idle for 5 s, then one read. Its wait
#      counts from its submission, not from the last response before the quiet spell: no reset.
#   D. a map of 4 queues to a frozen target (SIGSTOP: connections accepted, never answered)
#      fails within 10 s per transport tried (one connection's budget), not 4 x 10 s each.
# timeout: 900

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark
back=$(dk_backing vol0 16M)

# A. A stuck region. Sector 8192 (4 MiB); the verified fio runs at 8-12 MiB.
STALL=8192
dk_target_start --export "vol0=$back" --stall-sector $STALL >/dev/null && dk_load && dk_map_disk d84 vol0
if res $? "[stuck] target (--stall-sector $STALL); insmod; map: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  tr_set "$dev" io_timeout_ms=3000 loss_timeout_s=8 keepalive_ms=1000 >/dev/null
  res $? "[stuck] io_timeout_ms=3000 loss_timeout_s=8 keepalive_ms=1000"
  dk_fio_bg other "--name=other --filename=/dev/$dev --rw=randrw --bs=4k --offset=8M --size=4M --iodepth=4 --verify=crc32c --do_verify=1 --time_based --runtime=25"
  out=$(dk_timed stuck 90 "t0=\$(date +%s%N); dd if=/dev/$dev of=/dev/null bs=4k count=1 skip=$((STALL / 8)) iflag=direct 2>&1; echo dd=\$? ms=\$(( (\$(date +%s%N) - t0) / 1000000 ))")
  printf '%s\n' "$out" | indent
  ms=$(sed -n 's/.*dd=[1-9][0-9]* ms=\([0-9]*\)/\1/p' <<<"$out")
  # Issued at 0, timed out and reissued every 3 s: failed at the first timeout after 8 s.
  is_num "$ms" && (( ms <= 30000 ))
  res $? "[stuck] the read of sector $STALL failed after ${ms:-?} ms (want an error within loss_timeout_s + 2 x io_timeout_ms + 8 s)"
  n=$(tr_kmsg_since | grep -c "still unanswered .* after it was first sent")
  n_gt "$n" 0
  res $? "[stuck] the driver said why ($n lines: still unanswered after loss_timeout_s)"
  dk_fio_wait other 120 >/dev/null
  res $? "[stuck] verified I/O elsewhere on the disk went on, with no error: $FIO_SUM"
  dk_tsnap
  st=$(tr_get "$dev" state); ie=$(tr_stat "$dev" io_errors)
  [ "$st" = live ] && n_eq "$ie" 1 && n_gt "$(tstat stalled_requests)" 1
  res $? "[stuck] the disk is '$st', io_errors=$ie (want live, 1); the target left $(tstat stalled_requests) copies unanswered"
  dk_unmap_rmmod 30 "$dev"
  res $? "[stuck] unmap normal; rmmod"
fi

# B. No credits granted back, keepalives off.
dk_target_start --export "vol0=$back" --grant-no-credits --credits 8 >/dev/null && dk_load && dk_map_disk d84b vol0
if res $? "[credits] target (--grant-no-credits --credits 8); insmod; map: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  tr_set "$dev" keepalive_ms=0 io_timeout_ms=3000 >/dev/null
  res $? "[credits] keepalive_ms=0 io_timeout_ms=3000"
  tr_dmesg_mark
  dk_fio_bg nocred "--name=nocred --filename=/dev/$dev --rw=randwrite --bs=64k --size=512k --iodepth=4 --verify=crc32c --do_verify=1"
  dk_fio_wait nocred 180 >/dev/null
  res $? "[credits] verified fio (8 writes, 8 reads) finished: $FIO_SUM"
  n=$(tr_kmsg_since | grep -c 'the target grants no credits')
  ie=$(tr_stat "$dev" io_errors)
  n_gt "$n" 0 && n_eq "$ie" 0
  res $? "[credits] connections out of credits were reset ($n times) and io_errors=$ie"
  dk_unmap_rmmod 30 "$dev"
  res $? "[credits] unmap normal; rmmod"
fi

# C. TCP after a quiet spell, with slow responses.
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d84c vol0
if res $? "[quiet] target; insmod; map: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  F=/sys/kernel/debug/rdmadisk/$dev
  tr_set "$dev" transport=tcp keepalive_ms=1000 >/dev/null && tr_wait tcp "$dev" 60 tcp >/dev/null
  res $? "[quiet] on TCP with keepalive_ms=1000 ($TR_WAIT)"
  on compute "echo 1000 >$F/delay_ms && echo 1 >$F/delay_response_every" >/dev/null
  before=$(tr_stat "$dev" tcp_connects)
  tr_dmesg_mark
  sleep 5
  out=$(dk_timed quiet 60 "dd if=/dev/$dev of=/dev/null bs=4k count=1 skip=7 iflag=direct 2>&1")
  rc=$?
  sleep 2
  on compute "echo 0 >$F/delay_response_every" >/dev/null
  after=$(tr_stat "$dev" tcp_connects)
  n=$(tr_kmsg_since | grep -c 'no response while requests are in flight')
  [ $rc = 0 ] && n_eq "$before" "$after" && [ "$n" = 0 ]
  res $? "[quiet] a read answered after 1 s, 5 s after the last response: no reset (tcp_connects $before -> $after, $n resets logged)"
  [ $rc = 0 ] || printf '%s\n' "$out" | indent
  dk_unmap_rmmod 30 "$dev"
  res $? "[quiet] unmap normal; rmmod"
fi

# D. A frozen target: accepted, never answered.
dk_target_start --export "vol0=$back" >/dev/null && dk_load
res $? "[frozen] target; insmod"
on storage "kill -STOP \$(cat $DK_TPID)" >/dev/null
out=$(dk_timed frozen 120 "$(dk_map_cmd "name=d84d addr=$DK_S export=vol0 queues=4")")
on storage "kill -CONT \$(cat $DK_TPID)" >/dev/null
printf '%s\n' "$out" | grep -E '^rc=|mapping|connecting' | indent
secs=$(sed -n 's/^rc=[1-9][0-9]* secs=\([0-9]*\) err=.*/\1/p' <<<"$out" | head -n1)
is_num "$secs" && (( secs <= 30 ))
res $? "[frozen] map of 4 queues to a frozen target failed after ${secs:-?} s (want at most 30: 10 s per transport, plus slack)"

tr_splat_check
dk_cleanup
