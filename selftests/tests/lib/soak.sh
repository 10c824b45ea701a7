# shellcheck shell=bash disable=SC2034 # SOAK_* are read by the callers
# The soak: verified fio on one disk and an ext4 filesystem with a sha256 manifest on another,
# while each kind of fault is injected N times, then every check a user would want: fsck, the
# checksums, a kmemleak scan, rmmod, dmesg. Used by tests/90-soak.sh (make check runs N=1) and
# by `make soak N=...` (selftests/soak.sh), which also writes docs/reliability.md.
# Sourced after lib/disk.sh, lib/transport.sh and lib/ext4.sh.
#
# Every fault episode is a window in each VM's clock (seconds since boot, as dmesg stamps
# lines): $TB_DIR/$DK_ID.windows has "KIND N START END RECOVERED HEALED S_START S_END" (START
# and END on the compute VM, S_START and S_END on the storage VM; HEALED: rxe0 had to be
# re-created, see tb_qp1_heal). A VM-side sampler logs
# both disks' completed requests every 0.2 s, and each fio round its start, end and result, so
# soak_report can give, per fault kind, the I/O errors, verify failures, longest stall and
# kernel splats inside its windows on either VM.

SOAK_KINDS=${SOAK_KINDS:-"nic link netem kill stop corrupt flip failback"}
SOAK_MARK=/run/rdmadisk-tests/refuse-rdma
SOAK_RECOVER_S=${SOAK_RECOVER_S:-120}

soak_uptime() { on "${1:-compute}" "read -r u _ </proc/uptime; echo \$u"; }

# soak_setup: target with two exports, disks d90 (fio) and e90 (ext4), the sampler and the
# fio rounds. Sets SOAK_D, SOAK_E.
soak_setup() {
  local fsback
  on storage "mkdir -p /run/rdmadisk-tests; rm -f $SOAK_MARK" >/dev/null
  # netem sits on both NICs for the whole soak, unimpaired but for the netem episodes, which
  # only change its settings. Adding or deleting a root qdisc drops the packets sent while it is
  # swapped in, and soft-RoCE turns such a local drop into a QP error (rxe_xmit_packet); when
  # that hit the compute VM's GSI QP (QP1), every later RDMA CM connect went unanswered until
  # the device was re-created. A lossy wire drops silently instead, as netem's loss does.
  soak_netem replace "" || return 1
  SOAK_BACK=$(dk_backing vol0 32M)
  fsback=$(dk_backing fs0 96M)
  SOAK_TARGET_ARGS="--export vol0=$SOAK_BACK --export fs0=$fsback --refuse-rdma-file $SOAK_MARK"
  # shellcheck disable=SC2086 # word splitting intended
  dk_target_start $SOAK_TARGET_ARGS >/dev/null && dk_load &&
    dk_map_disk e90 fs0 queues=2 && SOAK_E=$DK_DEV && dk_map_disk d90 vol0 queues=2 && SOAK_D=$DK_DEV || return 1
  tr_set "$SOAK_D" io_timeout_ms=5000 && tr_set "$SOAK_E" io_timeout_ms=5000 || return 1
  fs_start soak "$SOAK_E" || return 1
  local smp=$TB_DIR/$DK_ID.sampler
  # Builtins only (DK_VM_DEFS): a loop of cut, awk and sleep took most of a vCPU.
  cat >"$smp.sh" <<EOF
$DK_VM_DEFS
while :; do
  read -r up _ </proc/uptime
  ios_sum /sys/block/$SOAK_D/rdmadisk/stats; d=\${S:-0}
  ios_sum /sys/block/$SOAK_E/rdmadisk/stats
  echo "\$up \$d \${S:-0}"
  pause 0.2
done
EOF
  on compute "rm -f $smp.log; setsid bash $smp.sh >$smp.log 2>&1 </dev/null & echo \$! >$smp.pid" >/dev/null
  local b=$TB_DIR/$DK_ID.rounds
  rm -f "$b".* 
  printf '%s\n' "n=0
while [ ! -e $b.stop ]; do
  n=\$((n + 1)); read -r t0 _ </proc/uptime
  timeout 900 fio $DK_FIO_BASE --output=$b.r\$n.out --randseed=\$n --name=soak --filename=/dev/$SOAK_D --rw=randrw --rwmixread=50 --bsrange=4k-64k --iodepth=16 --numjobs=2 --size=2M --offset_increment=8M --verify=crc32c --do_verify=1 >$b.r\$n.log 2>&1
  rc=\$?; read -r t1 _ </proc/uptime
  echo \"\$rc \$t0 \$t1\" >$b.r\$n.rc
done
echo \$n >$b.done" >"$b.sh"
  on compute "setsid bash $b.sh </dev/null >/dev/null 2>&1 &" >/dev/null
  : >"$TB_DIR/$DK_ID.windows"
}

