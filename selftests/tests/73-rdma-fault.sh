# RDMA unhealthy, TCP fine: the disk fails over to TCP on its own, and fails back once RDMA
# recovers.
#
# The compute VM drops incoming RoCEv2 (nftables, UDP dport 4791, on input: an output drop
# would break rxe's QP1 for good, see TESTBED.md) while TCP to the target's port 7701 still
# flows. io_timeout_ms=3000, failover_threshold=2, failover_window_ms=60000,
# probe_interval_ms=1000, failback_probes=3, loss_timeout_s=120. fio in rounds (2 jobs,
# random 50/50 reads and writes of 4-64 KiB at queue depth 16, crc32c headers, every written
# block verified) runs throughout.
#
# Acceptance: within RDT73_WAIT_S (default 120 s) of the rule the disk is on TCP with
# tcp_ios rising and failovers up by one or more; while the rule stays, it stays on TCP and
# its probes fail (probe_failures rising, failbacks unchanged); within RDT73_WAIT_S of the
# rule's removal it is back on RDMA with rdma_ios rising, failbacks up, and at least
# failback_probes successful probes since the removal; the rule dropped packets; every fio
# round without error and verified; io_errors=0; no kernel splat.
#
# A second RDMA device (rxe73, on a veth, unrelated to the target) is removed while the
# disk is on TCP probing: the disk must keep probing (RDMA is still in reach through rxe0),
# not stop as if the last device had gone.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
WAIT=${RDT73_WAIT_S:-120}
HOLD=${RDT73_HOLD_S:-10}
PROBES=3
T=rdmadisk_t73
tr_dmesg_mark

unblock() { on compute "nft list table ip $T >/dev/null 2>&1 && nft delete table ip $T; true" >/dev/null; }
second_gone() { on compute "rdma link delete rxe73 2>/dev/null; ip link delete v73a 2>/dev/null; true" >/dev/null; }
finish() { tr_rounds_stop f 300 >/dev/null; unblock; second_gone; dk_cleanup; }

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d73 vol0
if ! res $? "target (RDMA $DK_PORT, TCP $DK_TCP_PORT); insmod; map name=d73: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
tr_set "$dev" io_timeout_ms=3000 failover_threshold=2 failover_window_ms=60000 probe_interval_ms=1000 \
  failback_probes=$PROBES loss_timeout_s=120
if ! res $? "io_timeout_ms=3000 failover_threshold=2 failover_window_ms=60000 probe_interval_ms=1000 failback_probes=$PROBES loss_timeout_s=120"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi

on compute "ip link add v73a type veth peer name v73b && ip link set v73a up && ip link set v73b up && rdma link add rxe73 type rxe netdev v73a" >/dev/null
if ! res $? "a second RDMA device, rxe73 on a veth"; then
  second_gone; dk_cleanup; return 0 2>/dev/null || exit 0
fi

read -r r0 <<<"$(tr_stat "$dev" rdma_ios)"
tr_rounds_start f "$(tr_fio_args f73)"
tr_wait io "$dev" 120 rdma rdma_ios "${r0:-0}"
if ! res $? "fio rounds under way over RDMA: $TR_WAIT"; then
  finish; return 0 2>/dev/null || exit 0
fi

# 1. RoCEv2 dropped on input: over to TCP.
read -r f1 t1 <<<"$(tr_stat "$dev" failovers tcp_ios)"
TR_PRE="T0=\$(date +%s%N)
nft add table ip $T && nft add chain ip $T in '{ type filter hook input priority 0; }' &&
  nft add rule ip $T in udp dport 4791 counter drop || exit 1"
tr_wait totcp "$dev" "$WAIT" tcp tcp_ios "${t1:-0}"
rc=$?
TR_PRE=
if ! on compute "nft list table ip $T" >/dev/null 2>&1; then
  res 1 "nftables input drop of UDP 4791 on the compute VM"; printf '%s\n' "$TR_OUT" | indent
  finish; return 0 2>/dev/null || exit 0
