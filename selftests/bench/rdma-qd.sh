#!/usr/bin/env bash
# make bench: fio on /dev/rdmadisk0 over RDMA in the test bed. 4 KiB random reads at queue depth
# 1 and 16, and 128 KiB sequential reads at queue depth 1, 4 and 16, reported with the ratios
# to queue depth 1 measured in the same run (throughput must grow with depth: a NIC that
# serialised REG_MR behind earlier work, Azure's "FMR hidden fence", would keep it flat).
# Not a pass/fail test: it prints figures. BENCH_SECS sets each job's run time (default 20).
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
TB_REPO=$(cd "$HERE/.." && pwd)
export TB_REPO
# shellcheck source-path=SCRIPTDIR source=../vm/testbed.sh
source "$HERE/vm/testbed.sh"
trap 'tb_shutdown >/dev/null 2>&1' EXIT
SECS=${BENCH_SECS:-20}
tb_boot || exit 1
TB_TEST=bench
# shellcheck source-path=SCRIPTDIR source=../tests/lib/disk.sh
source "$HERE/tests/lib/disk.sh"
dk_build || exit 1
back=$(dk_backing bench0 64M) && dk_target_start --export "bench0=$back" >/dev/null || exit 1
if ! dk_load || ! dk_map_disk b0 bench0; then dk_cleanup; exit 1; fi
echo "# filling the first 32 MiB so that reads return written data"
on compute "dd if=/dev/urandom of=/dev/$DK_DEV bs=1M count=32 oflag=direct status=none"

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/bench/lib.sh"
declare -A R
for spec in "rand4k_qd1 --rw=randread --bs=4k --iodepth=1" "rand4k_qd16 --rw=randread --bs=4k --iodepth=16" \
  "seq128k_qd1 --rw=read --bs=128k --iodepth=1" "seq128k_qd4 --rw=read --bs=128k --iodepth=4" \
  "seq128k_qd16 --rw=read --bs=128k --iodepth=16"; do
  # shellcheck disable=SC2086 # the spec splits into name and fio arguments
  line=$(job $spec) || { echo "fio failed: $spec"; dk_cleanup; exit 1; }
  echo "$line"
  R[${spec%% *}]=$line
done
ratio() { # ratio A B FIELD: A's FIELD over B's
  python3 -c "import sys; a, b = (float(x.split(sys.argv[3] + '=')[1].split()[0]) for x in sys.argv[1:3]); print(f'{a / b:.2f}')" "${R[$1]}" "${R[$2]}" "$3"
}
echo "ratio 4k randread iops qd16/qd1: $(ratio rand4k_qd16 rand4k_qd1 iops)"
echo "ratio 128k read throughput qd4/qd1: $(ratio seq128k_qd4 seq128k_qd1 kib_s)  qd16/qd1: $(ratio seq128k_qd16 seq128k_qd1 kib_s)"
dk_csnap "$DK_DEV"
echo "client: $(grep -E '^(max_outstanding|credit_waits|timeouts|reconnects|io_errors)=' <<<"$DK_CS" | tr '\n' ' ')"
dk_cleanup
