#!/usr/bin/env bash
# make bench-transport: the TCP path against the RDMA path in the test bed, in the same run.
# 1. fio 4 KiB random reads at queue depth 1 and 16 with transport=rdma, then transport=tcp,
#    BENCH_REPS times (default 3), alternating, with the ratios TCP/RDMA (IOPS and mean
#    completion latency): the median of the repetitions' and their spread.
# 2. The longest I/O gap during one NIC servicing cycle: transport=auto, fio 4 KiB random
#    reads at queue depth 1 logging every completion (--write_lat_log), while the compute VM's
#    rxe0 is deleted and, once the disk is on TCP, added back; the gap is the longest time
#    between two completions, in ms.
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
TB_TEST=bench-transport
# shellcheck source-path=SCRIPTDIR source=../tests/lib/disk.sh
source "$HERE/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=../tests/lib/transport.sh
source "$HERE/tests/lib/transport.sh"
dk_build || exit 1
back=$(dk_backing bench0 64M) && dk_target_start --export "bench0=$back" >/dev/null || exit 1
if ! dk_load || ! dk_map_disk b0 bench0; then dk_cleanup; exit 1; fi
A=/sys/block/$DK_DEV/rdmadisk
echo "# filling the first 32 MiB so that reads return written data"
on compute "dd if=/dev/urandom of=/dev/$DK_DEV bs=1M count=32 oflag=direct status=none"

use() { # use rdma|tcp|auto: sets transport and waits until that transport carries the disk
  local want=$1
  [ "$want" = auto ] && want=rdma
  on compute "echo $1 >$A/transport" || return 1
  tr_wait "use-$1" "$DK_DEV" 120 "$want" || { echo "not on $want after 120 s: $TR_WAIT"; return 1; }
}

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$HERE/bench/lib.sh"
REPS=${BENCH_REPS:-3}
declare -A R
# The transports alternate within each repetition, so a drift of the host between
# repetitions cancels in that repetition's ratio; the ratio is given as the median of the
# repetitions' with their spread.
for ((rep = 1; rep <= REPS; rep++)); do
  for t in rdma tcp; do
    use "$t" || { dk_cleanup; exit 1; }
    for qd in 1 16; do
      line=$(job "${t}_qd$qd" --rw=randread --bs=4k --iodepth=$qd) || { echo "fio failed: $t qd $qd"; dk_cleanup; exit 1; }
      echo "rep $rep: $line"
      R[${t}_qd${qd}_$rep]=$line
    done
  done
done
ratio() { # ratio A B FIELD: A's FIELD over B's in each repetition: "median (min-max)"
  local r args=()
  for ((r = 1; r <= REPS; r++)); do args+=("${R[${1}_$r]}" "${R[${2}_$r]}"); done
  python3 -c "
import statistics, sys
f, v = sys.argv[1], sys.argv[2:]
get = lambda x: float(x.split(f + '=')[1].split()[0])
rs = [get(a) / get(b) for a, b in zip(v[::2], v[1::2])]
print(f'{statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f}, {len(rs)} repetitions)')" "$3" "${args[@]}"
}
for qd in 1 16; do
  echo "ratio 4k randread qd$qd tcp/rdma: iops $(ratio tcp_qd$qd rdma_qd$qd iops)  clat $(ratio tcp_qd$qd rdma_qd$qd clat_us)"
done

# 2. One NIC servicing cycle under 4 KiB reads at queue depth 1.
use auto || { dk_cleanup; exit 1; }
GAP_SECS=${BENCH_GAP_SECS:-90}
log=$TB_DIR/bench-gap
on compute "rm -f ${log}_*.log; setsid fio --name=gap --filename=/dev/$DK_DEV --ioengine=libaio --direct=1 --allow_file_create=0 --size=32M \
  --rw=randread --bs=4k --iodepth=1 --time_based --runtime=$GAP_SECS --write_lat_log=$log --log_avg_msec=0 \
  --output-format=json --output=$log.json </dev/null >$log.err 2>&1 & echo \$! >$log.pid"
sleep 10
read -r tio <<<"$(tr_stat "$DK_DEV" tcp_ios)"
TR_PRE="T0=\$(date +%s%N); rdma link delete $TR_RXE || exit 1; echo DEL ms=\$(( (\$(date +%s%N) - T0) / 1000000 ))"
tr_wait gap-tcp "$DK_DEV" 60 tcp tcp_ios "${tio:-0}" >/dev/null
echo "rdma link delete: $(grep '^DEL' <<<"$TR_OUT"); on TCP: $TR_WAIT"
read -r rio <<<"$(tr_stat "$DK_DEV" rdma_ios)"
TR_PRE="T0=\$(date +%s%N); rdma link add $TR_RXE type rxe netdev $(tr_nic) || exit 1"
tr_wait gap-rdma "$DK_DEV" 60 rdma rdma_ios "${rio:-0}" >/dev/null
TR_PRE=
echo "rdma link add; back on RDMA: $TR_WAIT"
tr_rxe_restore
on compute "p=\$(cat $log.pid); while kill -0 \$p 2>/dev/null; do sleep 1; done"
# clat log lines: "time_ms, clat_ns, ddir, bs, ..."; time is the completion time since start
python3 - "$log"_clat.1.log <<'PY'
import sys
try:
    t = [int(l.split(",")[0]) for l in open(sys.argv[1]) if l.strip()]
except OSError as e:
    sys.exit(f"no completion log: {e}")
t.sort()
gaps = sorted(((b - a, a) for a, b in zip(t, t[1:])), reverse=True)
if not gaps:
    sys.exit("fewer than two completions logged")
med = sorted(b - a for a, b in zip(t, t[1:]))[len(t) // 2 - 1]
print(f"NIC servicing cycle at 4k randread qd1: {len(t)} completions over {t[-1] / 1000:.1f} s; "
      f"longest I/O gap {gaps[0][0]} ms (at {gaps[0][1] / 1000:.1f} s), next {', '.join(str(g) for g, _ in gaps[1:4])} ms; median gap {med} ms")
PY
dk_csnap "$DK_DEV"
echo "client: $(grep -E '^(failovers|failbacks|rdma_ios|tcp_ios|switch_requeued|probes|probe_failures|tcp_connects|io_errors)=' <<<"$DK_CS" | tr '\n' ' ')"
dk_cleanup
tr_rxe_restore
