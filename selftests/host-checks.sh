#!/usr/bin/env bash
# Host-side checks: formatting and lints of the module and the userspace tools, the userspace
# unit/integration tests, and a short bounded fuzz of every protocol decoder. TAP output.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
n=0 pass=0 fail=0
report() { # report DESCRIPTION RC OUTPUT: the TAP line of a step and its summary lines
  local desc=$1 rc=$2 out=$3
  if [ $rc -eq 0 ]; then
    pass=$((pass + 1)); echo "ok $n - $desc"
    grep -E '^test result:|passed, [0-9]+ failed|MB/s|execs' <<<"$out" | sed 's/^/#   /'
  else
    fail=$((fail + 1)); echo "not ok $n - $desc"; tail -n 40 <<<"$out" | sed 's/^/#   /'
  fi
}
step() { # step DESCRIPTION CMD...
  local desc=$1 out rc; shift
  n=$((n + 1))
  echo "# [$n] $desc"
  out=$("$@" 2>&1); rc=$?
  report "$desc" $rc "$out"
}
# bg_step DESCRIPTION CMD...: starts CMD now, in the background; bg_wait reports it, in order.
# The RBD tests mostly wait on a Ceph cluster (its daemons' start, a frozen OSD, lock and watch
# timeouts) and use little CPU meanwhile: the lints, unit tests and fuzz run beside them.
BG=$(mktemp -d) || exit 1
trap 'rm -rf "$BG"' EXIT
bg_step() {
  local desc=$1; shift
  echo "$desc" >"$BG/desc"
  ( "$@" >"$BG/out" 2>&1; echo $? >"$BG/rc" ) &
  BG_PID=$!
}
bg_wait() {
  n=$((n + 1))
  echo "# [$n] $(cat "$BG/desc")"
  wait "$BG_PID"
  report "$(cat "$BG/desc")" "$(cat "$BG/rc" 2>/dev/null || echo 1)" "$(cat "$BG/out")"
}
# The module's sources follow the kernel's rustfmt settings. .rustfmt.toml at the top of the
# repository is a verbatim copy of Linux 6.12's (rustfmt on src/ and rust/ finds it by itself),
# so this check needs no kernel tree. When a built test kernel is in the cache, its copy must
# still be the same file.
kernel_rustfmt() {
  local theirs
  for theirs in ${RDMADISK_CACHE:+"$RDMADISK_CACHE"/linux-*/.rustfmt.toml}; do
    [ -f "$theirs" ] || continue
    cmp -s .rustfmt.toml "$theirs" || { echo ".rustfmt.toml differs from the kernel's $theirs"; return 1; }
  done
  rustfmt --edition 2021 --config-path .rustfmt.toml --check src/*.rs src/*/*.rs rust/*.rs rust/*/*.rs
}
echo "TAP version 13"
bg_step "RBD exports against a real Ceph cluster (no VM)" selftests/host/rbd-tests.sh
step "rustfmt: module sources (src/, rust/)" kernel_rustfmt
step "src/: no import cycle, no transport imports the disk" python3 selftests/host/import-graph.py
step "cargo fmt --check (userspace-tools)" bash -c 'cd userspace-tools && cargo fmt --all -- --check'
step "cargo clippy -D warnings (userspace-tools)" bash -c 'cd userspace-tools && cargo clippy --workspace --all-targets --quiet -- -D warnings'
step "cargo test (userspace-tools)" bash -c 'cd userspace-tools && cargo test --workspace'
if [ -x userspace-tools/rdmadisk-proto/fuzz/run.sh ]; then
  step "fuzz every protocol decoder (bounded)" userspace-tools/rdmadisk-proto/fuzz/run.sh "${FUZZ_SECONDS:-5}"
fi
bg_wait
echo "1..$n"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
