#!/usr/bin/env bash
# make bench-gateways: the longest I/O gap when the path serving a disk goes away and when it
# comes back, rdmadisk's gateways against nvme native multipath, in the same run, on one Ceph
# cluster in the storage VM (bench/peers-lib.sh's RBD set).
#   rdmadisk: two rdmadisk-target gateways of rbd/bench-rdmadisk (--gateway), one disk naming
#     both (target=A,B; keepalive_ms 2000, path_failover_ms 2000, probe_interval_ms 2000,
#     failback_probes 3, as test 89). "gone": the active gateway is SIGKILLed (the other one
#     takes the image's lock over). "back": it is started again, and the disk fails back.
#   nvme-multipath: rbd/bench-krbd mapped by the storage VM's kernel, one nvmet subsystem
#     offering it on two nvme-rdma ports; the compute VM connects both (one disk, two paths,
#     iopolicy numa; reconnect_delay 1 s). "gone": the subsystem is taken off the port carrying
#     the I/O (nvmet deletes that port's controllers; the host fails their requests over to the
#     other path). "back": it is offered there again, and the host reconnects the path.
# nvme's "gone" is the gentler event: one nvmet serves both ports, so nothing has an image's
# lock to take over, and the host hears the disconnect at once. rdmadisk's gateway is killed:
# its client learns from the connection's end, retries it for path_failover_ms, then moves.
# Workload: fio 4 KiB random reads and writes (50/50) at queue depth 4 for BENCH_GAP_SECS
# (default 30) seconds, logging every completion; the event comes 8 s in. The figure is the
# longest stretch between two completions, and fio's error if it stopped on one. BENCH_REPS
# (default 3) repetitions alternate the systems; the ratio rdmadisk/nvme is each
# repetition's, given as their median and spread.
# Writes selftests/out/bench-gateways/: samples.jsonl and results.md. Needs nvme native
# multipath: the bench kernel (the default) has it, the test kernel (BENCH_KERNEL=debug) does
# not, and then only rdmadisk is measured. Not a pass/fail test.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TB_REPO=$(cd "$HERE/.." && pwd)
export TB_REPO
OUT=${BENCH_OUT:-$HERE/out/bench-gateways}
REPS=${BENCH_REPS:-3}
SECS=${BENCH_GAP_SECS:-30}
# shellcheck source-path=SCRIPTDIR source=kernel.sh
source "$HERE/bench/kernel.sh"
# shellcheck source-path=SCRIPTDIR source=../vm/testbed.sh
source "$HERE/vm/testbed.sh"
trap 'tb_shutdown >/dev/null 2>&1' EXIT
t0=$SECONDS
tb_boot || exit 1
TB_TEST=bench-gateways
# shellcheck source-path=SCRIPTDIR source=../tests/lib/disk.sh
source "$HERE/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/lib/transport.sh
source "$HERE/tests/lib/transport.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/lib/gateways.sh
source "$HERE/tests/lib/gateways.sh"
# shellcheck source-path=SCRIPTDIR source=peers-lib.sh
source "$HERE/bench/peers-lib.sh"
dk_build || exit 1
mkdir -p "$OUT"
BP_SAMPLES=$OUT/samples.jsonl
: >"$BP_SAMPLES"
FIO_ARGS="--rw=randrw --rwmixread=50 --bs=4k --iodepth=4"
GW_NQN=$BP_NQN-gw
GW_PORTS="4420 4422"

teardown() {
  on compute "for c in /sys/class/nvme/nvme*; do [ \"\$(cat \$c/subsysnqn 2>/dev/null)\" = $GW_NQN ] && echo 1 >\$c/delete_controller; done; true" >/dev/null 2>&1
  on storage "cd /sys/kernel/config/nvmet 2>/dev/null || exit 0
for p in 1 2; do rm -f ports/\$p/subsystems/$GW_NQN; rmdir ports/\$p 2>/dev/null; done
[ -d subsystems/$GW_NQN ] && { echo 0 >subsystems/$GW_NQN/namespaces/1/enable; rmdir subsystems/$GW_NQN/namespaces/1 subsystems/$GW_NQN; }
true" >/dev/null 2>&1
  gw 0 dk_target_stop >/dev/null 2>&1
  gw 1 dk_target_stop >/dev/null 2>&1
  bp_teardown
}

