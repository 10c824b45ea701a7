#!/usr/bin/env bash
# The selftest runner: boots the two-VM test bed, runs every selftests/tests/*.sh against it,
# prints TAP, fails on any test failure or any kernel splat in either VM's dmesg, and ends with
# "N passed, N failed".
#
#   selftests/run.sh                     every test
#   selftests/run.sh tests/20-ib-client.sh ...   only these (paths relative to selftests/)
#   TB_KEEP=1 selftests/run.sh           keep the VM state dir (default: removed when all pass)
#
# Each test has a time limit: TB_TEST_TIMEOUT seconds if set (then for every test), else the
# test's own "# timeout: N" header line, else 900 s. A test past its limit is killed (its whole
# process group) and reported "not ok - NAME: timed out after N s", and what it left in the VMs
# is cleaned up (after_timeout). A test that reports no "ok" or "not ok" line at all fails too.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TB_REPO=$(cd "$HERE/.." && pwd)
export TB_REPO
TB_TEST_TIMEOUT_DEFAULT=900
# shellcheck source=vm/testbed.sh
source "$HERE/vm/testbed.sh"

if [ $# -gt 0 ]; then tests=("$@"); else tests=("$HERE"/tests/*.sh); fi
[ -f "$TB_REPO/rdmadisk.ko" ] || { echo "run.sh: rdmadisk.ko is not built; run 'make' first" >&2; exit 2; }
# The userspace target and test client, built (or found current) once for the run instead of once per test; if
# this fails, each test's dk_build tries again and reports it.
(cd "$TB_REPO/userspace-tools" && nice -n 10 cargo build -q --release -p rdmadisk-target -p rdmadisk-testclient) && export DK_BUILT=1

n=0 pass=0 fail=0 stuck=
tap() { # tap ok|not-ok DESCRIPTION
  n=$((n + 1))
  if [ "$1" = ok ]; then pass=$((pass + 1)); echo "ok $n - $2"; else fail=$((fail + 1)); echo "not ok $n - $2"; fi
}

# report PREFIX: numbers the "ok - " / "not ok - " lines read from stdin (as PREFIX + the
# rest) and passes the others on as comments; sets REPORTED and REPORTED_FAIL (0 or 1)
report() {
  local line
  REPORTED=0 REPORTED_FAIL=0
  while IFS= read -r line; do
    case "$line" in
      "ok - "*) tap ok "$1${line#ok - }"; REPORTED=1 ;;
      "not ok - "*) tap not-ok "$1${line#not ok - }"; REPORTED=1 REPORTED_FAIL=1 ;;
      *) printf '# %s\n' "$line" ;;
    esac
  done
}

# after_timeout NAME: what a killed (or early-exited) test left in the VMs (its fio runs, unmounted mounts, mapped
# disks, the module, its target and backing files, a deleted rxe0), cleaned up with the disk
# tests' helpers, best effort and bounded (60 s a command, 300 s in all), so the next tests
# start from a clean bed. Its output goes to the test's log.
after_timeout() {
  # shellcheck disable=SC2016 # the arguments of bash -c
  TB_TEST=$1 TB_CMD_TIMEOUT=60 timeout -k 10 300 bash -c 'source "$1"; source "$2"; source "$3"; tr_rxe_restore; dk_cleanup' \
    _ "$HERE/vm/testbed.sh" "$HERE/tests/lib/disk.sh" "$HERE/tests/lib/transport.sh" >>"$TB_DIR/$1.test.log" 2>&1 </dev/null
}

