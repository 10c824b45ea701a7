#!/usr/bin/env bash
# Runs one test N times in one boot of the test bed, for rates: a flaky result needs tens of
# runs, and a boot per run (as run.sh would) costs minutes each under TCG.
#
#   selftests/repeat.sh N tests/60-rdma-disk-fio.sh
#
# After each run it prints one line: the run's TAP counts, its connection resets line (the
# disk tests' dk_resets_ok, as tests 60 and 62 print it), and what moved on each VM during the run: every soft-RoCE counter
# (rdma statistic), the NIC's packets and drops (ip -s link), the root qdisc's drops, the
# softnet drops and squeezes (/proc/net/softnet_stat) and the UDP and IP error counters
# (/proc/net/snmp), and the host's UDP errors (the link's datagrams dropped between the VMs). The
# same goes, one row per run, to $TB_DIR/repeat.tsv, and each run's
# output to $TB_DIR/<test>.rN.test.log. At the end, as run.sh does, both kernels' logs are read
# and any splat fails the whole.
#
# REPEAT_HOOK=FILE is sourced (in this shell, with the bed up) once after boot with
# REPEAT_PHASE=setup, then before and after each run with REPEAT_PHASE=before|after and
# REPEAT_RUN=N: a place for tracing set-up and its collection. $TB_DIR is always kept. A file
# $TB_DIR/STOP ends the series after the run in progress (the bed is shut down as usual).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TB_REPO=$(cd "$HERE/.." && pwd)
export TB_REPO
# shellcheck source=vm/testbed.sh
source "$HERE/vm/testbed.sh"