# ---------------------------------------------------------------- set-up
bp_setup_ceph || { teardown; exit 1; }
# shellcheck disable=SC2086 # BP_CEPH_ARGS: words
if ! gw 0 dk_target_start --export gw=rbd:rbd/bench-rdmadisk --gateway gw $BP_CEPH_ARGS >/dev/null ||
  ! gw 1 dk_target_start --export gw=rbd:rbd/bench-rdmadisk --gateway gw $BP_CEPH_ARGS >/dev/null ||
  ! dk_load || ! DK_TARGETS=$(gw_targets 2) dk_map_disk gw gw ||
  ! tr_set "$DK_DEV" keepalive_ms=2000 path_failover_ms=2000 probe_interval_ms=2000 failback_probes=3 \
    loss_timeout_s=120 >/dev/null; then
  echo "rdmadisk: two gateways and a disk through them: not set up"
  teardown
  exit 1
fi
RD=$DK_DEV
bp_log "rdmadisk: /dev/$RD through gateways 0 and 1 of rbd/bench-rdmadisk"

NV=
mp=$(on compute "cat /sys/module/nvme_core/parameters/multipath 2>/dev/null")
if [ "$mp" != Y ]; then
  why="this kernel has no nvme native multipath (nvme_core.multipath: ${mp:-absent})"
  bp_log "nvme-multipath: not measured: $why"
  printf '{"system": "nvme-multipath", "job": "gone", "rep": 0, "skipped": "%s"}\n' "$why" >>"$BP_SAMPLES"
else
  rdev=$(on storage "rbd -c $BP_CEPH/ceph.conf device map rbd/bench-krbd 2>&1 | tail -n1")
  [[ $rdev == /dev/rbd* ]] || { echo "rbd device map: $rdev"; teardown; exit 1; }
  BP_KRBD=$rdev
  if ! bp_nvmet_subsys "$GW_NQN" "$rdev" || ! on storage "set -e
cd /sys/kernel/config/nvmet
id=1
for port in $GW_PORTS; do
  mkdir ports/\$id
  echo rdma >ports/\$id/addr_trtype; echo ipv4 >ports/\$id/addr_adrfam
  echo $DK_S >ports/\$id/addr_traddr; echo \$port >ports/\$id/addr_trsvcid
  ln -s /sys/kernel/config/nvmet/subsystems/$GW_NQN ports/\$id/subsystems/
  id=\$((id + 1))