# soak_recovered: both disks back on RDMA (every fault here passes, and RDMA with it) and
# their I/O moving again (bounded). Status 0 if so.
soak_recovered() {
  local d e
  read -r d e <<<"$(on compute "$DK_VM_DEFS
for x in $SOAK_D $SOAK_E; do ios_sum /sys/block/\$x/rdmadisk/stats; echo -n \"\${S:-0} \"; done")"
  tr_wait rec "$SOAK_D" "$SOAK_RECOVER_S" rdma ios "${d:-0}" >/dev/null &&
    tr_wait rec "$SOAK_E" "$SOAK_RECOVER_S" rdma ios "${e:-0}" >/dev/null
}

soak_counters() { # soak_counters KEY: KEY summed over both disks' stats (empty if unreadable)
  local d e
  read -r d e <<<"$(tr_stat "$SOAK_D" "$1") $(tr_stat "$SOAK_E" "$1")"
  is_num "$d" && is_num "$e" && echo $((d + e))
}

soak_set_faults() { # soak_set_faults VALUE: corrupt_read/corrupt_write_crc every VALUE on both disks
  on compute "for x in $SOAK_D $SOAK_E; do f=/sys/kernel/debug/rdmadisk/\$x; echo $1 >\$f/corrupt_read_every; echo $1 >\$f/corrupt_write_crc_every; done" >/dev/null
}

soak_netem() { # soak_netem replace|change SETTINGS: netem with SETTINGS ("": none) on both NICs
  on compute "tc qdisc $1 dev $(tr_nic) root netem $2" >/dev/null &&
    on storage "tc qdisc $1 dev \$(ls /sys/class/net | grep -m1 '^en') root netem $2" >/dev/null
}

# soak_fault KIND: one episode of KIND (see SOAK_KINDS), up to the disks' recovery. Status 0
# if every step of it did what it should and the fault is seen to have taken effect (the
# device went, the disk moved, the link went down, netem lost packets, the target restarted,
# a CRC was retried...): an episode whose fault was not really injected must not count as
# survived.
soak_fault() {
  local nic st=0 old c0
  nic=$(tr_nic)
  step() { "$@" >/dev/null || { st=1; echo "  $SOAK_EP: step failed: $*"; }; }
  case $1 in
    nic)
      step dk_timed nicdel 60 "rdma link delete rxe0"
      step tr_wait tcp "$SOAK_D" "$SOAK_RECOVER_S" tcp
      step on compute "rdma link add rxe0 type rxe netdev $nic"
      step tr_wait rdma "$SOAK_D" "$SOAK_RECOVER_S" rdma ;;
    link)
      step tb_link down
      # The cable is out: the compute VM's NIC says so.
      step on compute "read -r s </sys/class/net/$nic/operstate; [ \"\$s\" = down ]"
      sleep 3; step tb_link up ;;
    netem)
      step soak_netem change "loss 1% delay 5ms"
      step on compute "tc qdisc show dev $nic | grep -q 'loss 1%'"
      sleep 10
      # It dropped something: netem counts what it dropped.
      step on compute "tc -s qdisc show dev $nic | grep -qE 'dropped [1-9]'"
      step soak_netem change "" ;;
    kill)
      old=$(on storage "cat $DK_TPID")
      step on storage "read -r p <$DK_TPID && kill -KILL \$p"
      sleep 2
      step on storage "! kill -0 $old 2>/dev/null"
      # shellcheck disable=SC2086
      step dk_target_start $SOAK_TARGET_ARGS ;;
    stop)
      step on storage "read -r p <$DK_TPID && kill -STOP \$p && grep -q '^State:.*stopped' /proc/\$p/status"
      sleep 7
      step on storage "read -r p <$DK_TPID && kill -CONT \$p" ;;
    corrupt)
      c0=$(soak_counters crc_retries)
      step soak_set_faults 5; sleep 6; step soak_set_faults 0
      # Corrupted data was caught and retried.
      step n_gt "$(soak_counters crc_retries)" "${c0:-x}" ;;
    flip)
      step tr_set "$SOAK_D" transport=tcp; step tr_set "$SOAK_E" transport=tcp
      step tr_wait tcp "$SOAK_D" "$SOAK_RECOVER_S" tcp
      step tr_set "$SOAK_D" transport=auto; step tr_set "$SOAK_E" transport=auto
      step tr_wait rdma "$SOAK_D" "$SOAK_RECOVER_S" rdma ;;
    failback)
      step tr_set "$SOAK_D" transport=tcp; step tr_set "$SOAK_E" transport=tcp
      step tr_wait tcp "$SOAK_D" "$SOAK_RECOVER_S" tcp
      step on storage "touch $SOAK_MARK"
      step tr_set "$SOAK_D" transport=auto; step tr_set "$SOAK_E" transport=auto
      sleep 8
      # The failback was refused meanwhile, and the disk kept serving on TCP.
      step tr_wait still "$SOAK_D" 1 tcp
      step on storage "rm -f $SOAK_MARK"
      step tr_wait rdma "$SOAK_D" "$SOAK_RECOVER_S" rdma ;;
  esac
  return $st
}

