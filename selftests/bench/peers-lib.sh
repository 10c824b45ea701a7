# shellcheck shell=bash
# rdmadisk against its peers on one link, in one run: the systems, the workloads and the
# samples. Sourced after vm/testbed.sh, tests/lib/disk.sh and tests/lib/transport.sh, in a
# booted test bed; used by bench/peers.sh (make bench) and by tests/95-bench-smoke.sh.
#
# Every system serves the same block device on the storage VM (BP_BDEV: a brd RAM disk when
# the VMs were booted with one, else a loop device over a tmpfs file):
#   rdmadisk-rdma, rdmadisk-tcp  rdmadisk-target exporting it (bench) and its twin (bench-tcp:
#                                BP_BDEV_TCP, the second RAM disk or loop device of the same
#                                size: the target holds each device exclusively); a disk of
#                                each, queues=2 poll_queues=1, one kept on rdma and the other on
#                                tcp for the whole run, as nvme-rdma and nvme-tcp each have their
#                                own controller: no job starts after a transport switch
#   nvme-rdma, nvme-tcp          nvmet (configfs) exporting it as a namespace; nvme connect
#                                -i 2 -P 1
#   rnbd                         rnbd-server exporting it over RTRS; rnbd-client mapping it
#                                with nr_poll_queues=1
# The RBD set serves images of one Ceph cluster on the storage VM's loopback instead
# (selftests/ceph/cluster.sh, a bluestore OSD), one image a system, each filled with the same
# random data (each system holds or maps its image on its own):
#   rdmadisk-rbd                 rdmadisk over RDMA, the target serving rbd/bench-rdmadisk
#                                through librbd
#   nvme-rdma-krbd               nvme-rdma to nvmet serving /dev/rbdN: rbd/bench-krbd mapped on
#                                the storage VM by the kernel's RBD client, the kernel way to an
#                                RBD gateway
#   fio-rbd                      fio's rbd engine (librbd) on the storage VM, on rbd/bench-fio:
#                                the floor, with no network between the client and the gateway
# Two interrupt-driven hardware queues each, and one poll queue for the polled job.
# Samples are JSON lines in $BP_SAMPLES: one per fio job, with the job's figures and the
# client VM's CPU time per I/O (from /proc/stat, so it includes the driver's softirq and
# workqueue time, not only fio's).

BP_NQN=nqn.2026-11.io.rdmadisk:bench
BP_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:8f4a2c1e-5b7d-4e3a-9c61-2d0b7e9f1a35
BP_NVME_RDMA_PORT=4420
BP_NVME_TCP_PORT=4421
BP_SIZE_MB=64
declare -A BP_DEV=()
BP_NQN_RBD=$BP_NQN-krbd
BP_CEPH=/run/rdmadisk-bench-ceph
BP_RBD_MB=32
# shellcheck disable=SC2034 # used by bench/peers.sh and tests/95-bench-smoke.sh
BP_RBD_SYSTEMS="rdmadisk-rbd nvme-rdma-krbd fio-rbd"

bp_log() { echo "# [bench] $*"; }

# bp_backing: BP_BDEV on the storage VM, filled with random data (so that reads return data).
# The VM agent merges stderr into stdout: a device name is read from its own DEV= line.
bp_dev_line() { sed -n 's/^DEV=//p' | tail -n1; }

