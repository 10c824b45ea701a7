#!/usr/bin/env bash
# make bench: rdmadisk against nvme-rdma, nvme-tcp and RNBD on the same link, in one run.
#
# Boots the test bed with a brd RAM disk on each VM (the storage VM's serves every system), and
# measures, in BENCH_REPS repetitions (default 3) interleaved across the systems, each fio job
# running BENCH_SECS seconds (default 8):
#   the floor: perftest ib_read_lat (64 B, 4 KiB) and ib_read_bw (128 KiB) between the VMs'
#     soft-RoCE devices, sleeping on CQ events (-e; bp_floor says why only those);
#   4 KiB random reads and writes at queue depth 1 (p50, p99 latency), 4 KiB random reads at
#     depth 16 (IOPS), 128 KiB sequential reads and writes at depth 4 (MB/s), with the client
#     VM's CPU time per I/O, for every system;
#   4 KiB random reads at depths 2, 4, 8 and 32 too for rdmadisk-rdma and nvme-rdma;
#   the RBD set (bench/peers-lib.sh): rdmadisk-rbd, nvme-rdma-krbd and fio-rbd on images of one
#     Ceph cluster in the storage VM, 4 KiB random reads and writes at QD1 and reads at QD16;
#   last, the longest I/O gap while the compute VM's RDMA device is deleted and added back,
#     under 4 KiB random reads at QD1, for nvme-rdma and rdmadisk-rdma (bp_gap).
# Writes selftests/out/bench/: samples.jsonl (every sample), results.json, results.md (medians,
# spreads and same-run ratios) and PNG plots; the committed set is in docs/bench/.
# Then, unless BENCH_DIAG=0, one more job per system of 4 KiB random reads at depths 1 and 16 with
# the storage VM's sched and syscall tracepoints on (bp_diag): system calls and wake-ups per I/O
# and how long a woken task waited for the CPU. Kept out of the timed jobs: tracing costs.
# BENCH_KERNEL: bench (the default; the test kernel without its debug options,
# selftests/kernel/bench.config, with this module built against it) or debug (the test kernel).
# BENCH_SYSTEMS narrows the systems (default: all eight), BENCH_JOBS the workloads (names as in
# BP_WORKLOADS, and rr4k_qdN for the scaling depths; default: all); BENCH_FLOOR=0 and
# BENCH_GAP=0 leave out the floor and the NIC servicing gap; BENCH_TARGET_ARGS adds options to
# rdmadisk-target's command line (e.g. --ack-timeout-exp 20). Not a pass/fail test.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TB_REPO=$(cd "$HERE/.." && pwd)
export TB_REPO
OUT=${BENCH_OUT:-$HERE/out/bench}
BP_SECS=${BENCH_SECS:-8}
REPS=${BENCH_REPS:-3}
SYSTEMS=${BENCH_SYSTEMS:-rdmadisk-rdma nvme-rdma rnbd rdmadisk-tcp nvme-tcp rdmadisk-rbd nvme-rdma-krbd fio-rbd}
# The RBD set's workloads: a bluestore OSD under TCG is slow, and these are the ones its ratios
# are read from.
RBD_JOBS="rr4k_qd1 rw4k_qd1 rr4k_qd16"
# RAM disks the size of the test data (brd allocates its pages as they are written): one
# every system serves, and its twin for rdmadisk-tcp (peers-lib.sh says why).
export TB_APPEND="brd.rd_nr=2 brd.rd_size=$((64 << 10))"
# The bench kernel has nvme native multipath (for make bench-gateways); here every nvme system
# is one controller of its own, as in the test kernel: nvme-rdma and nvme-tcp reach one
# subsystem, and multipath would make them two paths of one disk.
[ "${BENCH_KERNEL:-bench}" != bench ] || TB_APPEND+=" nvme_core.multipath=N"
# shellcheck source-path=SCRIPTDIR source=kernel.sh
source "$HERE/bench/kernel.sh"
# shellcheck source-path=SCRIPTDIR source=../vm/testbed.sh
source "$HERE/vm/testbed.sh"
trap 'tb_shutdown >/dev/null 2>&1' EXIT
t0=$SECONDS
tb_boot || exit 1
TB_TEST=bench
# The target's stats file on the storage VM's tmpfs: rewritten every second, over 9p it costs
# the target's VM round trips that a real host's local file does not.
DK_STATS=/run/rdmadisk-bench.target.stats
# shellcheck source-path=SCRIPTDIR source=../tests/lib/disk.sh
source "$HERE/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/lib/transport.sh
source "$HERE/tests/lib/transport.sh"
# shellcheck source-path=SCRIPTDIR source=peers-lib.sh
source "$HERE/bench/peers-lib.sh"
dk_build || exit 1
mkdir -p "$OUT" && rm -f "$OUT"/*.png
BP_SAMPLES=$OUT/samples.jsonl
: >"$BP_SAMPLES"
# shellcheck disable=SC2086 # a list of words
if ! bp_backing || ! bp_setup $SYSTEMS; then bp_teardown; exit 1; fi

# A job that fails (fio's I/O error on one system, say) is recorded as failed and the run goes
# on: one system's fault must not cost the others their figures.
bp_failed() { # bp_failed SYSTEM REP NAME
  bp_log "$1 $3 rep $2: no sample (the job failed)"
  printf '{"system": "%s", "job": "%s", "rep": %s, "error": "the job failed"}\n' "$1" "$3" "$2" >>"$BP_SAMPLES"
}
# picked NAME: the workload is in BENCH_JOBS (all are when it is not set).
picked() { [ -z "${BENCH_JOBS:-}" ] || [[ " $BENCH_JOBS " == *" $1 "* ]]; }
# What rdmadisk's CRC32C of a 4 KiB block costs in each VM: work the peers do not do.
if (cd "$DK_UT" && cargo build -q --release -p rdmadisk-proto --example crc32c_speed); then
  crc=$CARGO_TARGET_DIR/release/examples/crc32c_speed
  c=$(on compute "$crc 300" | sed -n 's/^crc32c_4k_us=\([0-9.]*\).*/\1/p')
  st=$(on storage "$crc 300" | sed -n 's/^crc32c_4k_us=\([0-9.]*\).*/\1/p')
  bp_log "CRC32C of 4 KiB: ${c:-?} us on the compute VM, ${st:-?} us on the storage VM"
  printf '{"system": "crc32c", "job": "crc32c_4k", "rep": 0, "compute_us": %s, "storage_us": %s}\n' "${c:-null}" "${st:-null}" >>"$BP_SAMPLES"
