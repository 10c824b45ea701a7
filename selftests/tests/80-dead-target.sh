# A target that dies for good must fail the disk's I/O within the loss timeout, never hang it,
# with buffered writeback in flight (the case that once hung `dd ... conv=fsync` for minutes).
#
# loss_timeout_s=8 with io_timeout_ms=120000 (so nothing but the loss timeout and the health
# check can end the outage), keepalive_ms=2000. A buffered `dd conv=fsync` of 48 MiB runs beside
# a direct-I/O fio; then:
#   A. the target is killed (SIGKILL) and never restarted;
#   B. (a fresh target and mapping) the target is frozen (SIGSTOP, its connections up) and never
#      resumed.
# And C: fast_io_fail_s=3 with loss_timeout_s=never (written as -1, nvme's ctrl_loss_tmo): the
# target killed, I/O fails after about 3 s while the disk keeps reconnecting, and still does
# 15 s on; the target restarted: the disk is live again and I/O works. Then loss_timeout_s=0:
# the target killed again, the disk fails at once, at the first loss, as the knob's
# documentation says.
# D: loss_timeout_s=0 with the target alive: a reset of the serving connection (an injected QP
# error or failed TCP send) fails the disk; it does not reconnect to the target that is there.
#
# Acceptance (A and B): within loss_timeout_s + 30 s of the death, dd's fsync and fio fail
# (non-zero exits), no task is left in D state, the disk is `failed` and stops reconnecting
# (its connection counters stay put), and unmap and rmmod succeed. (C): as above.
# timeout: 1200

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
# shellcheck source-path=SCRIPTDIR source=lib/soak.sh
source "$TB_REPO/selftests/tests/lib/soak.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
# Short: what is checked is that the I/O fails and the disk stops, not how long the wait is.
LOSS=8
MARGIN=30
tr_dmesg_mark

death killed KILL
death frozen STOP