fi
read -r f2 <<<"$(tr_stat "$dev" failovers)"
ls=$(tr_get "$dev" last_switch)
[ $rc = 0 ] && n_gt "$f2" "$f1" && [[ $ls == "to=tcp reason=rdma_failures "* ]]
res $? "RoCEv2 dropped: on TCP with tcp_ios rising after $TR_MS ms (max $WAIT s), failovers ${f1:-?} -> ${f2:-?}, last_switch '$ls': $TR_WAIT"
if [ $rc != 0 ]; then finish; return 0 2>/dev/null || exit 0; fi

# 2. While RDMA stays broken: TCP carries the I/O, the probes fail, no failback.
read -r t2 p2 pf2 b2 <<<"$(tr_stat "$dev" tcp_ios probes probe_failures failbacks)"
sleep "$HOLD"
read -r t3 p3 pf3 b3 <<<"$(tr_stat "$dev" tcp_ios probes probe_failures failbacks)"
act=$(tr_get "$dev" active_transport)
n_gt "$t3" "$t2" && [ "$act" = tcp ] && n_eq "$b3" "$b2"
res $? "$HOLD s with RoCEv2 still dropped: active_transport $act, tcp_ios $t2 -> $t3, failbacks $b2 -> $b3"
n_gt "$pf3" "$pf2"
res $? "the probes fail meanwhile: probes $p2 -> $p3, probe_failures $pf2 -> $pf3"
dk_timed del73 30 "rdma link delete rxe73" >/dev/null
sleep 2
ses=$(tr_get "$dev" session)
[ "$ses" = probing ]
res $? "the unrelated rxe73 removed: the disk keeps probing RDMA (session '$ses')"
second_gone

# 3. The rule removed: back to RDMA after failback_probes good probes.
drops=$(on compute "nft list table ip $T" | sed -n 's/.*counter packets \([0-9]*\) .*/\1/p')
read -r r4 p4 pf4 b4 <<<"$(tr_stat "$dev" rdma_ios probes probe_failures failbacks)"
TR_PRE="T0=\$(date +%s%N); nft delete table ip $T || exit 1"
tr_wait tordma "$dev" "$WAIT" rdma rdma_ios "${r4:-0}"
rc=$?
TR_PRE=
unblock
read -r p5 pf5 b5 <<<"$(tr_stat "$dev" probes probe_failures failbacks)"
good=$(( ${p5:-0} - ${p4:-0} - (${pf5:-0} - ${pf4:-0}) ))
ls=$(tr_get "$dev" last_switch)
[ $rc = 0 ] && n_gt "$b5" "$b4" && n_le "$PROBES" "$good" && [[ $ls == "to=rdma reason=probes "* ]]
res $? "rule removed: back on RDMA with rdma_ios rising after $TR_MS ms (max $WAIT s), failbacks $b4 -> $b5, $good good probes since (probes $p4 -> $p5, probe_failures $pf4 -> $pf5; need $PROBES), last_switch '$ls': $TR_WAIT"
n_gt "${drops:-0}" 0
res $? "the rule dropped RoCEv2 packets (counter: ${drops:-?})"

sleep 3
tr_rounds_stop f 300
res $? "fio through the fault: every round finished with no error, data verified: $FIO_SUM"
dk_check_image "$dev" "$back"
res $? "after it all: the whole disk read through the driver is the backing file: $DK_BACKING"
dk_csnap "$dev"
dk_show client "$DK_CS"
out=$(on compute "cd /sys/block/$dev/rdmadisk && echo \$(cat state) \$(cat active_transport) \$(cat session)")
n_eq "$(cstat io_errors)" 0 && [ "$out" = "live rdma rdma" ]
res $? "io_errors=$(cstat io_errors); state, active_transport, session '$out' (want 'live rdma rdma')"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
unblock
dk_cleanup
