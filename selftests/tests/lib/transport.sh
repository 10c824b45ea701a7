# shellcheck shell=bash disable=SC2034 # TR_* are for the tests that source this
# Helpers for the transport and failure tests (67-86, 89, 90, 95), lib/soak.sh, the benchmarks
# (bench/peers.sh, bench/tcp-vs-rdma.sh) and run.sh's clean-up after a killed test: the
# RDMA <-> TCP switch knobs, waits on the disk's transport with a bounded deadline, fio in
# verified rounds that run until told to stop, the longest completion gap during a fault, the
# compute VM's rxe device, and kernel splats since a mark.
# Sourced after lib/disk.sh:  source "$TB_REPO/selftests/tests/lib/transport.sh"
#
# The per-disk files (/sys/block/rdmadiskN/rdmadisk/): transport (rw: auto|rdma|tcp),
# active_transport (ro: rdma|tcp|none), session (ro: rdma|draining-to-tcp|tcp|probing|
# draining-to-rdma), the policy knobs, and stats with failovers failbacks rdma_ios rdma_bytes
# tcp_ios tcp_bytes switch_requeued probes probe_failures tcp_connects.

TR_RXE=rxe0     # the compute VM's soft-RoCE device, as vm/agent.sh creates it
TR_STATS_NEW="failovers failbacks rdma_ios rdma_bytes tcp_ios tcp_bytes switch_requeued probes probe_failures tcp_connects"

tr_nic() { cat "$TB_DIR/compute.nic"; }