done"; then
    echo "nvmet: the subsystem on two ports: not set up"
    teardown
    exit 1
  fi
  # One disk for the subsystem, with a path per port: the head is the subsystem's, the
  # paths (nvmeXcYnZ) have no device node.
  out=$(on compute "test -d /sys/module/nvme_rdma || insmod $BP_KDIR/drivers/nvme/host/nvme-rdma.ko || exit 1
for port in $GW_PORTS; do
  nvme connect -t rdma -a $DK_S -s \$port -n $GW_NQN --hostnqn=$BP_HOSTNQN -i 2 --reconnect-delay=1 || exit 1
done
for i in \$(seq 100); do
  for s in /sys/class/nvme-subsystem/nvme-subsys*; do
    [ \"\$(cat \$s/subsysnqn 2>/dev/null)\" = $GW_NQN ] || continue
    for n in \$s/nvme*n*; do
      h=\${n##*/}  # nvmeSnN; its paths are nvmeScCnN
      [ -b /dev/\$h ] && [ \$(ls -d /sys/class/nvme/nvme*/\${h%n*}c*n\${h##*n} 2>/dev/null | wc -l) = 2 ] && { echo DEV=\$h; exit 0; }
    done
  done
  sleep 0.1
done
ls -d /sys/class/nvme-subsystem/*/nvme* /sys/class/nvme/*/nvme*
exit 1")
  NV=$(bp_dev_line <<<"$out")
  if [ -z "$NV" ]; then
    echo "nvme connect: no multipath disk with two paths for $GW_NQN:"
    sed 's/^/  /' <<<"$out"
    teardown
    exit 1
  fi
  bp_log "nvme-multipath: /dev/$NV, two nvme-rdma paths (ports $GW_PORTS) to nvmet on /dev/rbd of rbd/bench-krbd"
fi

# nv_paths: "CONTROLLER PORT STATE IOS" for each path of the multipath disk; IOS, the reads
# and writes the path's hidden disk completed.
nv_paths() {
  on compute "for c in /sys/class/nvme/nvme*; do
  [ \"\$(cat \$c/subsysnqn 2>/dev/null)\" = $GW_NQN ] || continue
  a=\$(cat \$c/address); p=\${a##*trsvcid=}; p=\${p%%,*}
  ios=0; for n in \$c/nvme*c*n*; do [ -e \$n/stat ] && read -r r _ _ _ w _ <\$n/stat && ios=\$((ios + r + w)); done
  echo \${c##*/} \$p \$(cat \$c/state) \$ios
done"
}

# nv_wait_live SECONDS: both paths live again
nv_wait_live() {
  local i
  for ((i = 0; i < $1; i++)); do
    [ "$(nv_paths | grep -c ' live ')" = 2 ] && return 0
    sleep 1
  done
  return 1
}

# ---------------------------------------------------------------- the drills
declare -A NOTE=()
for ((rep = 1; rep <= REPS; rep++)); do
  bp_log "repetition $rep of $REPS ($((SECONDS - t0)) s so far)"
  # rdmadisk: the active gateway is killed; then it comes back, and the disk fails back.
  out=$(gw_wait "$RD" 0 120) || bp_log "rdmadisk: not back on gateway 0: $out"
  log=$TB_DIR/bench-gw-rdmadisk-gone-$rep
  bp_gap_fio "$log" "$RD" "$SECS" "$FIO_ARGS"
  sleep 8
  gw_sig 0 KILL
  out=$(gw_wait "$RD" 1 60)
  bp_log "rdmadisk: gateway 0 SIGKILLed; on gateway 1 after $(kv ms "$out") ms (the disk's clock)"
  bp_gap_sample "$log" "$RD" "$SECS" rdmadisk gone "$rep"
  log=$TB_DIR/bench-gw-rdmadisk-back-$rep
  bp_gap_fio "$log" "$RD" "$SECS" "$FIO_ARGS"
  sleep 8
  # shellcheck disable=SC2086 # BP_CEPH_ARGS: words
  gw 0 dk_target_start --export gw=rbd:rbd/bench-rdmadisk --gateway gw $BP_CEPH_ARGS >/dev/null
  out=$(gw_wait "$RD" 0 "$SECS")
  bp_log "rdmadisk: gateway 0 started again; failed back after $(kv ms "$out") ms"
  bp_gap_sample "$log" "$RD" "$SECS" rdmadisk back "$rep"

  [ -n "$NV" ] || continue
  # nvme native multipath: the port carrying the I/O loses the subsystem, then gets it back.
  nv_wait_live 60 || bp_log "nvme-multipath: not both paths live: $(nv_paths | tr '\n' ';')"
  log=$TB_DIR/bench-gw-nvme-gone-$rep
  bp_gap_fio "$log" "$NV" "$SECS" "$FIO_ARGS"
  sleep 7
  a=$(nv_paths)
  sleep 1
  b=$(nv_paths)
  # The path whose completions moved in that second.
  port=$(join <(sort <<<"$a") <(sort <<<"$b") | awk '$7 > $4 { print $2; exit }')
  NOTE[nvme-$rep]="I/O on port ${port:-?}: $(tr '\n' ';' <<<"$b")"
  [ -n "$port" ] || port=${GW_PORTS%% *}
  id=$([ "$port" = "${GW_PORTS%% *}" ] && echo 1 || echo 2)
  on storage "rm /sys/kernel/config/nvmet/ports/$id/subsystems/$GW_NQN" >/dev/null
  bp_log "nvme-multipath: subsystem taken off port $port (${NOTE[nvme-$rep]})"
  bp_gap_sample "$log" "$NV" "$SECS" nvme-multipath gone "$rep"
  log=$TB_DIR/bench-gw-nvme-back-$rep
  bp_gap_fio "$log" "$NV" "$SECS" "$FIO_ARGS"
  sleep 8
  on storage "ln -s /sys/kernel/config/nvmet/subsystems/$GW_NQN /sys/kernel/config/nvmet/ports/$id/subsystems/" >/dev/null
  if nv_wait_live "$SECS"; then bp_log "nvme-multipath: port $port offers the subsystem again; both paths live"
  else bp_log "nvme-multipath: port $port offers the subsystem again; not both paths live: $(nv_paths | tr '\n' ';')"; fi
  bp_gap_sample "$log" "$NV" "$SECS" nvme-multipath back "$rep"
done
dk_csnap "$RD"
echo "# rdmadisk client: $(grep -E '^(path_failovers|path_failbacks|path_probes|path_probe_failures|reconnects|io_errors)=' <<<"$DK_CS" | tr '\n' ' ')"
for n in 0 1; do
  gw "$n" dk_tsnap
  echo "# gateway $n: $(grep -E '^(gateway_takeovers|gateway_takeover_failures|writes_refused_unlocked)=' <<<"$DK_TS" | tr '\n' ' ')"
done
kernel="$(on compute "uname -r"), $KERNEL_FLAVOR kernel"
teardown

python3 - "$OUT" "$kernel" "$SECS" "$REPS" "$((SECONDS - t0))" "$(date -u '+%Y-%m-%d %H:%M UTC')" <<'PY'
import json, statistics, sys
out, kernel, secs, reps, took, when = sys.argv[1:]
s = [json.loads(l) for l in open(f"{out}/samples.jsonl")]
def gaps(system, job):
    return {x["rep"]: x for x in s if x["system"] == system and x["job"] == job and "gap_ms" in x}
def spread(v):
    return f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})" if v else "-"
rows = []
for job, what in (("gone", "the serving path goes"), ("back", "the path comes back")):
    r, n = gaps("rdmadisk", job), gaps("nvme-multipath", job)
    rv = [x["gap_ms"] for x in r.values() if x["gap_ms"] is not None]
    nv = [x["gap_ms"] for x in n.values() if x["gap_ms"] is not None]
    ratio = [r[k]["gap_ms"] / n[k]["gap_ms"] for k in r if k in n and r[k]["gap_ms"] and n[k]["gap_ms"]]
    err = [f'{x["system"]} rep {x["rep"]}: {x["fio_error"]}' for x in list(r.values()) + list(n.values()) if x["fio_error"]]
    rows.append(f"| {what} | {spread(rv)} | {spread(nv)} | "
                + (f"{statistics.median(ratio):.1f} ({min(ratio):.1f}-{max(ratio):.1f})" if ratio else "-")
                + f" | {'; '.join(err) or 'none'} |")
skipped = [x["skipped"] for x in s if "skipped" in x]
md = [
    "# Gateway failover: rdmadisk against nvme native multipath",
    "",
    f"{when}; kernel {kernel}; fio 4 KiB random reads and writes (50/50) at QD4, {secs} s a run, the event 8 s in; "
    f"{reps} repetitions; {int(took) // 60} min in all (make bench-gateways, selftests/bench/gateways.sh).",
    "",
    "Longest stretch without a completion, ms: median (min-max) of the repetitions; the ratio is each "
    "repetition's rdmadisk/nvme.",
    "",
    "| event | rdmadisk (SIGKILL a gateway / restart it) | nvme multipath (port loses the subsystem / gets it back) | ratio | fio errors |",
    "|---|---|---|---|---|",
    *rows,
]
if skipped:
    md += ["", "nvme multipath not measured: " + "; ".join(skipped)]
open(f"{out}/results.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
echo "# results: $OUT/results.md"