# soak_run N: N cycles, each episode a window; prints progress. The first kind in SOAK_KINDS
# (the main drill, NIC servicing) runs every cycle, the others every SOAK_EVERY-th cycle (1: all
# every cycle). `make soak N=100` sets SOAK_EVERY=10: 100 NIC servicing episodes and 10 of
# each other kind, which under TCG fits in about two hours; 100 of every kind would take
# more than half a day.
soak_run() {
  local n=$1 every=${SOAK_EVERY:-1} i k t0 t1 s0 s1 e0 e1 ok healed qp1 t_start=$SECONDS main
  main=${SOAK_KINDS%% *}
  for ((i = 1; i <= n; i++)); do
    for k in $SOAK_KINDS; do
      [ "$k" = "$main" ] || (( i % every == 0 )) || continue
      SOAK_EP="$k #$i"
      t0=$(soak_uptime); s0=$(soak_uptime storage)
      e0=$(soak_counters io_errors)
      soak_fault "$k"; ok=$?
      healed=0
      if ! soak_recovered; then
        # Soft-RoCE's QP1 may have died (a send of it failed while the link was down): rdma_cm
        # is then dead on that device until it is re-created (TESTBED.md). Counted apart.
        # (No pipe into indent for the status: the tests run without pipefail.)
        if ! qp1=$(tb_qp1_ok); then
          printf '%s\n' "$qp1" | indent "  $k #$i: "
          tb_qp1_heal | indent "  $k #$i: "
          healed=1
        fi
        if [ $healed = 0 ] || ! soak_recovered; then
          [ $ok = 0 ] && echo "  $k #$i: the disks were not back on RDMA with I/O moving within $SOAK_RECOVER_S s"
          ok=1
        fi
      fi
      # Recovered means with no I/O error in the episode either.
      e1=$(soak_counters io_errors)
      if ! n_eq "${e1:-x}" "${e0:-y}"; then
        echo "  $k #$i: I/O errors during the episode: ${e0:-?} -> ${e1:-?}"
        ok=1
      fi
      t1=$(soak_uptime); s1=$(soak_uptime storage)
      echo "$k $i $t0 $t1 $([ $ok = 0 ] && echo yes || echo no) $healed $s0 $s1" >>"$TB_DIR/$DK_ID.windows"
    done
    echo "  soak cycle $i/$n done ($((SECONDS - t_start)) s)"
  done
}

# soak_finish: stops the load and checks everything. TAP lines.
soak_finish() {
  local b=$TB_DIR/$DK_ID.rounds t0=$SECONDS
  touch "$b.stop"
  while [ ! -e "$b.done" ] && (( SECONDS - t0 < 600 )); do sleep 0.5; done
  on compute "kill \$(cat $TB_DIR/$DK_ID.sampler.pid)" >/dev/null
  local rounds bad
  rounds=$(ls "$b".r*.rc 2>/dev/null | wc -l)
  bad=$(awk '$1 != 0 { print FILENAME }' "$b".r*.rc 2>/dev/null | wc -l)
  [ -e "$b.done" ] && [ "$rounds" -gt 0 ] && [ "$bad" = 0 ]
  res $? "fio through every fault: $rounds verified rounds, $bad failed"
  dk_check_image "$SOAK_D" "$SOAK_BACK"
  res $? "d90 read whole through the driver is its backing file: $DK_BACKING"
  fs_stop soak
  res $? "$FS_SUM"
  fs_check soak "$SOAK_E"
  res $? "ext4: e2fsck clean and every fsynced file read back matches its sha256: ${FS_VER:-0} before their removal, the rest at the end ($FS_CHECK)"
  local de ee
  de=$(tr_stat "$SOAK_D" io_errors); ee=$(tr_stat "$SOAK_E" io_errors)
  n_eq "$de" 0 && n_eq "$ee" 0
  res $? "io_errors=0 on both disks (d90 $de, e90 $ee)"
  on compute "umount /mnt/soak" >/dev/null
  local leaks
  leaks=$(on compute "echo scan >/sys/kernel/debug/kmemleak && sleep 6 && echo scan >/sys/kernel/debug/kmemleak && grep -c 'unreferenced object' /sys/kernel/debug/kmemleak")
  [ "$leaks" = 0 ]
  res $? "kmemleak scan: ${leaks:-no result} unreferenced objects"
  dk_unmap "$SOAK_D" normal && dk_gone "$SOAK_D" 30 && dk_unmap "$SOAK_E" normal && dk_gone "$SOAK_E" 30 &&
    dk_timed rmmod 60 "rmmod rdmadisk" >/dev/null
  res $? "unmap both disks; rmmod"
  # The VMs as found: with no RDMA traffic left, removing the qdisc is safe.
  on compute "tc qdisc del dev $(tr_nic) root" >/dev/null
  on storage "tc qdisc del dev \$(ls /sys/class/net | grep -m1 '^en') root" >/dev/null
}