bp_backing() {
  BP_LOOP_FILES="$DK_BACKDIR/$DK_ID-bench.img $DK_BACKDIR/$DK_ID-bench-tcp.img"
  local devs
  devs=$(on storage "set -- $BP_LOOP_FILES
for n in 0 1; do
  if [ -b /dev/ram\$n ] && [ \$(blockdev --getsize64 /dev/ram\$n) -ge $((BP_SIZE_MB << 20)) ]; then echo DEV\$n=/dev/ram\$n
  else mkdir -p $DK_BACKDIR && rm -f \$1 && truncate -s ${BP_SIZE_MB}M \$1 && echo DEV\$n=\$(losetup -f --show \$1); fi
  shift
done")
  BP_BDEV=$(sed -n 's/^DEV0=//p' <<<"$devs") BP_BDEV_TCP=$(sed -n 's/^DEV1=//p' <<<"$devs")
  [ -n "$BP_BDEV" ] && [ -n "$BP_BDEV_TCP" ] || return 1
  # shellcheck disable=SC2034 # read by bench/peers.sh and tests/95-bench-smoke.sh
  BP_KIND=$([ "$BP_BDEV" = /dev/ram0 ] && echo "a brd RAM disk" || echo "a loop device over a tmpfs file")
  on storage "dd if=/dev/urandom of=$BP_BDEV bs=1M count=$BP_SIZE_MB oflag=direct status=none &&
dd if=$BP_BDEV of=$BP_BDEV_TCP bs=1M count=$BP_SIZE_MB iflag=direct oflag=direct status=none" || return 1
  bp_log "backing: $BP_BDEV ($BP_SIZE_MB MiB) for every system; rdmadisk-tcp's: $BP_BDEV_TCP, a copy"
}

# bp_setup_ceph: the RBD set's cluster and its three images, filled with random data
# (BP_RBD_FILL=0: left sparse, which reads as zeroes, for a smoke); BP_CEPH_ARGS, the target's
# options to reach it.
bp_setup_ceph() {
  [ -z "${BP_CEPH_ARGS:-}" ] || return 0
  local env
  env=$(on storage "CEPH_NETNS=none CEPH_STORE=bluestore $TB_REPO/selftests/ceph/cluster.sh start $BP_CEPH 2>$BP_CEPH.err || { cat $BP_CEPH.err; exit 1; }
f='--image-feature layering,exclusive-lock'
[ ${BP_RBD_FILL:-1} = 0 ] || head -c $((BP_RBD_MB << 20)) /dev/urandom >$BP_CEPH.img || exit 1
for i in rdmadisk krbd fio; do
  if [ ${BP_RBD_FILL:-1} = 0 ]; then rbd -c $BP_CEPH/ceph.conf create \$f --size ${BP_RBD_MB}M rbd/bench-\$i
  else rbd -c $BP_CEPH/ceph.conf import \$f $BP_CEPH.img rbd/bench-\$i; fi >/dev/null 2>&1 || exit 1
done
rm -f $BP_CEPH.img; echo IMAGES=ok") && grep -q IMAGES=ok <<<"$env" || { echo "ceph: $env"; return 1; }
  BP_CEPH_ARGS="--ceph-conf $(kv CEPH_CONF "$env") --ceph-client $(kv CEPH_CLIENT "$env") --ceph-keyring $(kv CEPH_KEYRING "$env")"
  bp_log "ceph: a cluster on the storage VM's loopback, images rbd/bench-{rdmadisk,krbd,fio} of $BP_RBD_MB MiB"
}

# bp_target SYSTEM...: rdmadisk-target, once, with the exports of the rdmadisk systems listed.
bp_target() {
  [ -z "${BP_TARGET_UP:-}" ] || return 0
  local args=
  [[ " $* " != *" rdmadisk-rdma "* && " $* " != *" rdmadisk-tcp "* ]] ||
    args+=" --export bench=$BP_BDEV --export bench-tcp=$BP_BDEV_TCP"
  [[ " $* " != *" rdmadisk-rbd "* ]] || args+=" --export bench-rbd=rbd:rbd/bench-rdmadisk $BP_CEPH_ARGS"
  # shellcheck disable=SC2086 # options, word-split
  dk_target_start $args ${BENCH_TARGET_ARGS:-} >/dev/null || return 1
  dk_load || return 1
  BP_TARGET_UP=1
}

bp_setup_rdmadisk_rbd() {
  dk_map_disk bench-rbd bench-rbd "queues=2 poll_queues=1" || return 1
  BP_DEV[rdmadisk-rbd]=$DK_DEV
  on compute "echo rdma >/sys/block/$DK_DEV/rdmadisk/transport" || return 1
  bp_on_transport rdmadisk-rbd
}

# bp_setup_krbd: rbd/bench-krbd mapped by the storage VM's kernel, served by nvmet on the
# nvme-rdma port, connected from the compute VM.
bp_setup_krbd() {
  local rdev
  rdev=$(on storage "rbd -c $BP_CEPH/ceph.conf device map rbd/bench-krbd 2>&1 | tail -n1") &&
    [[ $rdev == /dev/rbd* ]] || { echo "rbd device map: $rdev"; return 1; }
  BP_KRBD=$rdev
  bp_nvmet_subsys "$BP_NQN_RBD" "$rdev" && bp_nvmet_ports &&
    bp_nvme_connect rdma $BP_NVME_RDMA_PORT "$BP_NQN_RBD" nvme-rdma-krbd
}

bp_setup_rdmadisk() {
  local t
  for t in rdma tcp; do
    dk_map_disk "bench-$t" "$([ $t = rdma ] && echo bench || echo bench-tcp)" "queues=2 poll_queues=1" || return 1
    BP_DEV[rdmadisk-$t]=$DK_DEV
    on compute "echo $t >/sys/block/$DK_DEV/rdmadisk/transport" || return 1
    bp_on_transport "rdmadisk-$t" || return 1
  done
}

# bp_on_transport rdmadisk-rdma|rdmadisk-tcp: the disk is on its transport (each stays on its
# own for the whole run; one that fell off is waited for, and the wait is logged).
bp_on_transport() {
  local t=${1#rdmadisk-} dev=${BP_DEV[$1]}
  [ "$t" != rbd ] || t=rdma
  [ "$(tr_get "$dev" active_transport)" = "$t" ] && return 0
  tr_wait "bench-$t" "$dev" 120 "$t" >/dev/null || { echo "rdmadisk: /dev/$dev not on $t after 120 s: $TR_WAIT"; return 1; }
  bp_log "$1: /dev/$dev was not on $t; waited: $TR_WAIT"
}

# bp_nvmet_subsys NQN DEVICE: an nvmet subsystem with DEVICE as its namespace 1.
bp_nvmet_subsys() {
  on storage "set -e
cd /sys/kernel/config/nvmet
mkdir -p subsystems/$1/namespaces/1
echo 1 >subsystems/$1/attr_allow_any_host
echo $2 >subsystems/$1/namespaces/1/device_path
echo 1 >subsystems/$1/namespaces/1/enable" || return 1
}

# bp_nvmet_ports: the nvme-rdma and nvme-tcp ports (once), each offering every bench subsystem.
bp_nvmet_ports() {
  on storage "set -e
cd /sys/kernel/config/nvmet
for p in 1:rdma:$BP_NVME_RDMA_PORT 2:tcp:$BP_NVME_TCP_PORT; do
  IFS=: read -r id tr port <<<\"\$p\"
  if [ ! -d ports/\$id ]; then
    mkdir ports/\$id
    echo \$tr >ports/\$id/addr_trtype; echo ipv4 >ports/\$id/addr_adrfam
    echo $DK_S >ports/\$id/addr_traddr; echo \$port >ports/\$id/addr_trsvcid
  fi
  for s in subsystems/*; do
    [ -e ports/\$id/subsystems/\${s#subsystems/} ] || ln -s /sys/kernel/config/nvmet/\$s ports/\$id/subsystems/
  done
done" || return 1
}

bp_setup_nvmet() {
  bp_nvmet_subsys "$BP_NQN" "$BP_BDEV" && bp_nvmet_ports
}

# bp_nvme_connect rdma|tcp PORT [NQN [SYSTEM]]: connects to NQN (BP_NQN) with two I/O queues;
# sets BP_DEV[SYSTEM] (nvme-$1). nvme-rdma is a module in the bench kernel (BP_KDIR's build),
# loaded here.
bp_nvme_connect() {
  local dev nqn=${3:-$BP_NQN}
  dev=$(on compute "[ $1 != rdma ] || test -d /sys/module/nvme_rdma || insmod ${BP_KDIR:-/nonexistent}/drivers/nvme/host/nvme-rdma.ko || exit 1
nvme connect -t $1 -a $DK_S -s $2 -n $nqn --hostnqn=$BP_HOSTNQN -i 2 -P 1 || exit 1
for i in \$(seq 100); do
  for c in /sys/class/nvme/nvme*; do
    [ \"\$(cat \$c/subsysnqn 2>/dev/null)\" = $nqn ] && [ \"\$(cat \$c/transport 2>/dev/null)\" = $1 ] || continue
    for n in \$c/nvme*n*; do [ -e \"\$n\" ] && [ -b /dev/\${n##*/} ] && { echo DEV=\${n##*/}; exit 0; }; done
  done
  sleep 0.1
done
exit 1" | bp_dev_line)
  [ -n "$dev" ] || { echo "nvme connect -t $1 -n $nqn failed"; return 1; }
  BP_DEV[${4:-nvme-$1}]=$dev
}

bp_setup_rnbd() {
  on storage "test -d /sys/module/rnbd_server" || { echo "no rnbd_server in this kernel"; return 1; }
  local dev
  # The client links each mapping as ctl/devices/<device path, / as !>@<session>.
  dev=$(on compute "echo 'sessname=bench path=ip:$DK_S device_path=$BP_BDEV access_mode=rw nr_poll_queues=1' >/sys/devices/virtual/rnbd-client/ctl/map_device || exit 1
l=/sys/devices/virtual/rnbd-client/ctl/devices/${BP_BDEV//\//!}@bench
for i in \$(seq 100); do
  d=\$(basename \"\$(readlink -f \$l 2>/dev/null)\")
  [ -n \"\$d\" ] && [ -b /dev/\$d ] && { echo DEV=\$d; exit 0; }
  sleep 0.1
done
exit 1" | bp_dev_line)
  [ -n "$dev" ] || { echo "rnbd map_device failed"; return 1; }
  BP_DEV[rnbd]=$dev
}

# bp_setup SYSTEM...: brings every listed system up, each mapped on the compute VM.
bp_setup() {
  local s nv=
  [[ " $* " != *" rdmadisk-rbd "* && " $* " != *" nvme-rdma-krbd "* && " $* " != *" fio-rbd "* ]] ||
    bp_setup_ceph || return 1
  [[ " $* " != *" rdmadisk-"* ]] || bp_target "$@" || return 1
  for s; do
    case $s in
      rdmadisk-rdma | rdmadisk-tcp) [ -n "${BP_DEV[rdmadisk-rdma]:-}" ] || bp_setup_rdmadisk || return 1 ;;
      rdmadisk-rbd) bp_setup_rdmadisk_rbd || return 1 ;;
      nvme-rdma-krbd) bp_setup_krbd || return 1 ;;
      # No device: bp_job runs fio's rbd engine on the storage VM.
      fio-rbd) BP_DEV[fio-rbd]=rbd/bench-fio ;;
      nvme-rdma | nvme-tcp)
        [ -n "$nv" ] || { bp_setup_nvmet || return 1; nv=1; }
        if [ "$s" = nvme-rdma ]; then bp_nvme_connect rdma $BP_NVME_RDMA_PORT || return 1
        else bp_nvme_connect tcp $BP_NVME_TCP_PORT || return 1; fi ;;
      rnbd) bp_setup_rnbd || return 1 ;;
      *) echo "unknown system $s"; return 1 ;;
    esac
    bp_log "$s: /dev/${BP_DEV[$s]}"
  done
}

