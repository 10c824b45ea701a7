# Both transports lost at once for a few seconds: the compute VM's link goes down (qemu
# set_link on both ends, a cable pull) for RDT74_DOWN_S (default 3 s) under verified fio.
#
# io_timeout_ms=5000, loss_timeout_s=30 (RDT74_LOSS_S), the policy knobs at their defaults.
# fio in rounds (2 jobs, random 50/50 reads and writes of 4-64 KiB at queue depth 16, crc32c
# headers, every written block verified) runs throughout.
#
# Acceptance: the I/O stalls (a VM-side sampler of rdma_ios + tcp_ios sees no completion for
# at least RDT74_DOWN_S - 1 s); after the link comes back the I/O resumes (rdma_ios + tcp_ios rising) within
# loss_timeout_s; the disk is back on RDMA within RDT74_BACK_S (default 120 s); every fio
# round without error and verified; io_errors=0, state live; no kernel splat.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
DOWN=${RDT74_DOWN_S:-3}
LOSS=${RDT74_LOSS_S:-30}
BACK=${RDT74_BACK_S:-120}
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d74 vol0
if ! res $? "target (RDMA $DK_PORT, TCP $DK_TCP_PORT); insmod; map name=d74: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
tr_set "$dev" io_timeout_ms=5000 loss_timeout_s="$LOSS"
res $? "io_timeout_ms=5000 loss_timeout_s=$LOSS"

read -r r0 <<<"$(tr_stat "$dev" rdma_ios)"
tr_rounds_start l "$(tr_fio_args l74)"
tr_wait io "$dev" 120 rdma rdma_ios "${r0:-0}"
if ! res $? "fio rounds under way over RDMA: $TR_WAIT"; then
  tr_rounds_stop l 300 >/dev/null; dk_cleanup; return 0 2>/dev/null || exit 0
fi

# 1. The cable pulled for DOWN seconds, timed on the host where tb_link runs, with no VM
#    command in between (under load one can take seconds). A sampler in the compute VM logs
#    rdma_ios + tcp_ios every 0.2 s; the longest stretch without a completion is the stall.
smp=$TB_DIR/$DK_ID.sampler
cat >"$smp.sh" <<EOF
while :; do
  echo "\$(date +%s%N) \$(awk -F= '\$1 == "rdma_ios" || \$1 == "tcp_ios" { s += \$2 } END { print s + 0 }' /sys/block/$dev/rdmadisk/stats)"
  sleep 0.2
done
EOF
on compute "rm -f $smp.log; setsid bash $smp.sh >$smp.log 2>&1 </dev/null & echo \$! >$smp.pid"
sleep 3
t0=$SECONDS
tb_link down
sleep "$DOWN"
tb_link up
down=$((SECONDS - t0))
read -r d2 <<<"$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2 }')"
echo "  link down for about $down s (host clock)"

# 2. The link back: I/O resumes within the loss timeout, with no error.
tr_wait resume "$dev" "$LOSS" any ios "$d2"
res $? "link up: I/O resumes within loss_timeout_s=$LOSS s (after $TR_MS ms): $TR_WAIT"
on compute "kill \$(cat $smp.pid)" >/dev/null
stall=$(awk '$2 != last { if (n && t - t1 > m) m = t - t1; t1 = $1; last = $2 } { t = $1; n++ } END { if (t - t1 > m) m = t - t1; print int(m / 1000000) }' "$smp.log")
n_le $(((DOWN - 1) * 1000)) "$stall"
res $? "the I/O stalled while the link was down: longest stretch without a completion $stall ms (at least $(((DOWN - 1) * 1000)) ms)"
tr_wait rdma "$dev" "$BACK" rdma
res $? "and the disk is on RDMA within $BACK s (after $TR_MS ms): $TR_WAIT"
sleep 3
tr_rounds_stop l 300
res $? "fio through the outage: every round finished with no error, data verified: $FIO_SUM"

dk_csnap "$dev"
dk_show client "$DK_CS"
out=$(on compute "cd /sys/block/$dev/rdmadisk && echo \$(cat state) \$(cat active_transport)")
n_eq "$(cstat io_errors)" 0 && [ "$out" = "live rdma" ]
res $? "io_errors=$(cstat io_errors); state, active_transport '$out' (want 'live rdma'); timeouts=$(cstat timeouts) reconnects=$(cstat reconnects) failovers=$(cstat failovers) failbacks=$(cstat failbacks)"

dk_unmap "$dev" normal && dk_gone "$dev" 10 && on compute "rmmod rdmadisk"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
on compute "kill \$(cat $smp.pid) 2>/dev/null; true" >/dev/null
dk_cleanup
