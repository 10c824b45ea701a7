# The userspace target and test client over RDMA (rxe) between the two VMs, plus TCP, the
# allow-list and graceful shutdown. The storage VM runs rdmadisk-target on a brd RAM disk (a
# tmpfs file where brd is missing); the compute VM runs rdmadisk-testclient.
#
# Acceptance: mixed 4 KiB..1 MiB reads and writes with data verified (150 in make check, to keep
# it inside its time budget; RDT30_COUNT=1000 runs the original 1000); the target's counters
# show every write pulled by RDMA Read and every read pushed by RDMA Write; every response
# arrives with the invalidate flag and the request's rkey; the client never exceeds its credits.

# shellcheck shell=bash disable=SC2317 # "return || exit": sourced by run.sh
UT=$TB_REPO/userspace-tools
BIN=$CARGO_TARGET_DIR/release
T=$BIN/rdmadisk-target
C=$BIN/rdmadisk-testclient
S=$TB_STORAGE_ADDR
STATS=$TB_DIR/target30.stats
LOG=$TB_DIR/target30.log
PIDF=$TB_DIR/target30.pid
COUNT=${RDT30_COUNT:-150}

res() { # res STATUS DESCRIPTION
  if [ "$1" = 0 ]; then echo "ok - $2 [${SECONDS}s]"; else echo "not ok - $2 [${SECONDS}s]"; fi
}
stat_of() { sed -n "s/^$1=//p" "$STATS"; }
n_pos() { [[ ${1:-} =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ]; }
field() { # field NAME TEXT: value of NAME=VALUE in TEXT
  sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$2" | head -n1
}

if ! (cd "$UT" && nice -n 10 cargo build -q --release -p rdmadisk-target -p rdmadisk-testclient) >&2; then
  echo "not ok - build the userspace target and test client"
  return 0 2>/dev/null || exit 0
fi

# Backing store: 64 MiB brd RAM disk, or a tmpfs file.
# shellcheck disable=SC2016 # expanded in the VM
backing=$(on storage '
if [ ! -b /dev/ram0 ]; then modprobe brd rd_nr=1 rd_size=65536 2>/dev/null; fi
if [ -b /dev/ram0 ] && [ "$(blockdev --getsize64 /dev/ram0)" -ge 67108864 ]; then echo /dev/ram0; else
  mkdir -p /run/rdt30 && mount -t tmpfs -o size=80m tmpfs /run/rdt30 && truncate -s 64M /run/rdt30/disk0.img && echo /run/rdt30/disk0.img
fi')
echo "backing store: $backing"

start_target() { # start_target EXTRA-ARGS...: (re)starts the target, waits for its RDMA listener
  on storage "
if [ -s $PIDF ]; then p=\$(cat $PIDF); kill -TERM \$p 2>/dev/null; for i in \$(seq 50); do kill -0 \$p 2>/dev/null || break; sleep 0.2; done; fi
rm -f $STATS
setsid $T --listen $S --rdma-port 7700 --tcp-port 7701 --export disk0=$backing --allow $TB_COMPUTE_ADDR \
  --stats-file $STATS $* >$LOG 2>&1 </dev/null &
echo \$! >$PIDF
for i in \$(seq 100); do grep -q 'rdma listening' $LOG && exit 0; sleep 0.2; done
cat $LOG; exit 1"
}

if start_target; then
  echo "ok - target listens on rdma_cm $S:7700 and tcp $S:7701"
else
  echo "not ok - target listens on rdma_cm $S:7700 and tcp $S:7701"
  return 0 2>/dev/null || exit 0
fi

# 1. The acceptance run.
out=$(on compute "timeout 900 $C --transport rdma --target $S:7700 --export disk0 --count $COUNT --queue-depth 8 --span-mib 32 --seed 30" 2>&1)
rc=$?
acc_rc=$rc
printf '%s\n' "$out" | sed 's/^/  /'
on compute "rdma statistic show link rxe0/1" | sed 's/^/  compute /'
res $rc "rdma: $COUNT mixed 4 KiB-1 MiB reads/writes with flush, discard, write-zeroes, FUA: data verified ($(grep -o 'RESULT: .*' <<<"$out"))"
on storage "kill -USR1 \$(cat $PIDF); sleep 1" >/dev/null
sed 's/^/  target: /' "$STATS"
c_reads=$(field reads "$(grep '^ops:' <<<"$out")")
c_writes=$(field writes "$(grep '^ops:' <<<"$out")")
c_flush=$(field flushes "$(grep '^ops:' <<<"$out")")
c_disc=$(field discards "$(grep '^ops:' <<<"$out")")
c_wz=$(field write_zeroes "$(grep '^ops:' <<<"$out")")
[ -n "$c_writes" ] && [ "$(stat_of writes)" = "$c_writes" ] && [ "$(stat_of rdma_reads)" = "$c_writes" ] &&
  [ "$(stat_of rdma_read_bytes)" = "$(stat_of bytes_written)" ]
res $? "target: every write pulled by RDMA Read (writes=$(stat_of writes) rdma_reads=$(stat_of rdma_reads), $(stat_of rdma_read_bytes) bytes)"
[ -n "$c_reads" ] && [ "$(stat_of reads)" = "$c_reads" ] && [ "$(stat_of rdma_writes)" = "$c_reads" ] &&
  [ "$(stat_of rdma_write_bytes)" = "$(stat_of bytes_read)" ]
res $? "target: every read pushed by RDMA Write (reads=$(stat_of reads) rdma_writes=$(stat_of rdma_writes), $(stat_of rdma_write_bytes) bytes)"
[ -n "$c_reads" ] && [ "$(stat_of send_with_inv)" = "$((c_reads + c_writes))" ] &&
  [ "$(stat_of plain_sends)" = "$((c_flush + c_disc + c_wz))" ]
res $? "target: data responses sent with invalidate (send_with_inv=$(stat_of send_with_inv)), the rest plain (plain_sends=$(stat_of plain_sends))"
inv_ok=$(field responses_with_inv_ok "$out")
echo "  rxe reports the invalidate flag as IBV_WC_WITH_INV on $(field inv_flag_as_IBV_WC_WITH_INV "$out") and as the kernel's bit 2 on $(field inv_flag_as_rxe_kernel_bit2 "$out") completions"
[ "$inv_ok" = "$((c_reads + c_writes))" ] && [ "$(field responses_missing_inv "$out")" = 0 ] &&
  [ "$(field responses_wrong_invalidated_rkey "$out")" = 0 ] && [ "$(field plain_responses_with_unexpected_inv "$out")" = 0 ]
res $? "client: every data response arrived with IBV_WC_WITH_INV and the request's rkey ($inv_ok of $((c_reads + c_writes)))"
rebinds=$(field mw_rebinds_after_invalidation "$out")
[ -n "$rebinds" ] && [ "$rebinds" -gt 0 ] && [ $rc = 0 ]
res $? "client: $rebinds type-2 MW rebinds succeeded, each possible only after the previous rkey was invalidated"
grep -q 'credits: initial=32 max_in_flight=[0-9]* exceeded=no' <<<"$out" && [ "$(field recv_credit_violations "$out")" = 0 ]
res $? "client: never exceeded its credits ($(grep -o 'credits: .*' <<<"$out"))"
[ "$(stat_of crc_failures)" = 0 ] && [ "$(stat_of resets)" = 0 ] && [ "$(stat_of rdma_errors)" = 0 ] && [ "$(stat_of io_errors)" = 0 ]
res $? "target: no CRC failures, resets, RDMA or I/O errors"

# 1b. The same over memory windows with I/Os of 4-64 KiB (few retransmissions on this bed).
out=$(on compute "timeout 900 $C --transport rdma --target $S:7700 --export disk0 --count $COUNT --max-size 65536 --queue-depth 8 --span-mib 32 --seed 35" 2>&1)
rc=$?
[ $rc = 0 ] && [ "$(field responses_missing_inv "$out")" = 0 ] && [ "$(field responses_wrong_invalidated_rkey "$out")" = 0 ]
res $? "rdma: $COUNT mixed 4-64 KiB I/Os over type-2 MWs, every data response invalidating its rkey ($(grep -o 'RESULT: .*' <<<"$out"), $(field responses_with_inv_ok "$out") invalidations, $(field mw_rebinds_after_invalidation "$out") rebinds)"

# 2. Error statuses on a live RDMA connection, then a dead-rkey probe on another one.
out=$(on compute "timeout 300 $C --transport rdma --target $S:7700 --export disk0 --count 40 --negative --seed 31" 2>&1)
rc=$?
echo "$out" | grep -E '^(ok|not ok) - negative|RESULT' | sed 's/^/  /'
res $rc "rdma: out-of-range and invalid requests answered with error statuses, connection kept"
resets_before=$(stat_of resets)
out=$(on compute "timeout 300 $C --transport rdma --target $S:7700 --export disk0 --count 20 --seed 32 --probe-dead-rkey" 2>&1)
rc=$?
echo "$out" | grep -E 'dead rkey|RESULT' | sed 's/^/  /'
on storage "kill -USR1 \$(cat $PIDF); sleep 1" >/dev/null
[ $rc = 0 ] && grep -q '^ok - dead rkey probe' <<<"$out"
res $? "rdma: the target's RDMA Write to an already invalidated rkey is refused (target rdma_errors=$(stat_of rdma_errors), resets $resets_before -> $(stat_of resets))"

# 3. The same workload over TCP from the compute VM.
out=$(on compute "timeout 600 $C --transport tcp --target $S:7701 --export disk0 --count $((COUNT / 3)) --queue-depth 8 --span-mib 32 --seed 33" 2>&1)
rc=$?
res $rc "tcp: $((COUNT / 3)) mixed reads/writes verified ($(grep -o 'RESULT: .*' <<<"$out"))"

# 4. Allow-list: a second address on the compute NIC is refused, over RDMA and TCP. A refusal
#    counts only if the target logged it and is still running (a crashed target refuses too).
nic=$(cat "$TB_DIR/compute.nic")
target_alive() { on storage "p=\$(cat $PIDF) && kill -0 \$p && ! grep -q '^State:[[:space:]]*[ZX]' /proc/\$p/status" >/dev/null 2>&1; }
on compute "ip addr add 192.0.2.11/24 dev $nic; sleep 1" >/dev/null
for tr in rdma tcp; do
  port=7700; [ $tr = tcp ] && port=7701
  out=$(on compute "timeout 120 $C --transport $tr --target $S:$port --bind 192.0.2.11 --expect-refused not-allowed" 2>&1)
  rc=$?
  printf '%s\n' "$out" | tail -n 3 | sed 's/^/  /'
  logged=$(grep -c "$tr: refused connection from 192\.0\.2\.11:[0-9]*: address not on the allow-list" "$LOG")
  alive=yes; target_alive || alive=no
  [ $rc = 0 ] && n_pos "$logged" && [ $alive = yes ]
  res $? "$tr: a client at 192.0.2.11 (not on the allow-list) is refused with NotAllowed (client exit $rc); the target logged it ($logged lines) and is still running ($alive)"
done
on compute "ip addr del 192.0.2.11/24 dev $nic" >/dev/null

# 5. Four credits per connection: the client never has more than four requests in flight.
if start_target --credits 4; then
  out=$(on compute "timeout 600 $C --transport rdma --target $S:7700 --export disk0 --count 100 --queue-depth 16 --max-size 262144 --seed 34" 2>&1)
  rc=$?
  echo "$out" | grep -E '^credits|RESULT' | sed 's/^/  /'
  [ $rc = 0 ] && grep -q 'credits: initial=4 max_in_flight=4 exceeded=no' <<<"$out"
  res $? "rdma with --credits 4: 100 verified I/Os at queue depth 16, never more than 4 in flight"
else
  echo "not ok - restart the target with --credits 4"
fi

# Diagnostic, only when the acceptance run failed: the same workload with the data MR's own
# rkey and plain-Send responses (no memory windows, no invalidation), to tell a window or
# invalidation problem from a transport one. Reported as a comment, not a test.
if [ "$acc_rc" != 0 ] && start_target --no-invalidate; then
  out=$(on compute "timeout 900 $C --transport rdma --mr-rkey --target $S:7700 --export disk0 --count $COUNT --queue-depth 8 --span-mib 32 --seed 30" 2>&1)
  echo "  diagnostic: same workload with plain MR rkeys and no invalidation: exit $?, $(grep -o 'RESULT: .*' <<<"$out")"
  on compute "rdma statistic show link rxe0/1" | sed 's/^/  diagnostic: compute /'
fi

# 6. SIGTERM: finish, fsync, exit 0.
on storage "
p=\$(cat $PIDF); kill -TERM \$p
for i in \$(seq 100); do kill -0 \$p 2>/dev/null || break; sleep 0.2; done
! kill -0 \$p 2>/dev/null && grep -q 'exports synced' $LOG" >/dev/null
res $? "target exits on SIGTERM after syncing its exports"
tail -n 3 "$LOG" | sed 's/^/  target log: /'
on storage "umount /run/rdt30 2>/dev/null; true" >/dev/null