# soak_report: the per-kind table (markdown) from the windows, the sampler, the fio rounds and
# both VMs' kernel logs. "verify mismatches" counts fio's reports of data that did not match
# what was written (a failed CRC or a bad header), not failed rounds: every round's output
# says "verify", whatever happened.
soak_report() {
  python3 - "$TB_DIR/$DK_ID.windows" "$TB_DIR/$DK_ID.sampler.log" "$TB_DIR/compute.kmsg" "$TB_SPLAT_RE" "$TB_DIR/$DK_ID.rounds" "$TB_DIR/storage.kmsg" <<'PY'
import glob, re, sys
wfile, sfile, kfile, splat_re, rounds, skfile = sys.argv[1:7]
wins = []
for l in open(wfile):
    k, i, a, b, ok, healed, sa, sb = l.split()[:8]
    wins.append((k, float(a), float(b), ok == "yes", int(healed), float(sa), float(sb)))
samples = []
for l in open(sfile):
    p = l.split()
    if len(p) == 3 and all(re.fullmatch(r"[0-9.]+", x) for x in p):
        samples.append((float(p[0]), int(float(p[1])), int(float(p[2]))))
def stall(a, b):
    m = 0.0
    for col in (1, 2):
        last_t, last_v = None, None
        for s in samples:
            if s[0] < a - 5 or s[0] > b + 5:
                continue
            if last_v is None or s[col] != last_v:
                if last_t is not None:
                    m = max(m, s[0] - last_t)
                last_t, last_v = s[0], s[col]
        if last_t is not None:
            m = max(m, min(b, samples[-1][0]) - last_t)
    return m
splat = re.compile(splat_re)
def splats(path):
    out = []
    for l in open(path, errors="replace"):
        m = re.match(r"\[\s*([0-9.]+)\]", l)
        if m and splat.search(l):
            out.append(float(m.group(1)))
    return out
kmsg, skmsg = splats(kfile), splats(skfile)
rds = []
for f in glob.glob(rounds + ".r*.rc"):
    rc, a, b = open(f).read().split()[:3]
    log = open(f[:-3] + ".log", errors="replace").read() + open(f[:-3] + ".out", errors="replace").read()
    bad = len(re.findall(r"verify failed at file|verify: bad", log))
    rds.append((int(rc), float(a), float(b), bad))
kinds = []
for k, *_ in wins:
    if k not in kinds:
        kinds.append(k)
print("| fault | injected | recovered | fio rounds with an error | verify mismatches | longest stall (s) | splats | rxe0 re-created (soft-RoCE QP1) |")
print("|---|---|---|---|---|---|---|---|")
tot = [0, 0, 0, 0, 0.0, 0, 0]
for k in kinds:
    w = [x for x in wins if x[0] == k]
    over = lambda a, b: [r for r in rds if r[1] <= b and r[2] >= a]
    errs = len({id(r) for x in w for r in over(x[1], x[2]) if r[0] != 0})
    ver = sum({id(r): r[3] for x in w for r in over(x[1], x[2])}.values())
    st = max((stall(x[1], x[2]) for x in w), default=0)
    sp = sum(1 for t in kmsg for x in w if x[1] - 1 <= t <= x[2] + 1) + \
        sum(1 for t in skmsg for x in w if x[5] - 1 <= t <= x[6] + 1)
    rec = sum(1 for x in w if x[3])
    heal = sum(x[4] for x in w)
    print(f"| {k} | {len(w)} | {rec} | {errs} | {ver} | {st:.1f} | {sp} | {heal} |")
    tot = [tot[0] + len(w), tot[1] + rec, tot[2] + errs, tot[3] + ver, max(tot[4], st), tot[5] + sp, tot[6] + heal]
print(f"| **all** | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} | {tot[4]:.1f} | {tot[5]} | {tot[6]} |")
PY
}