[ $# = 2 ] && [[ $1 =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 N TEST" >&2; exit 2; }
runs=$1 t=$2
[ -f "$t" ] || t=$HERE/$t
[ -f "$t" ] || { echo "repeat.sh: no test $2" >&2; exit 2; }
[ -f "$TB_REPO/rdmadisk.ko" ] || { echo "repeat.sh: rdmadisk.ko is not built; run 'make' first" >&2; exit 2; }
(cd "$TB_REPO/userspace-tools" && nice -n 10 cargo build -q --release -p rdmadisk-target -p rdmadisk-testclient) && export DK_BUILT=1
name=$(basename "$t" .sh)
limit=$(sed -n 's/^# timeout: *\([1-9][0-9]*\) *$/\1/p' "$t" | head -n 1)
limit=${TB_TEST_TIMEOUT:-${limit:-900}}

# snap TAG: each VM's counters into $TB_DIR/snap.ROLE.TAG (raw text; parsed on the host), and
# the host's UDP counters: the link is a UDP socket per VM on the host, and a datagram its
# socket had no room for is dropped there (RcvbufErrors), between one VM's NIC and the other's.
snap() {
  local role
  { echo '--- snmp'; cat /proc/net/snmp; } >"$TB_DIR/snap.host.$1"
  for role in compute storage; do
    on "$role" "nic=\$(cat $TB_DIR/$role.nic)
{ rdma statistic show link rxe0/1; echo '--- softnet'; cat /proc/net/softnet_stat
  echo '--- snmp'; cat /proc/net/snmp; echo '--- link'; ip -s -s link show dev \$nic
  echo '--- qdisc'; tc -s qdisc show dev \$nic; } >$TB_DIR/snap.$role.$1 2>&1" >/dev/null
  done
}

# delta A B: the counters that moved from snapshot tag A to B, "role: key=+n ..." per VM
delta() {
  python3 - "$TB_DIR" "$1" "$2" <<'PY'
import re, sys
d, a, b = sys.argv[1:4]
def parse(path):
    try:
        text = open(path).read()
    except OSError:
        return {}
    v, sec = {}, "rdma"
    lines = text.splitlines()
    for i, l in enumerate(lines):
        if l.startswith("--- "):
            sec = l[4:]; continue
        if sec == "rdma":
            w = l.split()
            for k, x in zip(w[2::2], w[3::2]):
                if x.isdigit(): v["rxe." + k] = int(x)
        elif sec == "softnet":
            c = [int(x, 16) for x in l.split()]
            if len(c) > 2:
                v["softnet.dropped"] = v.get("softnet.dropped", 0) + c[1]
                v["softnet.squeezed"] = v.get("softnet.squeezed", 0) + c[2]
        elif sec == "snmp":
            if i + 1 < len(lines) and l.split(":")[0] in ("Udp", "Ip") and not l.split()[1].isdigit():
                ks, xs = l.split()[1:], lines[i + 1].split()[1:]
                for k, x in zip(ks, xs):
                    if k in ("InErrors", "RcvbufErrors", "SndbufErrors", "NoPorts", "InCsumErrors",
                             "InDiscards", "InHdrErrors", "InAddrErrors", "OutDiscards", "ReasmFails"):
                        v[l.split(":")[0] + "." + k] = int(x)
        elif sec == "link":
            m = re.match(r"\s*(RX|TX):\s+(.*)", l)
            if m and i + 1 < len(lines):
                for k, x in zip(m.group(2).split(), lines[i + 1].split()):
                    if x.isdigit(): v[f"nic.{m.group(1).lower()}_{k}"] = int(x)
        elif sec == "qdisc":
            m = re.search(r"dropped (\d+), overlimits (\d+) requeues (\d+)", l)
            if m and "qdisc.dropped" not in v:
                v["qdisc.dropped"], v["qdisc.requeues"] = int(m.group(1)), int(m.group(3))
    return v
keep = ("rxe.", "softnet.", "Udp.", "Ip.", "qdisc.dropped", "nic.rx_packets", "nic.tx_packets",
        "nic.rx_dropped", "nic.tx_dropped", "nic.rx_errors", "nic.tx_errors", "nic.rx_missed", "nic.rx_over")
for role in ("compute", "storage", "host"):
    x, y = parse(f"{d}/snap.{role}.{a}"), parse(f"{d}/snap.{role}.{b}")
    moved = [f"{k}=+{y[k] - x.get(k, 0)}" for k in sorted(y) if k.startswith(keep) and y[k] != x.get(k, 0)]
    print(f"{role}: " + (" ".join(moved) or "(nothing moved)"))
PY
}

hook() { # hook PHASE [RUN]
  [ -n "${REPEAT_HOOK:-}" ] || return 0
  # shellcheck disable=SC1090
  REPEAT_PHASE=$1 REPEAT_RUN=${2:-} source "$REPEAT_HOOK"
}

echo "# repeat.sh: $runs runs of $name in one boot"
if ! tb_boot; then echo "not ok - test bed boots"; tb_shutdown; exit 1; fi
echo "# bed up; state in $TB_DIR"
hook setup
printf 'run\tok\tnot_ok\tsecs\tload1\treset_lines\tresets\tcompute\tstorage\thost\n' >"$TB_DIR/repeat.tsv"
snap r0
total_bad=0 runs_with_reset=0 runs_failed=0
for ((i = 1; i <= runs; i++)); do
  hook before "$i"
  k0=$(stat -c %s "$TB_DIR/compute.kmsg" 2>/dev/null)
  log=$TB_DIR/$name.r$i.test.log
  t0=$SECONDS
  # shellcheck disable=SC2016 # the arguments of bash -c
  TB_TEST=$name.r$i timeout -k 10 "$limit" bash -c 'source "$1"; source "$2"' _ "$HERE/vm/testbed.sh" "$t" \
    >"$log" 2>&1 </dev/null
  rc=$? secs=$((SECONDS - t0))
  read -r load1 _ </proc/loadavg
  hook after "$i"
  snap "r$i"
  ok=$(grep -c '^ok - ' "$log") bad=$(grep -c '^not ok - ' "$log")
  [ "$rc" = 0 ] || [ "$bad" -gt 0 ] || bad=1
  # The connection resets the driver logged during the run (the streamed log may lag a little).
  nreset=$(tail -c +$((${k0:-0} + 1)) "$TB_DIR/compute.kmsg" 2>/dev/null | grep -c 'resetting the connection')
  resets=$(sed -En 's/^(not )?ok - (no )?connection resets?: (.*) \[[0-9]+s\]$/\3/p' "$log" | head -n 1)
  d=$(delta "r$((i - 1))" "r$i")
  c=$(sed -n 's/^compute: //p' <<<"$d") s=$(sed -n 's/^storage: //p' <<<"$d") h=$(sed -n 's/^host: //p' <<<"$d")
  [ "$bad" -gt 0 ] && runs_failed=$((runs_failed + 1))
  case $resets in *"reconnects=0 requeued=0"*) [ "$nreset" = 0 ] || runs_with_reset=$((runs_with_reset + 1)) ;;
    *) runs_with_reset=$((runs_with_reset + 1)) ;; esac
  total_bad=$((total_bad + bad))
  echo "# run $i/$runs: ${secs}s, load $load1, $ok ok, $bad not ok (rc $rc)"
  echo "#   resets: ${resets:-(no line)}; 'resetting the connection' lines in this run: $nreset"
  echo "#   compute: $c"
  echo "#   storage: $s"
  echo "#   host: $h"
  grep '^not ok - ' "$log" | sed 's/^/#   /'
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$ok" "$bad" "$secs" "$load1" "$nreset" "$resets" "$c" "$s" "$h" >>"$TB_DIR/repeat.tsv"
  # As run.sh: a dead VM or a wedged agent ends the series; a stuck QP1 is re-created.
  for role in compute storage; do
    if ! kill -0 "$(cat "$TB_DIR/$role.pid")" 2>/dev/null || ! tb_agent_ok "$role"; then
      echo "not ok - $role VM gone or stuck after run $i"; tb_shutdown; exit 1
    fi
  done
  tb_qp1_heal | sed "s/^/# after run $i: /"
  if [ -e "$TB_DIR/STOP" ]; then echo "# $TB_DIR/STOP: ending after run $i"; runs=$i; break; fi
done

# The kernel logs, as run.sh reads them.
pids=()
for role in compute storage; do tb_collect_dmesg "$role" & pids+=($!); done
wait "${pids[@]}"
splat=0
for role in compute storage; do
  logs=("$TB_DIR/$role.kmsg"); [ -e "$TB_DIR/$role.dmesg" ] && logs+=("$TB_DIR/$role.dmesg")
  if ! out=$(tb_splats "${logs[@]}"); then splat=1; echo "# $role: kernel splats:"; head -n 40 <<<"$out" | sed 's/^/#   /'; fi
done
tb_shutdown
echo "# $runs runs of $name: $runs_failed with a failed check, $runs_with_reset with a connection reset; splats: $splat; rows in $TB_DIR/repeat.tsv"
[ "$runs_failed" = 0 ] && [ "$splat" = 0 ]
