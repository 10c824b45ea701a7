# The module's first RDMA conversation: /sys/class/rdmadisk/ctl/probe connects to the userspace
# target with a Hello, logs the HelloReply, sends one NOP and waits for its response, then tears
# everything down. Also (bad input is 79-bad-input.sh's corpus): refusals and
# unreachable targets fail within the probe's 10 s budget, and the module unloads cleanly.

UT=$TB_REPO/userspace-tools
T=$CARGO_TARGET_DIR/release/rdmadisk-target
S=$TB_STORAGE_ADDR
ko=$TB_REPO/rdmadisk.ko
probe=/sys/class/rdmadisk/ctl/probe
IMG=$TB_DIR/probe50.img
LOG=$TB_DIR/target50.log
STATS=$TB_DIR/target50.stats
PIDF=$TB_DIR/target50.pid

res() { # res STATUS DESCRIPTION
  if [ "$1" = 0 ]; then echo "ok - $2 [${SECONDS}s]"; else echo "not ok - $2 [${SECONDS}s]"; fi
}
# probe_cmd OPTIONS: a compute-side snippet that writes OPTIONS to the probe file and prints
# "rc=N secs=N" and the write's error text; dmesg lines it caused follow "--- dmesg".
probe_cmd() {
  printf '%s' "
n=\$(dmesg | wc -l); t0=\$(date +%s)
out=\$( (echo '$1' >$probe) 2>&1 ); rc=\$?
echo \"rc=\$rc secs=\$((\$(date +%s) - t0)) err=\$out\"
echo '--- dmesg'; dmesg | tail -n +\$((n + 1)) | grep rdmadisk"
}

if ! (cd "$UT" && nice -n 10 cargo build -q --release -p rdmadisk-target) >&2; then
  echo "not ok - build the userspace target"
  return 0 2>/dev/null || exit 0
fi

on storage "
truncate -s 16M $IMG && rm -f $STATS
setsid $T --listen $S --rdma-port 7700 --tcp-port 7701 --export disk0=$IMG --allow $TB_COMPUTE_ADDR \
  --no-direct --stats-file $STATS >$LOG 2>&1 </dev/null &
echo \$! >$PIDF
for i in \$(seq 100); do grep -q 'rdma listening' $LOG && exit 0; sleep 0.2; done
cat $LOG; exit 1" >/dev/null
res $? "target listens on rdma_cm $S:7700 with a 16 MiB export disk0"

on compute "insmod $ko && test -e $probe && [ \$(stat -c %a $probe) = 200 ]"
res $? "module loads; $probe is write-only"

# 1. The handshake and a NOP.
out=$(on compute "$(probe_cmd "addr=$S port=7700 export=disk0")" 2>&1)
printf '%s\n' "$out" | sed 's/^/  /'
grep -q '^rc=0 ' <<<"$out" &&
  grep -qE "probe $S:7700: connected on rxe0 to export disk0: capacity 32768 sectors, block size [0-9]+/[0-9]+, max_io [0-9]+ bytes, max_segments [0-9]+, queue_depth [0-9]+, initial_credits [1-9][0-9]*, features 0x[0-9a-f]+" <<<"$out"
res $? "probe connects with a Hello and logs the HelloReply (capacity 32768 sectors, credits > 0)"
grep -qE "probe $S:7700: NOP answered: tag 1 status ok, [0-9]+ credits granted, 32 bytes, invalidate no" <<<"$out"
res $? "probe sends a NOP over the QP and receives its response (plain Send, tag 1, status ok)"
on storage "kill -USR1 \$(cat $PIDF); sleep 1" >/dev/null
nops=$(sed -n 's/^nops=//p' "$STATS")
conns=$(sed -n 's/^rdma_connections=//p' "$STATS")
[ "$nops" = 1 ] && [ "$conns" = 1 ]
res $? "target counted one RDMA connection and one NOP (rdma_connections=$conns nops=$nops)"
grep -q "rdma disconnect\|disconnected\|closed" "$LOG" && echo "  target log: $(grep -m1 -i 'disconnect\|closed' "$LOG")"

# 2. Bad input is tests/79-bad-input.sh's corpus.

# 3. Refusals: an unknown export (the target rejects with its HelloReply), no listener (the
#    CM rejects: a probe says so apart, as a map tries TCP then).
out=$(on compute "$(probe_cmd "addr=$S port=7700 export=nosuch")" 2>&1)
grep -q '^rc=1 .*Connection refused' <<<"$out" && grep -q "REJECTED by the target: NoSuchExport" <<<"$out"
res $? "unknown export: ECONNREFUSED, dmesg shows the target's NoSuchExport reject"
printf '%s\n' "$out" | grep -v '^---' | sed 's/^/  /'
out=$(on compute "$(probe_cmd "addr=$S port=7799 export=disk0")" 2>&1)
grep -q '^rc=1 .*Protocol not supported' <<<"$out" && grep -q "REJECTED by the CM: no RDMA listener" <<<"$out"
res $? "no listener on the port: EPROTONOSUPPORT (the CM's reject, not the target's refusal)"
printf '%s\n' "$out" | grep -v '^---' | sed 's/^/  /'

# 4. Nobody at the address: fails within the 10 s budget (address resolution times out).
out=$(on compute "$(probe_cmd "addr=192.0.2.99 port=7700 export=disk0")" 2>&1)
secs=$(sed -n 's/^rc=[0-9]* secs=\([0-9]*\) .*/\1/p' <<<"$out" | head -n1)
grep -qE '^rc=1 .*(Connection timed out|No route to host)' <<<"$out" && [ -n "$secs" ] && [ "$secs" -le 12 ]
res $? "unreachable address: ETIMEDOUT/EHOSTUNREACH after ${secs}s (budget 10 s)"
printf '%s\n' "$out" | grep -v '^---' | sed 's/^/  /'

# 5. The same probe still works after all those failures, and the module unloads cleanly.
out=$(on compute "$(probe_cmd "addr=$S export=disk0")" 2>&1)
grep -q '^rc=0 ' <<<"$out" && grep -q "NOP answered" <<<"$out"
res $? "a second probe (default port) succeeds after the failures"
on compute "rmmod rdmadisk && ! test -e /sys/class/rdmadisk && dmesg | tail -n 5 | grep -q 'rdmadisk: unloading'"
res $? "rmmod rdmadisk after the probes"

on storage "
p=\$(cat $PIDF); kill -TERM \$p
for i in \$(seq 100); do kill -0 \$p 2>/dev/null || break; sleep 0.2; done
! kill -0 \$p 2>/dev/null" >/dev/null
res $? "target stops on SIGTERM"
on compute "rmmod rdmadisk 2>/dev/null; true" >/dev/null
on storage "rm -f $IMG; true" >/dev/null
