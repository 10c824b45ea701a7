#!/usr/bin/env bash
# make check: every test, host and test bed, with progress and one closing summary line.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
t0=$SECONDS
step() { echo "=== [$((SECONDS - t0))s] $*"; }
P=0 F=0
tally() { # tally LOGFILE: add the closing "N passed, N failed" of a suite
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)
  if [ -z "$line" ]; then F=$((F + 1)); return; fi
  P=$((P + $(cut -d' ' -f1 <<<"$line"))); F=$((F + $(cut -d' ' -f3 <<<"$line")))
}
mkdir -p selftests/out

step "host dependencies"; selftests/host/deps.sh || exit 1
step "test kernel (built once, then cached)"; selftests/kernel/build-kernel.sh >/dev/null || exit 1
step "rdmadisk.ko"
# A warning (rustc's, objtool's, modpost's) fails the check: the build of a fresh clone is a
# full one, so it shows every warning there is.
kout=$(make --no-print-directory module 2>&1) || { printf '%s\n' "$kout"; exit 1; }
printf '%s\n' "$kout"
if grep -q 'warning' <<<"$kout"; then echo "the module's build warned (above)"; exit 1; fi
step "userspace tools"; make --no-print-directory userspace || exit 1

step "host checks"
selftests/host-checks.sh | tee selftests/out/host.log; tally selftests/out/host.log

step "the WARN_ON module for the splat detector's self-test"
kdir=$(selftests/kernel/build-kernel.sh) && make -s -C "$kdir" M="$REPO/selftests/harness/warn" RUSTC=/usr/bin/rustc modules >/dev/null || exit 1

step "test bed (every test, then the splat detector's self-test)"
TB_SPLAT_SELFTEST=1 selftests/run.sh | tee selftests/out/vm.log; tally selftests/out/vm.log

step "done in $((SECONDS - t0))s"
echo "$P passed, $F failed"
[ "$F" -eq 0 ]