# bp_nvme_delete [TRANSPORT]: deletes the bench's nvme controllers on the compute VM (only
# TRANSPORT's if given).
bp_nvme_delete() {
  on compute "for c in /sys/class/nvme/nvme*; do
  case \"\$(cat \$c/subsysnqn 2>/dev/null)\" in $BP_NQN | $BP_NQN_RBD) ;; *) continue ;; esac
  [ -z '${1:-}' ] || [ \"\$(cat \$c/transport 2>/dev/null)\" = '${1:-}' ] || continue
  echo 1 >\$c/delete_controller
done; true" >/dev/null 2>&1
}

bp_teardown() {
  bp_nvme_delete
  on compute "for d in /sys/block/rnbd*; do [ -e \$d/rnbd/unmap_device ] && echo force >\$d/rnbd/unmap_device; done; true" >/dev/null 2>&1
  on storage "cd /sys/kernel/config/nvmet 2>/dev/null || exit 0
for p in ports/*; do rm -f \$p/subsystems/$BP_NQN \$p/subsystems/$BP_NQN_RBD; rmdir \$p 2>/dev/null; done
for s in $BP_NQN $BP_NQN_RBD; do
  [ -d subsystems/\$s ] && { echo 0 >subsystems/\$s/namespaces/1/enable; rmdir subsystems/\$s/namespaces/1 subsystems/\$s; }
done
true" >/dev/null 2>&1
  [ -z "${BP_KRBD:-}" ] || on storage "rbd device unmap $BP_KRBD" >/dev/null 2>&1
  dk_cleanup
  [ -z "${BP_CEPH_ARGS:-}" ] || on storage "$TB_REPO/selftests/ceph/cluster.sh stop $BP_CEPH" >/dev/null 2>&1
  BP_CEPH_ARGS='' BP_TARGET_UP='' BP_KRBD=
  local d
  for d in ${BP_BDEV:-} ${BP_BDEV_TCP:-}; do
    [[ $d == /dev/ram* ]] || on storage "losetup -d $d" >/dev/null 2>&1
  done
  on storage "rm -f ${BP_LOOP_FILES:-/nonexistent}" >/dev/null 2>&1
}

# VM-side helpers of a job's window: agcpu, the CPU ticks of the VM's agent (the parent of the
# subshell running the command); segs, the VM's TCP segments received and sent so far.
# shellcheck disable=SC2016 # expanded in the VM
BP_WIN_DEFS='
read -r _ _ _ _bp_agent _ </proc/$BASHPID/stat
agcpu() { awk "{ print \$14 + \$15 }" /proc/$_bp_agent/stat; }
segs() { awk '"'"'$1 == "Tcp:" { if (h) { for (i = 2; i <= NF; i++) { if (k[i] == "InSegs") a = $i; if (k[i] == "OutSegs") b = $i }; print a, b } else { for (i = 2; i <= NF; i++) k[i] = $i; h = 1 } }'"'"' /proc/net/snmp; }
'

# bp_job SYSTEM REP NAME FIO-ARGS: one time-based fio job on SYSTEM's device (libaio, direct,
# one job, the first 32 MiB); appends its sample to $BP_SAMPLES. The CPU time per I/O is taken
# inside the run (after a second of ramp, until a second before its end), from /proc/stat and
# the disk's own I/O counts, so that fio's start and exit do not weigh on it.
bp_job() {
  local sys=$1 rep=$2 name=$3 dev out; shift 3
  dev=${BP_DEV[$sys]}
  [[ $sys != rdmadisk-* ]] || bp_on_transport "$sys" || return 1
  out=$TB_DIR/bench-$sys-$name-$rep
  # Where fio runs and what it drives. fio-rbd runs where the target runs, on librbd: no
  # block device to count I/Os on (its CPU per I/O is not taken), and the storage VM is its
  # own client, so no window runs there besides fio.
  local where=compute io="--filename=/dev/$dev --ioengine=libaio --direct=1 --allow_file_create=0" io_last=
  local stat="read -r r _ _ _ w _ </sys/block/$dev/stat" fio=fio
  if [ "$sys" = fio-rbd ]; then
    # Debian's fio: the bed's own build (first in the VMs' PATH) is static, without librbd.
    where=storage io="--direct=1" stat="r=0 w=0" fio=/usr/bin/fio
    io_last="--ioengine=rbd --clientname=admin --pool=${dev%/*} --rbdname=${dev#*/} --invalidate=0"
  fi
  # rdmadisk's own target counts the time each request spends in it (served, service_us,
  # backing_us): the job's share of those says where its latency goes.
  local ts0=
  if [[ $sys == rdmadisk-* ]]; then dk_tsnap; ts0=$DK_TS; fi
  # The storage VM's CPU time and context switches over the same window as the client's
  # (started first: the client's command below starts fio and then waits as long).
  # rdmadisk's target's own user and system time too (it idles through the other systems' jobs:
  # its share there is its idle cost).
  # Both VMs' agents run these window commands for the whole window, so neither polls its
  # command queue meanwhile (agent.sh); each records its agent's CPU time over the window, to
  # show it. TCP segments: the storage VM's received and the compute VM's sent, per I/O.
  [ "$where" = storage ] || on storage "$DK_VM_DEFS$BP_WIN_DEFS
rm -f $out.scpu
tcpu() { read -r p 2>/dev/null <$DK_TPID && awk '{ print \$14, \$15 }' /proc/\$p/stat 2>/dev/null || echo 0 0; }
# The target's wake-ups: the times its threads gave up the CPU to wait.
twake() { read -r p 2>/dev/null <$DK_TPID && cat /proc/\$p/task/*/status 2>/dev/null | awk '\$1 == \"voluntary_ctxt_switches:\" { n += \$2 } END { print n + 0 }' || echo 0; }
pause 1.5
read -r _ a b c _ _ f g _ </proc/stat; x0=\$(awk '\$1 == \"ctxt\" { print \$2 }' /proc/stat); s0=\$((a + b + c + f + g))
read -r u0 k0 <<<\"\$(tcpu)\"; w0=\$(twake); g0=\$(agcpu); read -r i0 _ <<<\"\$(segs)\"
pause $((BP_SECS > 2 ? BP_SECS - 1 : 1))
read -r _ a b c _ _ f g _ </proc/stat; x1=\$(awk '\$1 == \"ctxt\" { print \$2 }' /proc/stat)
read -r u1 k1 <<<\"\$(tcpu)\"; w1=\$(twake); g1=\$(agcpu); read -r i1 _ <<<\"\$(segs)\"
echo \$((a + b + c + f + g - s0)) \$((x1 - x0)) \$(getconf CLK_TCK) \$((u1 - u0)) \$((k1 - k0)) \$((w1 - w0)) \$((g1 - g0)) \$((i1 - i0)) >$out.scpu" >/dev/null 2>&1 &
  local spid=$!
  # The completion log (a line per I/O) gives the longest time with no completion: a job that
  # stalled is reported as such and kept out of the ratios (report.py).
  on $where "$DK_VM_DEFS$BP_WIN_DEFS
rm -f $out.json $out.cpu ${out}_*.log
CEPH_CONF=$BP_CEPH/ceph.conf timeout $((BP_SECS + 120)) $fio --name=$name $io --size=32M \
  --time_based --ramp_time=1 --runtime=$BP_SECS --output-format=json --output=$out.json \
  --write_lat_log=$out --log_avg_msec=0 $* $io_last >$out.err 2>&1 &
p=\$!
pause 1.5
read -r _ a b c _ _ f g _ </proc/stat; $stat; s0=\$((a + b + c + f + g)) n0=\$((r + w))
x0=\$(awk '\$1 == \"ctxt\" { print \$2 }' /proc/stat); g0=\$(agcpu); read -r _ o0 <<<\"\$(segs)\"
pause $((BP_SECS > 2 ? BP_SECS - 1 : 1))
read -r _ a b c _ _ f g _ </proc/stat; $stat
x1=\$(awk '\$1 == \"ctxt\" { print \$2 }' /proc/stat); g1=\$(agcpu); read -r _ o1 <<<\"\$(segs)\"
echo \$((a + b + c + f + g - s0)) \$((r + w - n0)) \$(getconf CLK_TCK) \$((x1 - x0)) \$((g1 - g0)) \$((o1 - o0)) >$out.cpu
wait \$p || { cat $out.err; exit 1; }" || { wait $spid; return 1; }
  wait $spid
  local tdelta=
  if [ -n "$ts0" ]; then
    dk_tsnap
    local k a b
    for k in served service_us backing_ops backing_us; do
      a=$(kv $k "$ts0") b=$(kv $k "$DK_TS")
      if is_num "$a" && is_num "$b"; then tdelta+="$((b - a)) "; else tdelta=; break; fi
    done
  fi
  python3 - "$out" "$sys" "$rep" "$name" "$*" "$tdelta" >>"$BP_SAMPLES" <<'PY' || { echo "  no sample: $out.json unreadable"; return 1; }
import json, sys
out, sysname, rep, name, args, tdelta = sys.argv[1:]
j = json.load(open(out + ".json"))["jobs"][0]
busy, window_ios, hz, ctxt, c_agent, c_outsegs = (int(x) for x in open(out + ".cpu").read().split())
try:
    s_busy, s_ctxt, s_hz, t_user, t_sys, t_wake, s_agent, s_insegs = (
        int(x) for x in open(out + ".scpu").read().split())
except (OSError, ValueError):
    s_busy = s_ctxt = t_user = t_sys = t_wake = s_agent = s_insegs = None
# The longest time with no completion, from the completion log (ms since the job's start).
try:
    done = sorted(int(l.split(",")[0]) for l in open(out + "_clat.1.log") if l.strip())
except (OSError, ValueError):
    done = []
max_gap = max((b - a for a, b in zip(done, done[1:])), default=None)
ddir = "write" if j["write"]["io_kbytes"] > j["read"]["io_kbytes"] else "read"
d = j[ddir]
pct = d["clat_ns"].get("percentile", {})


def target_split(tdelta):
    """The mean time a request spent in rdmadisk's target, and in its backing I/O (us)."""
    if not tdelta.split():
        return {}
    served, service_us, backing_ops, backing_us = (int(x) for x in tdelta.split())
    return {
        "target_us": service_us / served if served > 0 else None,
        "backing_us": backing_us / backing_ops if backing_ops > 0 else None,
    }


ios = d["total_ios"]
print(json.dumps({
    "system": sysname, "rep": int(rep), "job": name, "fio": args, "dir": ddir,
    "iops": d["iops"], "mb_s": d["bw_bytes"] / 1e6,
    "lat_mean_us": d["clat_ns"]["mean"] / 1000,
    "lat_p50_us": pct.get("50.000000", 0) / 1000, "lat_p99_us": pct.get("99.000000", 0) / 1000,
    "ios": ios, "cpu_us_per_io": busy * 1e6 / hz / window_ios if window_ios else None,
    "ctxt_per_io": ctxt / window_ios if window_ios else None,
    "storage_cpu_us_per_io": s_busy * 1e6 / s_hz / window_ios if window_ios and s_busy is not None else None,
    "storage_ctxt_per_io": s_ctxt / window_ios if window_ios and s_ctxt is not None else None,
    "target_user_us_per_io": t_user * 1e6 / s_hz / window_ios if window_ios and t_user is not None else None,
    "target_sys_us_per_io": t_sys * 1e6 / s_hz / window_ios if window_ios and t_sys is not None else None,
    "target_wakeups_per_io": t_wake / window_ios if window_ios and t_wake is not None else None,
    "agent_cpu_us": {"compute": c_agent * 1e6 / hz,
                     "storage": s_agent * 1e6 / s_hz if s_agent is not None else None},
    "storage_tcp_insegs_per_io": s_insegs / window_ios if window_ios and s_insegs is not None else None,
    "compute_tcp_outsegs_per_io": c_outsegs / window_ios if window_ios else None,
    "max_gap_ms": max_gap,
    # A second or more with no completion (two of the peers' 0.54 s ACK timeouts), or none.
    "stalled": ios == 0 or max_gap is None or max_gap >= 1000,
    **target_split(tdelta),
}))
PY
  tail -n1 "$BP_SAMPLES" | python3 -c "import json,sys; s=json.load(sys.stdin); print(f\"  {s['system']:14} {s['job']:10} rep {s['rep']}: {s['iops']:8.0f} IOPS {s['mb_s']:7.1f} MB/s  p50 {s['lat_p50_us']:7.0f} us  p99 {s['lat_p99_us']:7.0f} us  cpu/io {s['cpu_us_per_io'] or 0:6.0f} us\")"
}

# bp_gap SYSTEM: NIC servicing under load, for rdmadisk-rdma and nvme-rdma. fio 4 KiB random
# reads at QD1 on SYSTEM's device, logging every completion, while the compute VM's rxe0 is
# deleted 10 s in and added back (once rdmadisk is on TCP; 20 s later for nvme-rdma, whose
# host deletes the controllers of a removed device). Appends a sample: the longest gap between
# two completions, the completions, fio's error if it stopped on one, and whether the device
# is still there. The deletion reaches every RDMA system: run it last.
bp_gap() {
  local sys=$1 dev=${BP_DEV[$1]} log=$TB_DIR/bench-gap-$1 secs=${BENCH_GAP_SECS:-60} base
  if [ "$sys" = rdmadisk-rdma ]; then
    on compute "echo auto >/sys/block/$dev/rdmadisk/transport" || return 1
    tr_wait "gap-auto" "$dev" 120 rdma >/dev/null || { echo "  rdmadisk: not on RDMA under auto: $TR_WAIT"; return 1; }
  fi
  bp_gap_fio "$log" "$dev" "$secs" --rw=randread --bs=4k --iodepth=1
  sleep 12
  if [ "$sys" = rdmadisk-rdma ]; then
    base=$(tr_stat "$dev" tcp_ios)
    TR_PRE="rdma link delete $TR_RXE || exit 1"
    tr_wait gap-tcp "$dev" 60 tcp tcp_ios "${base:-0}" >/dev/null
    bp_log "$sys: rxe0 deleted; on TCP: $TR_WAIT"
    base=$(tr_stat "$dev" rdma_ios)
    TR_PRE="rdma link add $TR_RXE type rxe netdev $(tr_nic) || exit 1"
    tr_wait gap-rdma "$dev" 60 rdma rdma_ios "${base:-0}" >/dev/null
    TR_PRE=
    bp_log "$sys: rxe0 added back; on RDMA: $TR_WAIT"
  else
    on compute "rdma link delete $TR_RXE" >/dev/null
    sleep 20
    bp_log "$sys: rxe0 deleted 20 s ago; /dev/$dev $(on compute "test -b /dev/$dev && echo is there || echo is gone")"
  fi
  tr_rxe_restore
  bp_gap_sample "$log" "$dev" "$secs" "$sys" nic_gap 0
}

# bp_gap_fio LOG DEV SECONDS FIO-ARGS...: fio on the compute VM's /dev/DEV in its background
# for SECONDS, logging every completion (LOG_clat.1.log) and its result (LOG.json, LOG.rc).
bp_gap_fio() {
  local log=$1 dev=$2 secs=$3
  shift 3
  on compute "rm -f ${log}_*.log $log.json $log.rc
setsid bash -c 'fio --name=gap --filename=/dev/$dev --ioengine=libaio --direct=1 --allow_file_create=0 --size=32M \
  $* --time_based --runtime=$secs --write_lat_log=$log --log_avg_msec=0 \
  --output-format=json --output=$log.json >$log.err 2>&1; echo \$? >$log.rc' </dev/null >/dev/null 2>&1 &" >/dev/null
}

# bp_gap_sample LOG DEV SECONDS SYSTEM JOB REP: waits for bp_gap_fio's fio, then appends a
# sample: the longest gap between two completions, the completions, fio's error if it stopped
# on one, and whether /dev/DEV is still there.
bp_gap_sample() {
  local log=$1 dev=$2 secs=$3 left
  on compute "for i in \$(seq $((secs + 60))); do [ -s $log.rc ] && exit 0; sleep 1; done; exit 1" >/dev/null
  left=$(on compute "test -b /dev/$dev && echo true || echo false")
  python3 - "$log" "$4" "$left" "$5" "$6" >>"$BP_SAMPLES" <<'PY' || { echo "  no gap sample for $4"; return 1; }
import json, sys
log, sysname, left, job, rep = sys.argv[1:]
try:
    t = sorted(int(l.split(",")[0]) for l in open(log + "_clat.1.log") if l.strip())
except OSError:
    t = []
err = None
try:
    j = json.load(open(log + ".json"))["jobs"][0]
    if j.get("error"):
        err = f"errno {j['error']}"
except (OSError, ValueError, KeyError, IndexError):
    err = "no fio result"
rc = open(log + ".rc").read().strip()
if rc != "0" and err is None:
    err = f"fio exit {rc}"
gap = max((b - a for a, b in zip(t, t[1:])), default=None)
print(json.dumps({"system": sysname, "job": job, "rep": int(rep), "gap_ms": gap, "completions": len(t),
                  "fio_error": err, "device_left": left == "true"}))
PY
  tail -n1 "$BP_SAMPLES" | sed 's/^/  /'
}

# The workloads: NAME FIO-ARGS.
# shellcheck disable=SC2034 # used by bench/peers.sh
BP_WORKLOADS=(
  "rr4k_qd1 --rw=randread --bs=4k --iodepth=1"
  "rr4k_qd1_poll --rw=randread --bs=4k --iodepth=1 --ioengine=io_uring --hipri=1"
  "rw4k_qd1 --rw=randwrite --bs=4k --iodepth=1"
  "rr4k_qd16 --rw=randread --bs=4k --iodepth=16"
  "sr128k_qd4 --rw=read --bs=128k --iodepth=4"
  "sw128k_qd4 --rw=write --bs=128k --iodepth=4"
)
# Queue-depth scaling (4 KiB random reads), besides depths 1 and 16 above.
# shellcheck disable=SC2034 # used by bench/peers.sh
BP_SCALING_QD="2 4 8 32"

# bp_floor: perftest between the VMs' rxe0 devices, one
# sample per test: *_lat report the typical (median) and 99th percentile latency, *_bw the
# average bandwidth. Every test sleeps on CQ events (-e), as the systems measured do: a busy
# poll starves soft-RoCE's own work on a TCG vCPU. ib_write_lat and ib_write_bw have no event
# mode, and ib_send_lat's hung in this bed with the systems' connections up (in three runs out
# of four, before its first line), so only RDMA Reads are timed; report.py builds the floor from
# them.
bp_floor() {
  local t size out iters
  for t in ${BP_FLOOR_TESTS:-ib_read_lat:64 ib_read_lat:4096 ib_read_bw:131072}; do
    IFS=: read -r t size <<<"$t"
    iters=1000
    [[ $t == *_bw ]] && iters=500
    local bw="-e"
    [[ $t == *_bw ]] && bw="-e -t 16"
    # No server of an earlier test may hold perftest's port.
    # The server takes a few seconds to listen under TCG: the client starts once it does.
    on storage "$DK_VM_DEFS
pkill -f '^timeout [0-9]* ib_'; pkill -x 'ib_(send|write|read)_(lat|bw)'
setsid timeout 240 $t -d rxe0 -s $size -n $iters $bw -F >$TB_DIR/floor-server.out 2>&1 </dev/null &
for i in \$(seq 150); do ss -ltn | grep -q ':18515 ' && { pause 2; exit 0; }; pause 0.2; done; exit 1" >/dev/null ||
      { echo "  $t -s $size: the server did not listen in 30 s: $(tail -n3 "$TB_DIR/floor-server.out")"; continue; }
    out=$(on compute "for i in 1 2 3; do timeout 180 $t -d $TR_RXE -s $size -n $iters $bw -F $DK_S >$TB_DIR/floor.out 2>&1 && { cat $TB_DIR/floor.out; exit 0; }
  grep -q \"Couldn't connect\" $TB_DIR/floor.out || break; sleep 2; done; echo status \$?; cat $TB_DIR/floor.out; exit 1") ||
      { echo "  $t -s $size failed: $(tail -n3 <<<"$out"); server: $(tail -n3 "$TB_DIR/floor-server.out")"; continue; }
    OUT=$out python3 - "$t" "$size" >>"$BP_SAMPLES" <<'PY'
import json, os, sys
t, size = sys.argv[1], int(sys.argv[2])
rows = [l.split() for l in os.environ["OUT"].splitlines() if l.split() and l.split()[0] == str(size)]
r = [float(x) for x in rows[-1]]
if t.endswith("_lat"):
    # bytes iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
    s = {"lat_p50_us": r[4], "lat_mean_us": r[5], "lat_p99_us": r[7]}
else:
    # bytes iterations BW_peak BW_average MsgRate (MB/s)
    s = {"mb_s": r[3] * 1.048576}
print(json.dumps({"system": "floor", "job": f"{t}_{size}", "rep": 0, **s}))
PY
    tail -n1 "$BP_SAMPLES" | sed 's/^/  /'
  done
}

# bp_diag SYSTEM QD: one more 4 KiB random-read job at depth QD on SYSTEM, with the storage VM's
# sched (wakeup, switch) and raw_syscalls tracepoints recorded around it. The steps run one after
# the other from here: tracing on, then the whole fio run with the disk's I/O count read before
# and after it, then tracing off. A window timed inside each VM on its own missed the job
# whenever fio took longer than the pause to start (it did on a slower host: 0 I/Os counted), so
# the trace now brackets the job, and the per-I/O figures include its start and the second or so
# either side of it. bench/trace_stats.py turns the trace into a sample: system calls and
# wake-ups per I/O (rdmadisk's target's threads, and the whole VM) and how long a woken task
# waited for the CPU, with what ran meanwhile. Tracing costs time per event, so these jobs' own
# figures enter no table.
bp_diag() {
  local sys=$1 qd=$2 dev=${BP_DEV[$1]} out=$TB_DIR/bench-diag-$1-qd$2
  [[ $sys != rdmadisk-* ]] || bp_on_transport "$sys" || return 1
  on storage "$DK_VM_DEFS
T=/sys/kernel/tracing
[ -e \$T/trace ] || mount -t tracefs nodev \$T || exit 1
rm -f $out.trace
echo 0 >\$T/tracing_on; echo >\$T/trace; echo 32768 >\$T/buffer_size_kb
echo 'sched:sched_wakeup sched:sched_wakeup_new sched:sched_switch raw_syscalls:sys_enter' >\$T/set_event || exit 1
tids=; read -r p 2>/dev/null <$DK_TPID && [ -d /proc/\$p ] && tids=\$(ls /proc/\$p/task | tr '\n' ' ')
echo \"# target tids: \$tids\" >$out.trace
echo 1 >\$T/tracing_on" >/dev/null 2>&1 || { echo "  no diagnostic sample: tracing would not start"; return 1; }
  on compute "$DK_VM_DEFS
rm -f $out.ios
read -r r _ _ _ w _ </sys/block/$dev/stat; n0=\$((r + w))
timeout $((BP_SECS + 120)) fio --name=diag --filename=/dev/$dev --ioengine=libaio --direct=1 --allow_file_create=0 --size=32M \
  --time_based --runtime=$BP_SECS --rw=randread --bs=4k --iodepth=$qd >/dev/null 2>&1; rc=\$?
read -r r _ _ _ w _ </sys/block/$dev/stat; echo \$((r + w - n0)) >$out.ios
exit \$rc"
  local rc=$?
  on storage "T=/sys/kernel/tracing
echo 0 >\$T/tracing_on
{ echo \"# overrun: \$(awk '\$1 == \"overrun:\" { n += \$2 } END { print n + 0 }' \$T/per_cpu/cpu*/stats)\"; cat \$T/trace; } >>$out.trace
echo >\$T/set_event; echo >\$T/trace" >/dev/null 2>&1
  [ $rc = 0 ] || { echo "  no diagnostic sample: fio on /dev/$dev exited $rc"; return 1; }
  python3 "$TB_REPO/selftests/bench/trace_stats.py" "$out.trace" "$(cat "$out.ios")" "$sys" "rr4k_qd$qd" >>"$BP_SAMPLES" ||
    { echo "  no diagnostic sample: $out.trace unreadable"; return 1; }
  tail -n1 "$BP_SAMPLES" | sed 's/^/  /'
}
