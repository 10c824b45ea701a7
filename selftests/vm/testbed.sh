# shellcheck shell=bash
# The two-VM test bed: a compute host and a storage host, each a virtme-ng guest under TCG
# running the project's kernel, joined by one qemu datagram link over the host's loopback and
# no other network device. Sourced by the runner, the demo and the tests.
#
#   tb_boot                 boot both VMs (TB_DIR holds their state, logs and command queues)
#   on compute|storage CMD  run CMD (a bash script text) in that VM; prints its output, returns its status
#   tb_link up|down         set the link of both ends (qemu set_link), as a cable pull would
#   tb_shutdown             collect dmesg (after a kmemleak scan) and power both off
#   tb_splats FILE          print the kernel splats found in a dmesg file; status 1 if any
#   tb_agent_ok ROLE        status 0 if the VM's agent still answers (a short command)
#   tb_tainted ROLE         prints the kernel's taint flags beyond out-of-tree/unsigned modules
#   tb_qp1_ok, tb_qp1_heal  check / re-create rxe0 where soft-RoCE's QP1 is stuck in error

TB_REPO=${TB_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
# Where cargo builds the userspace tools: the cache, as the Makefile has it (the VMs see the
# host's files, so they run the binaries from there).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-${RDMADISK_CACHE:-$HOME/.cache/rdmadisk}/cargo-target}
TB_COMPUTE_ADDR=192.0.2.1
TB_STORAGE_ADDR=192.0.2.2
TB_CMD_TIMEOUT=${TB_CMD_TIMEOUT:-900}
TB_BOOT_TIMEOUT=${TB_BOOT_TIMEOUT:-600}

tb_log() { printf '[testbed] %s\n' "$*" >&2; }

tb_kernel() {
  "$TB_REPO/selftests/kernel/build-kernel.sh"
}

# One free UDP port on the loopback, for each end of the datagram link.
tb_free_port() {
  python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# tb_boot: boots both VMs. A VM whose kernel panics while booting is a fault of the emulation,
# not of anything under test: under TCG with two vCPUs, a CPU can run a stale int3 of the
# kernel's own boot-time text patching (seen in sched_clock_idle_wakeup_event). The bed is then
# booted again, once, and says so; its console goes to TB_DIR/ROLE.console.failed-boot.
tb_boot() {
  local rc role
  _tb_boot_once; rc=$?
  [ $rc = 2 ] || return $rc
  for role in compute storage; do
    [ -e "$TB_DIR/$role.pid" ] && kill -- -"$(cat "$TB_DIR/$role.pid")" 2>/dev/null
  done
  sleep 1
  local keep; keep=$(mktemp -d)
  cp "$TB_DIR"/*.console "$keep/" 2>/dev/null
  tb_log "a VM's kernel panicked while booting (above): booting the test bed again, once"
  _tb_boot_once; rc=$?
  for role in compute storage; do
    [ -e "$keep/$role.console" ] && mv "$keep/$role.console" "$TB_DIR/$role.console.failed-boot"
  done
  rm -rf "$keep"
  [ $rc = 0 ]
}

_tb_boot_once() {
  local kdir fio; kdir=$(tb_kernel) || return 1
  fio=$("$TB_REPO/selftests/host/build-fio.sh") || { tb_log "cannot build the test bed's fio"; return 1; }
  export TB_DIR=${TB_DIR:-$TB_REPO/selftests/out/tb.$$}
  rm -rf "$TB_DIR"; mkdir -p "$TB_DIR/cmd.compute" "$TB_DIR/cmd.storage" "$TB_DIR/cmd.compute.done" "$TB_DIR/cmd.storage.done" "$TB_DIR/bin"
  # The compute VM's agent loads this at boot (selftests/harness/memalloc says why).
  make -s -C "$kdir" M="$TB_REPO/selftests/harness/memalloc" RUSTC=/usr/bin/rustc modules >/dev/null &&
    cp "$TB_REPO/selftests/harness/memalloc/rdmadisk_tb_memalloc.ko" "$TB_DIR/" ||
    { tb_log "cannot build selftests/harness/memalloc"; return 1; }
  # The VMs put $TB_DIR/bin first in PATH (agent.sh): the static fio (build-fio.sh says why).
  ln -s "$fio" "$TB_DIR/bin/fio"
  local pc ps; pc=$(tb_free_port); ps=$(tb_free_port)
  tb_log "booting compute ($TB_COMPUTE_ADDR, udp $pc) and storage ($TB_STORAGE_ADDR, udp $ps) under TCG; state in $TB_DIR"
  _tb_vm compute "$TB_COMPUTE_ADDR" 2 1536M "$pc" "$ps" 52:54:00:d1:5c:01 "$kdir"
  _tb_vm storage "$TB_STORAGE_ADDR" 1 1024M "$ps" "$pc" 52:54:00:d1:5c:02 "$kdir"
  local t0=$SECONDS role
  for role in compute storage; do
    while [ ! -e "$TB_DIR/$role.ready" ] || [ -e "$TB_DIR/$role.failed" ]; do
      if [ -e "$TB_DIR/$role.failed" ] || ! kill -0 "$(cat "$TB_DIR/$role.pid")" 2>/dev/null; then
        tb_log "$role failed to boot; console log tail:"; tail -n 30 "$TB_DIR/$role.console" >&2
        grep -q "Kernel panic" "$TB_DIR/$role.console" 2>/dev/null && return 2
        return 1
      fi
      if (( SECONDS - t0 > TB_BOOT_TIMEOUT )); then tb_log "$role did not boot in ${TB_BOOT_TIMEOUT}s"; return 1; fi
      sleep 1
    done
  done
  tb_log "both VMs up in $((SECONDS - t0))s"
}

_tb_vm() {
  local role=$1 addr=$2 cpus=$3 mem=$4 lport=$5 rport=$6 mac=$7 kdir=$8
  local net="-netdev dgram,id=l0,local.type=inet,local.host=127.0.0.1,local.port=$lport,remote.type=inet,remote.host=127.0.0.1,remote.port=$rport"
  net+=" -device virtio-net-pci,netdev=l0,mac=$mac -monitor unix:$TB_DIR/$role.mon,server,nowait"
  # --verbose sends the serial console to the console file (else it goes nowhere), and
  # loglevel=5 keeps it to warnings and worse: an oops or a panic (panic=-1 ends the VM) is
  # then on record even when the kernel log stream had no time to write it.
  setsid vng --run "$kdir/arch/x86/boot/bzImage" --disable-kvm --disable-microvm --force-9p \
    --name "$role" --cpus "$cpus" --memory "$mem" --rwdir "$TB_DIR" \
    --qemu-opts="$net" --verbose --append "loglevel=5${TB_APPEND:+ $TB_APPEND}" \
    --exec "$TB_REPO/selftests/vm/agent.sh $role $addr/24 $TB_DIR" \
    </dev/null >"$TB_DIR/$role.console" 2>&1 &
  echo $! >"$TB_DIR/$role.pid"
}

# on ROLE CMD...: run CMD in the VM, print its output, return its exit status.
on() {
  local role=$1; shift
  local q=$TB_DIR/cmd.$role id
  id=$(date +%s%N)-$$-$RANDOM
  printf '%s\n' "$*" >"$q/$id.tmp" && mv "$q/$id.tmp" "$q/$id.sh"
  local t0=$SECONDS pid
  pid=$(<"$TB_DIR/$role.pid")
  # A short poll: a run issues thousands of commands, most of which take well under a second.
  while [ ! -s "$q/$id.rc" ]; do
    if (( SECONDS - t0 > TB_CMD_TIMEOUT )); then
      tb_log "timeout after ${TB_CMD_TIMEOUT}s on $role: $*"; cat "$q/$id.out" 2>/dev/null
      # Withdrawn if the agent has not taken it yet (it is stuck on an earlier one), so that
      # it cannot run later, against whatever the next test set up. One it already took is
      # not affected: the agent has read the whole file (`.`).
      mv -f "$q/$id.sh" "$q.done/$id.withdrawn" 2>/dev/null
      return 124
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      tb_log "$role VM is gone while running: $*"; return 125
    fi
    sleep 0.05
  done
  local rc; rc=$(<"$q/$id.rc")
  cat "$q/$id.out"
  # A finished command leaves the queue: the agent lists that directory over 9p every 0.1 s,
  # and a run issues thousands of commands.
  mv -f "$q/$id.sh" "$q/$id.out" "$q/$id.rc" "$q.done/" 2>/dev/null
  return "$rc"
}

# Link state of both ends, through each VM's qemu monitor.
tb_link() {
  local state=on role
  [ "$1" = down ] && state=off
  for role in compute storage; do
    python3 - "$TB_DIR/$role.mon" "set_link l0 $state" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(0.2); s.recv(65536)
s.sendall((sys.argv[2] + "\n").encode()); time.sleep(0.3); s.close()
PY
  done
}

# tb_collect_dmesg ROLE: a kmemleak scan, then the kernel log into $TB_DIR/ROLE.dmesg; the
# status of it all into ROLE.dmesg.rc (a failed scan or read is not "no splat").
tb_collect_dmesg() {
  local role=$1
  on "$role" 'set -e; if [ -w /sys/kernel/debug/kmemleak ]; then echo scan > /sys/kernel/debug/kmemleak; sleep 6; echo scan > /sys/kernel/debug/kmemleak; cat /sys/kernel/debug/kmemleak > kmemleak.'"$role"'; fi; dmesg' >"$TB_DIR/$role.dmesg" 2>&1
  echo $? >"$TB_DIR/$role.dmesg.rc"
}

tb_shutdown() {
  local role pid
  for role in compute storage; do
    [ -e "$TB_DIR/$role.pid" ] || continue
    kill -0 "$(cat "$TB_DIR/$role.pid")" 2>/dev/null || continue
    [ -e "$TB_DIR/$role.dmesg.rc" ] || tb_collect_dmesg "$role"
    touch "$TB_DIR/cmd.$role/STOP"
  done
  for role in compute storage; do
    [ -e "$TB_DIR/$role.pid" ] || continue
    pid=$(cat "$TB_DIR/$role.pid")
    for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { tb_log "$role did not power off; killing it"; kill -- -"$pid" 2>/dev/null; }
  done
  return 0
}

# Kernel reports that fail a run: warnings, bugs, lockdep, KFENCE, kmemleak, hung tasks,
# sleeping in atomic context, RCU stalls, oopses, lockups, and any other stack dump (a
# "cannot create duplicate filename" or an allocation failure prints one with no header).
TB_SPLAT_RE='WARNING:|BUG:|Oops|Call Trace:|hard LOCKUP|general protection fault|Kernel panic|KFENCE:|kmemleak: [0-9]+ new suspected|unreferenced object 0x|possible recursive locking|possible circular locking|inconsistent lock state|possible irq lock inversion|suspicious RCU usage|DEBUG_LOCKS_WARN_ON|trying to register non-static key|sleeping function called from invalid context|blocked for more than|self-detected stall|rcu: INFO|UBSAN:|refcount_t:|list_add corruption|list_del corruption|stack-protector|RIP: 0010'

# tb_splats FILE...: prints the splat lines. Status 0: none; 1: some; 2: a file could not be
# read (which must not pass as "none").
tb_splats() {
  grep -hE "$TB_SPLAT_RE" "$@"
  case $? in 0) return 1 ;; 1) return 0 ;; *) return 2 ;; esac
}

# tb_agent_ok ROLE: the VM's agent answers a trivial command within 60 s. A command stuck in
# the kernel (a driver bug) wedges the agent: every later command would wait out its own time
# limit, so the runner stops instead.
tb_agent_ok() {
  [ "$(TB_CMD_TIMEOUT=60 on "$1" 'echo alive' 2>/dev/null)" = alive ]
}

# tb_tainted ROLE: the taint flags of the VM's kernel, less the out-of-tree (O, 4096) and
# unsigned (E, 8192) module bits that loading the project's modules sets: a warning (W) or
# any other taint shows even if its log line was lost. Prints the value (0: clean).
tb_tainted() {
  local t
  t=$(on "$1" 'read -r t </proc/sys/kernel/tainted && echo $t') || return 2
  [[ $t =~ ^[0-9]+$ ]] || return 2
  echo $((t & ~(4096 | 8192)))
}

# tb_qp1_state ROLE: the state of rxe0's GSI QP (QP1, which carries rdma_cm's messages).
tb_qp1_state() {
  on "$1" "rdma res show qp link rxe0/1 lqpn 1 2>/dev/null" | sed -n 's/.* state \([A-Z_]*\) .*/\1/p'
}

# tb_qp1_ok: status 0 if rxe0's QP1 is in RTS on both VMs; prints each side that is not.
# Soft-RoCE moves QP1 to the error state when one of its sends fails locally (sent while the
# link is down, say) and nothing brings it back: rdma_cm is dead on that device until the
# device is re-created (TESTBED.md). No driver above it can repair that.
tb_qp1_ok() {
  local role st bad=0
  for role in compute storage; do
    st=$(tb_qp1_state "$role")
    [ "$st" = RTS ] && continue
    echo "$role: rxe0 QP1 state ${st:-unknown}"
    bad=1
  done
  return $bad
}

# tb_qp1_heal: re-creates rxe0 on each VM whose QP1 is not in RTS; prints what it did.
tb_qp1_heal() {
  local role st
  for role in compute storage; do
    st=$(tb_qp1_state "$role")
    [ "$st" = RTS ] && continue
    on "$role" "rdma link delete rxe0; rdma link add rxe0 type rxe netdev \$(cat $TB_DIR/$role.nic)" >/dev/null
    echo "$role: rxe0 re-created (its QP1 was ${st:-unknown}; now $(tb_qp1_state "$role"))"
  done
}
