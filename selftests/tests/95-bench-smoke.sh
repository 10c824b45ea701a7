# make bench's harness in one short pass, so that it cannot rot: every system brought up on one
# block device of the storage VM (here a loop device over a tmpfs file: this test bed has no RAM
# disk; rdmadisk-tcp on a copy, as bench/peers-lib.sh says), one 2-second 4 KiB random-read job on each (and its polled twin on rdmadisk), the
# perftest floor of one test; then the RBD set (rdmadisk-rbd, nvme-rdma-krbd, fio-rbd on a Ceph
# cluster of the storage VM) with one such job each; and the report with its ratios and plots.
#
# Acceptance: every system maps and gives a sample with IOPS above zero; the report names each
# ratio and draws the plots; everything is torn down (nvme, rnbd, the disk, the loop device,
# the rbd device and the Ceph daemons).

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
# shellcheck source-path=SCRIPTDIR source=../bench/peers-lib.sh
source "$TB_REPO/selftests/bench/peers-lib.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

systems="rdmadisk-rdma nvme-rdma rnbd rdmadisk-tcp nvme-tcp"
BP_SECS=2
out=$TB_DIR/bench-smoke
rm -rf "$out" && mkdir -p "$out"
BP_SAMPLES=$out/samples.jsonl
: >"$BP_SAMPLES"
# shellcheck disable=SC2086 # a list of words
bp_backing && bp_setup $systems
if ! res $? "bench: $systems up on one block device of the storage VM ($BP_BDEV; rdmadisk-tcp on its copy $BP_BDEV_TCP): $(for s in $systems; do echo -n "$s=/dev/${BP_DEV[$s]:-?} "; done)"; then
  bp_teardown; return 0 2>/dev/null || exit 0
fi
ok=0
for s in $systems; do
  bp_job "$s" 1 rr4k_qd1 --rw=randread --bs=4k --iodepth=1 || ok=1
done
n=$(python3 -c "import json,sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l)['iops'] > 0))" "$BP_SAMPLES" 2>/dev/null)
[ $ok = 0 ] && n_eq "${n:-0}" 5
res $? "bench: a 4 KiB random-read sample with IOPS above zero from each system (got ${n:-0} of 5)"
# The polled job, on the one system whose poll queue the harness checks: rdmadisk's.
bp_job rdmadisk-rdma 1 rr4k_qd1_poll --rw=randread --bs=4k --iodepth=1 --ioengine=io_uring --hipri=1 &&
  python3 -c "import json,sys; sys.exit(0 if any(json.loads(l)['job'] == 'rr4k_qd1_poll' and json.loads(l)['iops'] > 0 for l in open(sys.argv[1])) else 1)" "$BP_SAMPLES"
rc=$? polled=$(tr_stat "${BP_DEV[rdmadisk-rdma]}" polled_completions)
[ $rc = 0 ] && n_gt "$polled" 0
res $? "bench: the polled job (io_uring --hipri) on rdmadisk-rdma gives a sample with IOPS above zero, and the disk's poll queue reaped (polled_completions=$polled)"
# The traced job, and what it counts.
bp_diag rdmadisk-rdma 1 >/dev/null
diag=$(python3 -c "import json,sys
d=[json.loads(l) for l in open(sys.argv[1]) if json.loads(l).get('diag')]
x=d[-1]; print(x['ios'], x['target_syscalls_per_io'], x['target_wakeups_per_io'], x['vm_wakeups_per_io'], x['wake_to_run_target']['n'], x['trace_overrun'])" "$BP_SAMPLES" 2>/dev/null)
read -r d_ios d_sys d_wake d_vmwake d_n d_lost <<<"$diag"
n_gt "${d_ios:-0}" 0 && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > 0 and float(sys.argv[2]) > 0 else 1)" "${d_sys:-0}" "${d_wake:-0}" &&
  n_gt "${d_n:-0}" 0 && n_eq "${d_lost:-1}" 0