# death TAG SIGNAL: a target that dies for good (SIGKILL, never restarted) or freezes for good
# (SIGSTOP, its connections up, never resumed), with buffered writeback and direct fio in
# flight. TAP lines; status 0 if every check held. Needs LOSS and MARGIN.
death() {
  local tag=$1 sig=$2 t0 took dd_rc fio_rc before after c b back
  back=$(dk_backing "$tag" 64M)
  dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk "dth$tag" vol0
  if ! res $? "[$tag] target; insmod; map: /dev/${DK_DEV:-?} is live"; then return 1; fi
  local dev=$DK_DEV
  b=$TB_DIR/$DK_ID.$tag
  tr_set "$dev" loss_timeout_s="$LOSS" io_timeout_ms=120000 keepalive_ms=2000
  on compute "rm -f $b.dd.rc $b.dd.log
setsid bash -c 'i=0; while :; do dd if=/dev/urandom of=/dev/$dev bs=1M count=8 seek=\$((8 + i % 6 * 8)) conv=fsync >$b.dd.log 2>&1 || { echo \$? >$b.dd.rc; break; }; i=\$((i + 1)); done' </dev/null >/dev/null 2>&1 &" >/dev/null
  dk_fio_bg "$tag" "--name=$tag --filename=/dev/$dev --rw=randwrite --bs=64k --size=6M --iodepth=8 --time_based --runtime=600"
  # The death comes once both are under way (writes reaching the target), not after a fixed
  # time. The buffered dd runs in 8 MiB rounds until one fails, so it still has dirty data to
  # write back when the target dies however slow the link was until then (a single 48 MiB dd
  # once finished first at 1.2 MB/s).
  tr_wait busy "$dev" 60 any ios 20 >/dev/null
  res $? "[$tag] buffered dd and direct fio under way ($TR_WAIT)"
  [ ! -e "$b.dd.rc" ]
  res $? "[$tag] no buffered dd round has failed before the target dies"
  on storage "kill -$sig \$(cat $DK_TPID); sleep 0.5; grep State /proc/\$(cat $DK_TPID)/status 2>/dev/null || echo gone" | indent "target: "
  t0=$SECONDS
  while (( SECONDS - t0 < LOSS + MARGIN + 30 )); do
    [ -e "$b.dd.rc" ] && [ -e "$TB_DIR/$DK_ID.fio-$tag.rc" ] && break
    sleep 1
  done
  took=$((SECONDS - t0))
  dd_rc=$(cat "$b.dd.rc" 2>/dev/null)
  fio_rc=$(cat "$TB_DIR/$DK_ID.fio-$tag.rc" 2>/dev/null)
  tail -n 2 "$b.dd.log" 2>/dev/null | indent "dd: "
  [ -n "$dd_rc" ] && [ "$dd_rc" != 0 ] && [ -n "$fio_rc" ] && [ "$fio_rc" != 0 ] && (( took <= LOSS + MARGIN ))
  res $? "[$tag] target SIG$sig for good: buffered dd+fsync and direct fio both fail, after ${took} s (limit loss_timeout_s $LOSS + $MARGIN s): dd rc=${dd_rc:-none} fio rc=${fio_rc:-none}"
  dk_stuck_tasks | indent "D state: "
  res "${PIPESTATUS[0]}" "[$tag] no task left in D state (two looks 5 s apart)"
  c=$(on compute "cat /sys/block/$dev/rdmadisk/state")
  before=$(tr_stat "$dev" tcp_connects connect_failures probes)
  sleep 12
  after=$(tr_stat "$dev" tcp_connects connect_failures probes)
  [ "$c" = failed ] && [[ $before =~ ^[0-9]+\ [0-9]+\ [0-9]+$ ]] && [ "$before" = "$after" ]
  res $? "[$tag] the disk is failed ('$c') and stopped reconnecting (tcp_connects connect_failures probes: $before -> $after over 12 s)"
  dk_unmap "$dev" normal && dk_gone "$dev" 30 && dk_timed rmmod 60 "rmmod rdmadisk" >/dev/null
  res $? "[$tag] unmap normal and rmmod succeed after the death"
  dk_fio_kill "$tag"
  on storage "p=\$(cat $DK_TPID 2>/dev/null); [ -n \"\$p\" ] && kill -CONT \$p && kill -KILL \$p; rm -f $DK_TPID; true" >/dev/null
}