# test_limit FILE: the test's time limit in seconds (see the top of this file)
test_limit() {
  local h
  if [[ ${TB_TEST_TIMEOUT:-} =~ ^[1-9][0-9]*$ ]]; then echo "$TB_TEST_TIMEOUT"; return; fi
  h=$(sed -n 's/^# timeout: *\([1-9][0-9]*\) *$/\1/p' "$1" | head -n 1)
  echo "${h:-$TB_TEST_TIMEOUT_DEFAULT}"
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
  limit=$(test_limit "$t")
  echo "# --- $name (time limit ${limit}s)"
  t0=$SECONDS
  # A test prints "ok - what" / "not ok - what" lines (and "# ..." comments); the runner numbers
  # them. A test that exits non-zero without reporting a failure fails as a whole, and so does
  # one that reports nothing. timeout(1) runs the test in a process group of its own and at the
  # limit signals all of it: SIGTERM, then SIGKILL 10 s later. The output is kept in
  # $TB_DIR/NAME.test.log.
  log=$TB_DIR/$name.test.log
  # shellcheck disable=SC2016 # the arguments of bash -c
  TB_TEST=$name timeout -k 10 "$limit" bash -c 'source "$1"; source "$2"' _ "$HERE/vm/testbed.sh" "$t" \
    >"$log" 2>&1 </dev/null
  rc=$?
  took=$((SECONDS - t0))
  timed_out=0
  if { [ $rc = 124 ] || [ $rc = 137 ]; } && [ "$took" -ge "$limit" ]; then timed_out=1; fi
  report "$name: " <"$log"
  if [ $timed_out = 1 ]; then
    tap not-ok "$name: timed out after $limit s"
    t1=$SECONDS; after_timeout "$name"
    echo "# $name: cleanup after the timeout (status $?, $((SECONDS - t1))s)"
  elif [ $rc -ne 0 ] && [ "$REPORTED_FAIL" = 0 ]; then
    tap not-ok "$name: exited with status $rc"
    # It stopped half-way: what it left (mapped disks, mounts, the module, fio) would fail the
    # tests after it.
    t1=$SECONDS; after_timeout "$name"
    echo "# $name: cleanup after the early exit (status $?, $((SECONDS - t1))s)"
  elif [ "$REPORTED" = 0 ]; then
    tap not-ok "$name: reported no result (no 'ok' or 'not ok' line)"
  fi
  echo "# $name took ${took}s"
  # A VM that died (a kernel panic) fails every later test: stop here, and show why it died.
  gone=
  for role in compute storage; do
    kill -0 "$(cat "$TB_DIR/$role.pid")" 2>/dev/null && continue
    gone+="$role "
    tap not-ok "$role VM still up after $name"
    l=$(grep -n -m1 -E "$TB_SPLAT_RE" "$TB_DIR/$role.console" | cut -d: -f1)
    if [ -n "$l" ]; then
      tail -n +"$((l > 20 ? l - 20 : 1))" "$TB_DIR/$role.console" | head -n 80
    else
      tail -n 40 "$TB_DIR/$role.console"
    fi | sed 's/^/#   console: /'
  done
  if [ -n "$gone" ]; then echo "# stopping: the ${gone}VM is gone"; break; fi
  # A VM whose agent no longer answers (a command stuck in the kernel) would make every later
  # test wait out its time limit: stop here too. Its streamed kernel log is still read below.
  for role in compute storage; do
    tb_agent_ok "$role" && continue
    stuck+="$role "
    tap not-ok "$role VM still answers commands after $name"
    tail -n 40 "$TB_DIR/$role.kmsg" 2>/dev/null | sed 's/^/#   kmsg: /'
  done
  if [ -n "$stuck" ]; then echo "# stopping: the ${stuck}VM no longer answers"; break; fi
  # A soft-RoCE device whose QP1 died in this test (TESTBED.md) would fail every later RDMA
  # test: re-created here, and said (a diagnostic: the test that caused it has its verdict).
  tb_qp1_heal | sed "s/^/# after $name: /"
done

# The kernel logs: what each VM's agent streamed (dmesg -w, readable even when a command
# wedged the agent) and the log read at the end after a kmemleak scan.
# Both at once: each scan takes a VM many seconds. (Only these two are waited for: a test,
# sourced into this shell, may have left a job of its own.)
pids=()
for role in compute storage; do
  case " $stuck " in *" $role "*) echo "agent stuck" >"$TB_DIR/$role.dmesg.rc"; continue ;; esac
  if kill -0 "$(cat "$TB_DIR/$role.pid")" 2>/dev/null; then tb_collect_dmesg "$role" & pids+=($!); fi
done
[ ${#pids[@]} = 0 ] || wait "${pids[@]}"
for role in compute storage; do
  rc=$(cat "$TB_DIR/$role.dmesg.rc" 2>/dev/null)
  if [ "$rc" != 0 ] || [ ! -s "$TB_DIR/$role.dmesg" ]; then
    tap not-ok "$role: kmemleak scan and kernel log read at the end (status ${rc:-none})"
  fi
  logs=("$TB_DIR/$role.kmsg")
  [ -e "$TB_DIR/$role.dmesg" ] && logs+=("$TB_DIR/$role.dmesg")
  splats=$(tb_splats "${logs[@]}")
  case $? in
    0) tap ok "$role: no kernel splat in dmesg (WARN, BUG, lockdep, KFENCE, kmemleak, hung task)" ;;
    1) tap not-ok "$role: kernel splats in dmesg"
       printf '#   %s\n' "${splats//$'\n'/$'\n'#   }" | head -n 60 ;;
    *) tap not-ok "$role: kernel log unreadable (${role}.kmsg or ${role}.dmesg)" ;;
  esac
  # The taint flags catch a warning whose log line was lost (before the splat self-test,
  # which taints on purpose).
  if [ "$(cat "$TB_DIR/$role.dmesg.rc" 2>/dev/null)" = 0 ]; then
    taint=$(tb_tainted "$role")
    [ "$taint" = 0 ]
    tap "$([ $? = 0 ] && echo ok || echo not-ok)" "$role: kernel not tainted (flags beyond out-of-tree modules: ${taint:-unreadable})"
  fi
done

# The splat detector's own test (TB_SPLAT_SELFTEST=1, as make check runs it), after the
# verdicts above: a module that hits WARN_ON is loaded in the compute VM, and the detector must
# find that WARN in the log read the same way.
if [ -n "${TB_SPLAT_SELFTEST:-}" ]; then
  ko=$TB_REPO/selftests/harness/warn/rdmadisk_warn_test.ko
  # The log from a mark on (the ring buffer may have wrapped since it was read).
  if on compute "echo rdmadisk-splat-selftest-mark >/dev/kmsg && insmod $ko && rmmod rdmadisk_warn_test" >/dev/null 2>&1 &&
    on compute "dmesg | sed -n '/rdmadisk-splat-selftest-mark/,\$p'" >"$TB_DIR/compute.dmesg.warn" 2>&1; then
    hits=$(tb_splats "$TB_DIR/compute.dmesg.warn")
    st=$?
    [ $st = 1 ] && grep -q 'rdmadisk_warn_test' <<<"$hits"
    tap "$([ $? = 0 ] && echo ok || echo not-ok)" "splat detector self-test: a WARN_ON from a test module in the compute VM is found ($(head -n 1 <<<"$hits"))"
  else
    tap not-ok "splat detector self-test: could not load the WARN_ON module in the compute VM"
  fi
fi
tb_shutdown

echo "1..$n"
echo "# total $((SECONDS - t_start))s; VM state in $TB_DIR"
echo "$pass passed, $fail failed"
if [ $fail -eq 0 ] && [ -z "${TB_KEEP:-}" ]; then rm -rf "$TB_DIR"; fi
[ $fail -eq 0 ]