fi
if [ "${BENCH_FLOOR:-1}" != 0 ]; then
  bp_log "floor (perftest)"
  bp_floor
fi
for ((rep = 1; rep <= REPS; rep++)); do
  bp_log "repetition $rep of $REPS ($((SECONDS - t0)) s so far)"
  for w in "${BP_WORKLOADS[@]}"; do
    picked "${w%% *}" || continue
    for s in $SYSTEMS; do
      [[ " $BP_RBD_SYSTEMS " != *" $s "* || " $RBD_JOBS " == *" ${w%% *} "* ]] || continue
      # shellcheck disable=SC2086 # the workload splits into its name and fio arguments
      bp_job "$s" "$rep" $w || bp_failed "$s" "$rep" $w
    done
  done
  for qd in $BP_SCALING_QD; do
    picked "rr4k_qd$qd" || continue
    for s in rdmadisk-rdma nvme-rdma; do
      [[ " $SYSTEMS " == *" $s "* ]] || continue
      bp_job "$s" "$rep" "rr4k_qd$qd" --rw=randread --bs=4k --iodepth="$qd" || bp_failed "$s" "$rep" "rr4k_qd$qd"
    done
  done
done
if [ "${BENCH_DIAG:-1}" != 0 ]; then
  bp_log "diagnostics: sched and syscall tracepoints on the storage VM"
  for s in $SYSTEMS; do
    [ "$s" != fio-rbd ] || continue
    for qd in 1 16; do bp_diag "$s" "$qd" || bp_log "$s: no diagnostic sample at QD$qd"; done
  done
fi
# NIC servicing under load, last: deleting rxe0 reaches every RDMA system, and nvme-rdma's
# host deletes its controller, so nvme-rdma goes first and rdmadisk after it.
for s in nvme-rdma rdmadisk-rdma; do
  [[ " $SYSTEMS " == *" $s "* ]] && [ "${BENCH_GAP:-1}" != 0 ] || continue
  if [ "$s" = nvme-rdma ] && on compute "test -d /sys/module/nvme_rdma && ! test -e /sys/module/nvme_rdma/initstate"; then
    # Built in (no initstate), nvme-rdma registered its IB client before rdma_cm's, so the IB
    # core calls its removal hook (which deletes the controllers and so their cm_ids) after
    # rdma_cm's, and rdma_cm's waits for those cm_ids: `rdma link delete` hangs for good. As
    # a module, loaded after rdma_cm, it is fine. Not measured; its controller goes first,
    # so that the cycle can run for the others.
    why="nvme-rdma is built into this kernel, where removing the RDMA device with a controller connected deadlocks (rdma_cm waits for nvme-rdma's cm_ids before nvme-rdma's removal hook runs)"
    bp_log "NIC servicing: nvme-rdma not measured: $why"
    printf '{"system": "nvme-rdma", "job": "nic_gap", "rep": 0, "skipped": "%s"}\n' "$why" >>"$BP_SAMPLES"
    bp_nvme_delete rdma
    continue
  fi
  bp_log "NIC servicing under fio: $s"
  bp_gap "$s" || bp_log "$s: no gap sample"
done
if [ -n "${DK_DEV:-}" ]; then
  dk_csnap "$DK_DEV"
  echo "# rdmadisk client: $(grep -E '^(inline_writes|remote_invalidations|max_outstanding|credit_waits|timeouts|reconnects|io_errors)=' <<<"$DK_CS" | tr '\n' ' ')"
fi
kernel="$(on compute "uname -r"), $KERNEL_FLAVOR kernel"
bp_teardown
/usr/bin/python3 "$HERE/bench/report.py" "$OUT" --kernel "$kernel" --secs "$BP_SECS" --reps "$REPS" --backing "$BP_KIND" \
  --host "$(nproc) cores, $(awk '/MemTotal/ { printf "%d GiB", $2 / 1048576 }' /proc/meminfo); two TCG VMs, soft-RoCE over one qemu datagram link" \
  --minutes $(((SECONDS - t0 + 59) / 60)) || exit 1
echo "# results: $OUT/results.md"