# tr_get DEV FILE: one per-disk file's contents (empty if it cannot be read)
tr_get() { on compute "$DK_VM_DEFS
show /sys/block/$1/rdmadisk/$2" 2>/dev/null; }

# tr_set DEV FILE=VALUE...: writes each value; status 0 if every write succeeded and reads back
tr_set() {
  local dev=$1 kv s=
  shift
  for kv; do s+="echo '${kv#*=}' >${kv%%=*} && [ \"\$(<${kv%%=*})\" = '${kv#*=}' ] || { echo \"${kv%%=*}: wrote '${kv#*=}', reads \$(<${kv%%=*})\"; exit 1; }
"; done
  on compute "cd /sys/block/$dev/rdmadisk && $s"
}

# tr_stat DEV KEY...: the values of stats keys, space separated (from one read)
tr_stat() {
  local dev=$1 s k out=
  shift
  s=$(on compute "$DK_VM_DEFS
show /sys/block/$dev/rdmadisk/stats" 2>/dev/null)
  for k; do out+="$(kv "$k" "$s") "; done
  echo "${out% }"
}

# tr_wait_cmd DEV SECONDS WANT [KEY BASE]: a compute-side snippet that polls every 0.2 s until
# active_transport reads WANT (any: rdma or tcp) and, with KEY, stats KEY > BASE (KEY ios:
# rdma_ios + tcp_ios), for at most SECONDS. It prints
# a progress line every 5 s, then "WAIT ok|timeout ms=N active=A session=S KEY=V" where ms is
# the time from the snippet's start, or from \$T0 (date +%s%N) if an earlier snippet set it.
# The loop starts no program: under TCG with the debug kernel a fork and exec costs the VM
# 0.2-1 s, so a loop of cat, awk, date and sleep polled every few seconds, not every 0.2, and
# took CPU from the code under test. The pause reads the agent's FIFO, which nobody writes.
tr_wait_cmd() {
  local a=/sys/block/$1/rdmadisk
  printf '%s' "$DK_VM_DEFS
now_us; t0=\$((\${T0:-\$((us * 1000))} / 1000)); last=0; r=timeout
while :; do
  act=; ses=; read -r act 2>/dev/null <$a/active_transport; read -r ses 2>/dev/null <$a/session
  v=
  case '${4:-}' in '') ;; ios) ios_sum $a/stats; v=\$S ;; *) stat_of $a/stats '${4:-}'; v=\$V ;; esac
  now_us; ms=\$(( (us - t0) / 1000 ))
  if { [ \"\$act\" = '$3' ] || { [ '$3' = any ] && [ \"\$act\" != none ] && [ -n \"\$act\" ]; }; } && { [ -z '${4:-}' ] || [ \"\${v:-0}\" -gt '${5:-0}' ]; }; then r=ok; break; fi
  [ \$ms -ge $(($2 * 1000)) ] && break
  if [ \$((ms / 5000)) -gt \$last ]; then last=\$((ms / 5000)); echo \"  ... \${ms} ms: active_transport=\$act session=\$ses${4:+ $4=\$v}\"; fi
  pause 0.2
done
echo \"WAIT \$r ms=\$ms active=\$act session=\$ses${4:+ $4=\$v}\""
}

# tr_wait TAG DEV SECONDS WANT [KEY BASE]: runs tr_wait_cmd in the compute VM's background
# (dk_timed, so a read that blocks in the kernel cannot wedge the VM) and prints its progress.
# TR_PRE, if set, is a snippet run first (it may set T0, print lines, or exit non-zero).
# Sets TR_MS (ms waited), TR_WAIT (the WAIT line) and TR_OUT (all output). Status 0 if the
# condition was met.
tr_wait() {
  local out
  out=$(dk_timed "$1" $(($3 + 120)) "${TR_PRE:-}
$(tr_wait_cmd "$2" "$3" "$4" "${5:-}" "${6:-}")")
  TR_OUT=$out
  grep '^  \.\.\. ' <<<"$out"
  TR_WAIT=$(grep '^WAIT ' <<<"$out" | tail -n1)
  TR_MS=$(word ms "$TR_WAIT")
  [ "$(cut -d' ' -f2 <<<"$TR_WAIT")" = ok ]
}

# ---------------------------------------------------------------- fio in verified rounds
# A round is one fio run (its write phase, then its verify phase: every block written in the
# round is read back and checked); rounds follow each other until $b.stop exists, so the I/O
# spans a drill of unknown length and ends cleanly (a signal would fail fio). Each round's
# output is $TB_DIR/<test>.fio-TAG.rN.{out,log,rc}; the round number seeds fio.

tr_rounds_start() { # tr_rounds_start TAG FIO-ARGS: starts the rounds in the compute VM's background
  local tag=$1 b=$TB_DIR/$DK_ID.fio-$1; shift
  rm -f "$b".r*.out "$b".r*.log "$b".r*.rc "$b.stop" "$b.done" "$b.pid"
  printf '%s\n' "n=0
$(dk_fio_devcheck "$b.r1.rc" "$b.r1.log" "$*" | sed "s|exit 1;|echo 0 >$b.done; exit 1;|")
while [ ! -e $b.stop ] && [ \$n -lt ${TR_MAX_ROUNDS:-500} ]; do
  n=\$((n + 1))
  timeout ${DK_FIO_TIMEOUT:-600} fio $DK_FIO_BASE --output=$b.r\$n.out --randseed=\$n $* >$b.r\$n.log 2>&1
  echo \$? >$b.r\$n.rc
done
echo \$n >$b.done" >"$b.sh"
  on compute "setsid bash $b.sh </dev/null >/dev/null 2>&1 & echo \$! >$b.pid"
}

tr_rounds_count() { # tr_rounds_count TAG: rounds finished so far
  local n=0 f
  for f in "$TB_DIR/$DK_ID.fio-$1".r*.rc; do [ -e "$f" ] && n=$((n + 1)); done
  echo $n
}

tr_rounds_running() { [ ! -e "$TB_DIR/$DK_ID.fio-$1.done" ]; }

# tr_rounds_stop TAG SECONDS: lets the current round finish (killing the rounds after
# SECONDS), then checks every round: sets FIO_SUM, TR_ROUNDS, TR_BAD (rounds with an error)
# and prints the failed rounds' summaries. Status 0 if there was at least one round and every
# round exited 0 with no job error.
tr_rounds_stop() {
  local tag=$1 b=$TB_DIR/$DK_ID.fio-$1 t0=$SECONDS i rc p line wk=0 rk=0
  touch "$b.stop"
  while [ ! -e "$b.done" ] && (( SECONDS - t0 < $2 )); do sleep 0.2; done
  if [ ! -e "$b.done" ]; then
    echo "  fio rounds $tag still running $2 s after the stop: killing them"
    on compute "p=\$(cat $b.pid); kill -KILL -- -\$p 2>/dev/null; true" >/dev/null
    echo killed >"$b.done"
  fi
  TR_ROUNDS=0 TR_BAD=
  for ((i = 1; ; i++)); do
    [ -e "$b.r$i.rc" ] || [ -e "$b.r$i.out" ] || break
    TR_ROUNDS=$i
    rc=$(cat "$b.r$i.rc" 2>/dev/null); rc=${rc:-killed}
    p=$(dk_fio_parse "$b.r$i.out")
    line=$(grep '^FIO ' <<<"$p" | tail -n1)
    wk=$((wk + $(word write_kib "$line"))) rk=$((rk + $(word read_kib "$line")))
    if [ "$rc" != 0 ] || [ "$(word errors "$line")" != 0 ]; then
      TR_BAD+=" r$i"
      echo "  round $i: fio exit $rc, $line"
      grep -v '^FIO ' <<<"$p" | head -n 12
      [ -s "$b.r$i.log" ] && grep -v '^$' "$b.r$i.log" | head -n 10 | indent "stderr: "
    fi
  done
  FIO_SUM="$TR_ROUNDS fio rounds, failed:${TR_BAD:- none}; wrote $((wk / 1024)) MiB, read $((rk / 1024)) MiB"
  [ "$TR_ROUNDS" -gt 0 ] && [ -z "$TR_BAD" ]
}

# tr_fio_args NAME: 2 jobs on disjoint 4 MiB halves, random 50/50 reads and writes of
# 4-64 KiB at queue depth 16, crc32c verify headers; TR_SIZE overrides the size per job.
tr_fio_args() {
  echo "--name=$1 --filename=/dev/$DK_DEV --rw=randrw --rwmixread=50 --bsrange=4k-64k --iodepth=16" \
    "--numjobs=2 --size=${TR_SIZE:-2M} --offset_increment=4M --verify=crc32c --do_verify=1"
}

# ---------------------------------------------------------------- completion gaps
# A sampler in the compute VM's background logs "NS IOS" every 0.2 s to
# $TB_DIR/<test>.gap-TAG.log: the VM's clock in ns and the disk's rdma_ios + tcp_ios (builtins
# only, DK_VM_DEFS). Marks taken with tr_vm_ns around a fault carry the same clock, so
# tr_gap_ms can keep to the stretches that overlap the fault.

tr_gap_start() { # tr_gap_start TAG DEV: starts the sampler
  local b=$TB_DIR/$DK_ID.gap-$1
  printf '%s\n' "$DK_VM_DEFS
while :; do
  now_us; ios_sum /sys/block/$2/rdmadisk/stats
  echo \"\${us}000 \${S:-0}\"
  pause 0.2
done" >"$b.sh"
  on compute "rm -f $b.log; setsid bash $b.sh >$b.log 2>&1 </dev/null & echo \$! >$b.pid" >/dev/null
}

tr_gap_stop() { on compute "kill \$(cat $TB_DIR/$DK_ID.gap-$1.pid)" >/dev/null; } # tr_gap_stop TAG

tr_vm_ns() { on compute "$DK_VM_DEFS
now_us; echo \${us}000"; } # the compute VM's clock, ns

# tr_gap_ms TAG A B: the longest stretch without a completion (ms) that overlaps [A, B]
# (tr_vm_ns marks); a gap elsewhere (between fio rounds, say) does not count. 0 if a mark is
# missing.
tr_gap_ms() {
  if ! is_num "$2" || ! is_num "$3"; then echo 0; return; fi
  awk -v a="$2" -v b="$3" '
    function gap(e) { if (n && t1 <= b && e >= a && e - t1 > m) m = e - t1 }
    $2 != last { gap($1); t1 = $1; last = $2 } { t = $1; n++ } END { gap(t); print int(m / 1000000) }' \
    "$TB_DIR/$DK_ID.gap-$1.log"
}

# ---------------------------------------------------------------- the compute VM's rxe

# tr_rxe_restore: re-adds the compute VM's rxe device if a test left it deleted
tr_rxe_restore() {
  on compute "rdma link show $TR_RXE/1 >/dev/null 2>&1 || rdma link add $TR_RXE type rxe netdev $(tr_nic)" >/dev/null 2>&1
}

# ---------------------------------------------------------------- kernel splats

tr_dmesg_mark() { # TR_MARK: where the compute VM's streamed kernel log ($TB_DIR/compute.kmsg) ends now
  TR_MARK=$(stat -c %s "$TB_DIR/compute.kmsg" 2>/dev/null)
  is_num "$TR_MARK" || TR_MARK=0
}

# tr_kmsg_since: prints the compute VM's kernel log since tr_dmesg_mark, complete up to now: a
# mark written to /dev/kmsg must first show up in the stream (within 30 s). Read from the
# stream the agent writes, not from dmesg, whose ring buffer may have wrapped since the mark.
# Status 1 if the mark cannot be written or never shows up (the stream stalled or died).
tr_kmsg_since() {
  local m="tb-kmsg-mark-$$-$RANDOM" t0=$SECONDS
  on compute "echo $m >/dev/kmsg" >/dev/null 2>&1 || return 1
  until tail -c +$((${TR_MARK:-0} + 1)) "$TB_DIR/compute.kmsg" 2>/dev/null | grep -q "$m"; do
    (( SECONDS - t0 > 30 )) && return 1
    sleep 0.2
  done
  tail -c +$((${TR_MARK:-0} + 1)) "$TB_DIR/compute.kmsg"
}

# tr_splat_check: a TAP line: no kernel splat in the compute VM's kernel log since
# tr_dmesg_mark (the runner checks the whole log at the end too; this names the test that
# caused it). Fails if the log cannot be read or searched.
tr_splat_check() {
  local log new rc=0
  if ! log=$(tr_kmsg_since); then
    res 1 "no kernel splat in the compute VM's kernel log during the test: the log stream could not be read up to now"
    return 1
  fi
  new=$(grep -E "$TB_SPLAT_RE" <<<"$log") || rc=$?
  case $rc in
    0) res 1 "no kernel splat in the compute VM's kernel log during the test"
       printf '%s\n' "$new" | head -n 20 | indent; return 1 ;;
    1) res 0 "no kernel splat in the compute VM's kernel log during the test" ;;
    *) res 1 "no kernel splat in the compute VM's kernel log during the test: grep failed (status $rc)" ;;
  esac
}
