#!/usr/bin/env bash
# The selftest runner: boots the two-VM test bed, runs every selftests/tests/*.sh against it,
# prints TAP, fails on any test failure or any kernel splat in either VM's dmesg, and ends with
# "N passed, N failed".
#
#   selftests/run.sh                     every test
#   selftests/run.sh tests/20-ib-client.sh ...   only these (paths relative to selftests/)
#   TB_KEEP=1 selftests/run.sh           keep the VM state dir (default: removed when all pass)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export TB_REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=vm/testbed.sh
source "$HERE/vm/testbed.sh"

if [ $# -gt 0 ]; then tests=("$@"); else tests=("$HERE"/tests/*.sh); fi
[ -f "$TB_REPO/rdmadisk.ko" ] || { echo "run.sh: rdmadisk.ko is not built; run 'make' first" >&2; exit 2; }

n=0 pass=0 fail=0
tap() { # tap ok|not-ok DESCRIPTION
  n=$((n + 1))
  if [ "$1" = ok ]; then pass=$((pass + 1)); echo "ok $n - $2"; else fail=$((fail + 1)); echo "not ok $n - $2"; fi
}

echo "TAP version 13"
t_start=$SECONDS
if ! tb_boot; then
  tap not-ok "test bed boots"
  tb_shutdown
  echo "1..$n"; echo "$pass passed, $fail failed"; exit 1
fi
tap ok "test bed boots (compute + storage, rxe0 on both) in $((SECONDS - t_start))s"

for t in "${tests[@]}"; do
  [ -f "$t" ] || t=$HERE/$t
  name=$(basename "$t" .sh)
  echo "# --- $name"
  t0=$SECONDS
  # A test prints "ok - what" / "not ok - what" lines (and "# ..." comments); the runner numbers
  # them. A test that exits non-zero without reporting a failure fails as a whole.
  out=$(TB_TEST=$name bash -c 'source "$1"; source "$2"' _ "$HERE/vm/testbed.sh" "$t" 2>&1)
  rc=$?
  reported_fail=0
  while IFS= read -r line; do
    case "$line" in
      "ok - "*) tap ok "$name: ${line#ok - }" ;;
      "not ok - "*) tap not-ok "$name: ${line#not ok - }"; reported_fail=1 ;;
      *) printf '# %s\n' "$line" ;;
    esac
  done <<<"$out"
  if [ $rc -ne 0 ] && [ $reported_fail = 0 ]; then tap not-ok "$name: exited with status $rc"; fi
  echo "# $name took $((SECONDS - t0))s"
done

tb_shutdown
for role in compute storage; do
  if [ ! -s "$TB_DIR/$role.dmesg" ]; then
    tap not-ok "$role: dmesg collected"
  elif splats=$(tb_splats "$TB_DIR/$role.dmesg"); then
    tap ok "$role: no kernel splat in dmesg (WARN, BUG, lockdep, KFENCE, kmemleak, hung task)"
  else
    tap not-ok "$role: kernel splats in dmesg"
    printf '#   %s\n' "${splats//$'\n'/$'\n'#   }" | head -n 60
  fi
done

echo "1..$n"
echo "# total $((SECONDS - t_start))s; VM state in $TB_DIR"
echo "$pass passed, $fail failed"
if [ $fail -eq 0 ] && [ -z "${TB_KEEP:-}" ]; then rm -rf "$TB_DIR"; fi
[ $fail -eq 0 ]
