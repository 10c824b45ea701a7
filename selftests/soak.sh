#!/usr/bin/env bash
# make soak N=...: the full soak (tests/90-soak.sh with SOAK_N=N and the permanent target
# deaths), in its own test bed, then the per-fault reliability table with the date, kernel and
# machine, in selftests/out/reliability.md (docs/reliability.md holds the committed one).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
N=${1:-100}
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "usage: soak.sh N (a positive number of episodes per fault)" >&2; exit 2; }
mkdir -p "$HERE/out"
export SOAK_N=$N SOAK_DEATHS=1 TB_KEEP=1
# Roughly two minutes per cycle of every fault kind under TCG, and the deaths.
export TB_TEST_TIMEOUT=$((N * 300 + 1800))
t0=$SECONDS
"$HERE/run.sh" tests/90-soak.sh | tee "$HERE/out/soak.log"
rc=${PIPESTATUS[0]}
dir=$(sed -n 's/^# total [0-9]*s; VM state in //p' "$HERE/out/soak.log" | tail -n1)
{
  echo "# rdmadisk soak: N=$N"
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
