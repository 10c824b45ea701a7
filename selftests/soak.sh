#!/usr/bin/env bash
# make soak N=... [EVERY=...]: the full soak (tests/90-soak.sh with SOAK_N=N cycles, NIC
# servicing in each and every other fault kind in every EVERY-th, then the permanent target
# deaths), in its own test bed, then the per-fault reliability table with the date, kernel and
# machine, in selftests/out/reliability.md (docs/reliability.md holds the committed one).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
N=${1:-100}
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "usage: soak.sh N [EVERY] (N NIC servicing episodes; each other fault every EVERY-th cycle, default N/10)" >&2; exit 2; }
EVERY=${2:-$((N >= 10 ? N / 10 : 1))}
if ! [[ $EVERY =~ ^[1-9][0-9]*$ ]] || (( EVERY > N )); then
  echo "soak.sh: EVERY must be 1..N" >&2; exit 2
fi
mkdir -p "$HERE/out"
export SOAK_N=$N SOAK_EVERY=$EVERY SOAK_DEATHS=1 TB_KEEP=1
# A generous bound: under TCG an episode takes 20-60 s (120 s if RDMA does not come back); then the deaths.
export TB_TEST_TIMEOUT=$((N * 120 + N * 7 * 120 / EVERY + 1800))
t0=$SECONDS
"$HERE/run.sh" tests/90-soak.sh | tee "$HERE/out/soak.log"
rc=${PIPESTATUS[0]}
dir=$(sed -n 's/^# total [0-9]*s; VM state in //p' "$HERE/out/soak.log" | tail -n1)
{
  echo "# rdmadisk soak: N=$N (NIC servicing in every cycle, each other fault in one cycle of every $EVERY)"
  echo
  echo "Run $(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - t0)) s; kernel $(sed -n 's/.*Linux version \([^ ]*\).*/\1/p' "$dir/compute.kmsg" 2>/dev/null | head -n1);"
  echo "host $(nproc) cores, $(awk '/MemTotal/ { printf "%d GiB", $2 / 1048576 }' /proc/meminfo), test bed of two TCG VMs with soft-RoCE."
  echo
  cat "$dir/soak.md" 2>/dev/null || echo "(no table: the run did not get that far)"
  echo
  grep -E '^(ok|not ok)' "$HERE/out/soak.log"
} >"$HERE/out/reliability.md"
echo "reliability table: $HERE/out/reliability.md"
exit "$rc"
