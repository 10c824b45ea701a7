#!/usr/bin/env bash
# Shows that the splat detector works: a run whose only test makes the compute kernel WARN must
# fail, and must fail on the splat check (not on something else).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
echo "TAP version 13"
kdir=$("$REPO/selftests/kernel/build-kernel.sh") || exit 1
if ! make -s -C "$kdir" M="$HERE/warn" RUSTC=/usr/bin/rustc modules >/dev/null; then
  echo "not ok 1 - build the WARN_ON test module"; echo "1..1"; echo "0 passed, 1 failed"; exit 1
fi
export TB_DIR=$REPO/selftests/out/tb.splat-selftest
out=$("$REPO/selftests/run.sh" "$HERE/trigger-warn.sh" 2>&1); rc=$?
sed 's/^/#   /' <<<"$out" | head -n 40
rm -rf "$TB_DIR"
if [ $rc -ne 0 ] && grep -q '^not ok .* compute: kernel splats in dmesg' <<<"$out" &&
   grep -q '^ok .* trigger-warn: loaded a module that hits WARN_ON' <<<"$out" &&
   grep -q '^ok .* storage: no kernel splat' <<<"$out"; then
  echo "ok 1 - a WARN_ON in the compute VM fails the run, on the splat check only"
  echo "1..1"; echo "1 passed, 0 failed"
else
  echo "not ok 1 - a WARN_ON in the compute VM did not fail the run as expected (rc=$rc)"
  echo "1..1"; echo "0 passed, 1 failed"; exit 1
fi
make -s -C "$kdir" M="$HERE/warn" clean >/dev/null 2>&1 || true
