#!/usr/bin/env bash
# Runs inside each test-bed VM (vng --exec). Brings up the link and soft-RoCE, then executes
# the commands the host drops into $dir/cmd.$role/ one at a time, until told to stop.
# usage: agent.sh ROLE ADDR/PREFIX DIR
set -u
role=$1 addr=$2 dir=$3
q=$dir/cmd.$role
exec >>"$dir/$role.agent.log" 2>&1
# The runner's tools first: the test bed's static fio.
export PATH=$dir/bin:$PATH
echo "agent $role: kernel $(uname -r), $(nproc) cpu, $(fio --version)"

mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# kmemleak scans all memory every 10 minutes by itself, which under TCG costs a vCPU for tens
# of seconds each time; the runner scans (twice) at the end instead (tb_collect_dmesg).
[ -w /sys/kernel/debug/kmemleak ] && echo scan=off >/sys/kernel/debug/kmemleak
# Tools want writable state dirs; the host's root is read-only here.
mount -t tmpfs none /run 2>/dev/null; mkdir -p /run/lock /run/netns
mount -t tmpfs none /var/tmp 2>/dev/null
mount -t tmpfs none /mnt 2>/dev/null

nic=
for n in /sys/class/net/en* /sys/class/net/eth*; do [ -e "$n" ] && { nic=${n##*/}; break; }; done
[ -n "$nic" ] || { echo "agent $role: no NIC"; echo "no NIC" > "$dir/$role.failed"; poweroff -f; }
ip link set lo up
ip addr add "$addr" dev "$nic"
ip link set "$nic" up
rdma link add rxe0 type rxe netdev "$nic" || { echo "rdma link add failed" > "$dir/$role.failed"; }
# One loopback TCP connection now, while nothing else runs: the first TCP connect and accept
# of a boot seed their hash secrets once (net_get_random_once), then patch that code's static
# key. Under TCG a CPU running the patched code meanwhile can take the patch's int3 as an Oops
# (seen: a panic in secure_tcp_seq_and_ts_off on the disk's first TCP reconnect).
python3 -c 'import socket as s; l = s.create_server(("127.0.0.1", 0)); c = s.create_connection(l.getsockname()); l.accept()' ||
  echo "agent $role: the loopback TCP warm-up failed"
# rdmadisk's TCP sockets move sk_memalloc_socks() from 0 to 1 and back at unload, and each
# move patches another static key: hold a count of our own from now on, so that they never do
# (selftests/harness/memalloc; seen: an int3 Oops in __alloc_skb during rmmod rdmadisk).
if [ "$role" = compute ]; then
  insmod "$dir/rdmadisk_tb_memalloc.ko" || echo "agent $role: cannot load the memalloc hold"
fi
echo "$nic" > "$dir/$role.nic"
echo "agent $role: $nic $addr, rdma: $(rdma link show 2>&1 | tr '\n' ' ')"
# The kernel log, streamed to the shared directory as it is written, so that it can be read
# from the host even when a command wedges this agent (a task stuck in the kernel).
setsid dmesg -w >"$dir/$role.kmsg" 2>&1 </dev/null &
touch "$dir/$role.ready"

# Each command is sourced in a subshell: a fork of this shell, where `bash FILE` was a fork and
# an exec (about a second more per command under TCG with the debug kernel). The subshell
# drops this script's `set -u` and its loop variables (prefixed _a_) first. A command is taken
# once (_a_seen), and its status written in one write: the host waits for a non-empty .rc.
# The poll's pause without a fork: `sleep` is a program, and starting one costs the VM more
# than the pause itself under TCG. read -t on a FIFO nobody writes just times out.
if mkfifo /run/agent-tick 2>/dev/null && exec 9<>/run/agent-tick; then
  _a_pause() { read -rt 0.1 -u 9 _ || true; }
else
  _a_pause() { sleep 0.2; }
fi
declare -A _a_seen=()
while [ ! -e "$q/STOP" ]; do
  for _a_f in "$q"/*.sh; do
    # The seen-check first: it is in memory, while -e is a round trip to the host (9p), and
    # the directory holds every command of the run.
    [ -z "${_a_seen[$_a_f]:-}" ] && [ -e "$_a_f" ] || continue
    _a_seen[$_a_f]=1
    _a_n=${_a_f%.sh}
    (
      set +u
      exec 9>&-
      _a_cmd=$_a_f
      unset _a_f _a_seen
      cd "$dir" || exit
      . "$_a_cmd"
    ) >"$_a_n.out" 2>&1 </dev/null
    echo $? >"$_a_n.rc"
  done
  _a_pause
done
echo "agent $role: stopping"
sync
poweroff -f