res $? "bench: the traced job (bp_diag) on rdmadisk-rdma counts the target's system calls and wake-ups per I/O and its wake-up-to-run times (ios=${d_ios:-?} syscalls/io=${d_sys:-?} wake-ups/io=${d_wake:-?} VM wake-ups/io=${d_vmwake:-?} waits=${d_n:-?} lost=${d_lost:-?})"
python3 -c "import json,sys; s=[json.loads(l) for l in open(sys.argv[1])]; t=[x for x in s if 'iops' in x]; sys.exit(0 if t and all(x.get('max_gap_ms', 0) > 0 and isinstance(x.get('stalled'), bool) for x in t) else 1)" "$BP_SAMPLES"
res $? "bench: every timed sample has its longest completion gap (ms) and says whether it stalled"
BP_FLOOR_TESTS=ib_read_lat:64 bp_floor
grep -q '"job": "ib_read_lat_64"' "$BP_SAMPLES"
res $? "bench: the perftest floor (ib_read_lat 64 B, on CQ events) gives a sample"
bp_teardown
left=$(on compute "ls /sys/class/nvme 2>/dev/null | wc -l; ls /sys/block | grep -c '^rnbd'; ls /sys/block | grep -c '^rdmadisk'" | tr '\n' ' ')
sleft=$(on storage "ls /sys/kernel/config/nvmet/ports /sys/kernel/config/nvmet/subsystems 2>/dev/null | grep -vc '^\(/.*:\)\?$'; losetup -a | wc -l" | tr '\n' ' ')
[ "$left" = "0 0 0 " ] && [ "$sleft" = "0 0 " ]
res $? "bench: torn down (compute: nvme controllers, rnbd and rdmadisk disks left: $left; storage: nvmet ports and subsystems, loop devices left: $sleft)"
# The RBD set: a Ceph cluster on the storage VM's loopback, an image for each system (sparse:
# filling them costs half a minute a smoke does not need).
t=$SECONDS BP_RBD_FILL=0
# shellcheck disable=SC2086 # a list of words
bp_setup $BP_RBD_SYSTEMS
if res $? "bench: the RBD set up on a Ceph cluster of the storage VM ($((SECONDS - t)) s): $(for s in $BP_RBD_SYSTEMS; do echo -n "$s=${BP_DEV[$s]:-?} "; done)"; then
  ok=0
  for s in $BP_RBD_SYSTEMS; do
    bp_job "$s" 1 rr4k_qd1 --rw=randread --bs=4k --iodepth=1 || ok=1
  done
  n=$(python3 -c "import json,sys; print(sum(1 for l in open(sys.argv[1]) if json.loads(l).get('system') in sys.argv[2].split() and json.loads(l).get('iops', 0) > 0))" "$BP_SAMPLES" "$BP_RBD_SYSTEMS" 2>/dev/null)
  [ $ok = 0 ] && n_eq "${n:-0}" 3
  res $? "bench: a 4 KiB random-read sample with IOPS above zero from each RBD system (got ${n:-0} of 3)"
fi
bp_teardown
left=$(on storage "ls /dev/rbd* 2>/dev/null | wc -l; pgrep -cx 'ceph-(mon|osd)' || true" | tr '\n' ' ')
[ "$left" = "0 0 " ]
res $? "bench: the RBD set torn down (storage: rbd devices, Ceph daemons left: $left)"
/usr/bin/python3 "$TB_REPO/selftests/bench/report.py" "$out" --kernel "$(on compute "uname -r")" --host smoke --secs 2 --reps 1 --backing "$BP_KIND" >"$out/report.log" 2>&1 &&
  grep -q 'rdmadisk-rdma ÷ nvme-rdma' "$out/results.md" && grep -q 'rdmadisk-tcp ÷ nvme-tcp' "$out/results.md" &&
  grep -q 'rdmadisk-rbd ÷ nvme-rdma-krbd' "$out/results.md" && grep -q 'rdmadisk-rbd ÷ fio-rbd' "$out/results.md" &&
  grep -qE '^\| 4 KiB randread QD1 .*wins\) \| [0-9.]+ (\[[0-9.]+–[0-9.]+\]|\(min–max [0-9.]+–[0-9.]+\)), n=[0-9]+ \|' "$out/results.md" &&
  [ -s "$out/latency.png" ] && [ -s "$out/iops.png" ] && [ -s "$out/results.json" ]
res $? "bench: the report has the same-run ratios with their spread, results.json and the plots" || sed 's/^/  /' "$out/report.log"