# C: fast_io_fail_s fails I/O early while reconnecting goes on; the target comes back.
back=$(dk_backing fast 64M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d80fast vol0
if res $? "[fast] target; insmod; map: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  tr_set "$dev" fast_io_fail_s=3 io_timeout_ms=120000 keepalive_ms=2000 >/dev/null
  out=$(on compute "cd /sys/block/$dev/rdmadisk && echo -1 >loss_timeout_s && cat loss_timeout_s" 2>&1)
  [ "$out" = never ]
  res $? "[fast] fast_io_fail_s=3; loss_timeout_s=-1 reads back '${out//$'\n'/ }' (want never)"
  on storage "kill -KILL \$(cat $DK_TPID)" >/dev/null
  t0=$SECONDS
  out=$(dk_timed fastio 60 "t0=\$(date +%s%N); dd if=/dev/$dev of=/dev/null bs=4k count=1 iflag=direct skip=100 2>&1; echo dd=\$? ms=\$(( (\$(date +%s%N) - t0) / 1000000 ))")
  printf '%s\n' "$out" | indent
  ms=$(sed -n 's/.*dd=[1-9].* ms=\([0-9]*\)/\1/p' <<<"$out")
  st=$(on compute "cat /sys/block/$dev/rdmadisk/state; grep -o 'fast_io_fails=[0-9]*' /sys/block/$dev/rdmadisk/stats")
  # About 3 s, by the kernel's clock: from the outage's start (the connection's reset, the
  # last one logged before) to the disk's fast_io_fail line. Not before 3 s (the read would
  # have failed for another reason), and within a reconnect's back-off (at most 5 s) and a
  # failed attempt after them. The read itself waited at most that long (issued after the
  # kill).
  fast=$(tr_kmsg_since | awk -v d="d80fast: " '
    function t(l) { sub(/^\[ */, "", l); sub(/\].*/, "", l); return l * 1000 }
    index($0, d "queue ") && /resetting the connection/ && !fail { down = t($0) }
    index($0, d "no connection for 3 s (fast_io_fail_s)") && down && !fail { fail = t($0) }
    END { if (down && fail) printf "%d", fail - down }')
  is_num "$ms" && is_num "$fast" && (( fast >= 3000 && fast <= 10000 && ms <= fast + 500 )) &&
    grep -q '^reconnecting$' <<<"$st" && grep -q 'fast_io_fails=1' <<<"$st"
  res $? "[fast] I/O fails ${fast:-?} ms into the outage by the kernel's log (fast_io_fail_s=3: 3000-10000), a read issued meanwhile after ${ms:-?} ms, the disk still reconnecting (${st//$'\n'/, })"
  sleep $((t0 + 15 - SECONDS > 0 ? t0 + 15 - SECONDS : 0))
  st=$(tr_get "$dev" state)
  [ "$st" = reconnecting ] && ! tr_kmsg_since | grep -q 'd80fast: no connection for .*loss_timeout_s'
  res $? "[fast] loss_timeout_s=never: $((SECONDS - t0)) s into the outage the disk is still '$st' (want reconnecting), nothing failed it"
  dk_target_start --export "vol0=$back" >/dev/null
  tr_wait back "$dev" 90 any
  res $? "[fast] the target restarted: the disk is live again ($TR_WAIT)"
  dk_fio after "--name=after --filename=/dev/$dev --rw=randwrite --bs=4k --size=1M --iodepth=4 --verify=crc32c --do_verify=1"
  res $? "[fast] I/O works again: $FIO_SUM"
  tr_dmesg_mark
  tr_set "$dev" loss_timeout_s=0 >/dev/null
  on storage "kill -KILL \$(cat $DK_TPID)" >/dev/null
  t0=$SECONDS
  st=$(dk_timed zero 60 "$DK_VM_DEFS
a=/sys/block/$dev/rdmadisk; end=\$((EPOCHSECONDS + 30)); s=
while [ \$EPOCHSECONDS -lt \$end ]; do read -r s <\$a/state; [ \"\$s\" = failed ] && break; pause 0.2; done
echo \$s" | head -n1)
  n=$(tr_kmsg_since | grep -c 'd80fast: no connection for 0 s (loss_timeout_s)')
  [ "$st" = failed ] && n_eq "$n" 1
  res $? "[fast] loss_timeout_s=0: the target killed again, the disk is '$st' after $((SECONDS - t0)) s (want failed, at the first loss, without reconnecting; $n kernel line saying so)"
  dk_unmap_rmmod 30 "$dev"
  res $? "[fast] unmap normal; rmmod"
fi

# D: loss_timeout_s=0, the target up.
back=$(dk_backing zero 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d80zero vol0
if res $? "[zero] target; insmod; map: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  tr_dmesg_mark
  tr_set "$dev" loss_timeout_s=0 keepalive_ms=2000 >/dev/null
  r0=$(tr_stat "$dev" reconnects)
  on compute "f=/sys/kernel/debug/rdmadisk/$dev; echo 1 >\$f/qp_error_every; echo 1 >\$f/fail_tcp_send_every" >/dev/null
  t0=$SECONDS
  st=$(dk_timed zerolive 60 "$DK_VM_DEFS
dd if=/dev/$dev of=/dev/null bs=4k count=1 iflag=direct skip=7 2>/dev/null
a=/sys/block/$dev/rdmadisk; end=\$((EPOCHSECONDS + 30)); s=
while [ \$EPOCHSECONDS -lt \$end ]; do read -r s <\$a/state; [ \"\$s\" = failed ] && break; pause 0.2; done
echo \$s" | head -n1)
  sleep 5
  st2=$(tr_get "$dev" state) r1=$(tr_stat "$dev" reconnects)
  n=$(tr_kmsg_since | grep -c 'd80zero: no connection for 0 s (loss_timeout_s)')
  [ "$st" = failed ] && [ "$st2" = failed ] && n_eq "$n" 1 && n_eq "$r0" "$r1"
  res $? "[zero] loss_timeout_s=0, the target alive: an injected reset fails the disk ('$st' after $((SECONDS - t0 - 5)) s, '$st2' 5 s on; reconnects $r0 -> $r1; $n kernel line saying so)"
  dk_unmap_rmmod 30 "$dev"
  res $? "[zero] unmap normal; rmmod"
fi
tr_splat_check
dk_cleanup
