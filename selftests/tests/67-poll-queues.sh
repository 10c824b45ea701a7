# Poll queues: a disk mapped with queues=1 poll_queues=1 has a blk-mq poll queue whose RDMA
# completions are reaped by the task polling for them (io_uring IOPOLL: fio --hipri), not by
# the IB completion workqueue. Polled I/O must survive a switch to TCP and back, and an idle
# poll queue (nobody polling) must still answer its keepalives.
#
# Acceptance: the disk shows 2 hardware queues and io_poll 1; fio rounds with io_uring
# --hipri, crc32c-verified, run on RDMA with polled_completions rising; a switch to TCP and
# back under them loses nothing (every round verified, tcp_ios then rdma_ios rising, and
# polled_completions rising again on RDMA); a pattern written through the disk is in the
# backing file; after 2.5 keepalive intervals with no I/O the connections are still the
# same (no reconnect) and keepalives were answered; io_errors=0; unmap and rmmod work; no
# kernel splat.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
SW=${RDT67_SWITCH_S:-60}
KA_MS=2000
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d67 vol0 "queues=1 poll_queues=1"
if ! res $? "target; insmod; map name=d67 queues=1 poll_queues=1: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

out=$(on compute "echo hw=\$(ls /sys/block/$dev/mq | wc -l) poll=\$(cat /sys/block/$dev/queue/io_poll)
dmesg | grep -o 'as $dev: .*' | tail -n1")
printf '%s\n' "$out" | indent
[ "$(word hw "$out")" = 2 ] && [ "$(word poll "$out")" = 1 ] && grep -q '2 queue(s) (1 polled)' <<<"$out"
res $? "2 hardware queues, io_poll 1, the map's log line says 1 of 2 is polled"

# 1. Polled I/O on RDMA.
HIPRI="--ioengine=io_uring --hipri=1"
read -r p0 r0 <<<"$(tr_stat "$dev" polled_completions rdma_ios)"
tr_rounds_start p "$(tr_fio_args p67) $HIPRI"
tr_wait io "$dev" 120 rdma polled_completions "${p0:-0}"
if ! res $? "fio rounds (io_uring, --hipri) under way over RDMA, polled_completions ${p0:-?} -> $(word polled_completions "$TR_WAIT")"; then
  tr_rounds_stop p 300 >/dev/null; dk_cleanup; return 0 2>/dev/null || exit 0
fi

# 2. To TCP and back, under the polled rounds.
read -r _ t1 <<<"$(tr_stat "$dev" rdma_ios tcp_ios)"
tr_set "$dev" transport=tcp && tr_wait totcp "$dev" "$SW" tcp tcp_ios "${t1:-0}"
res $? "transport=tcp: active_transport tcp and tcp_ios rising within $SW s: $TR_WAIT"
sleep 4
read -r p2 r2 <<<"$(tr_stat "$dev" polled_completions rdma_ios)"
tr_set "$dev" transport=auto && tr_wait tordma "$dev" "$SW" rdma polled_completions "${p2:-0}"
res $? "transport=auto: back on RDMA, polled_completions rising again (${p2:-?} -> $(word polled_completions "$TR_WAIT")) within $SW s: $TR_WAIT"
sleep 4
tr_rounds_stop p 300
res $? "fio --hipri: every round finished with no error, data verified: $FIO_SUM"

dk_check_backing "$dev" "$back" 8 1
res $? "the backing file holds what was written, where it was written: $DK_BACKING"

# 3. An idle poll queue: its keepalives are reaped by the health check.
read -r k0 c0 <<<"$(tr_stat "$dev" keepalives reconnects)"
tr_set "$dev" keepalive_ms=$KA_MS >/dev/null
sleep $((KA_MS * 5 / 2000))
read -r k1 c1 <<<"$(tr_stat "$dev" keepalives reconnects)"
st=$(tr_get "$dev" state)
n_gt "$k1" "$((${k0:-0} + 1))" && n_eq "$c1" "${c0:-x}" && [ "$st" = live ]
res $? "idle for $((KA_MS * 5 / 2000)) s with keepalive_ms=$KA_MS: keepalives ${k0:-?} -> $k1 answered, reconnects ${c0:-?} -> $c1, state $st"
tr_set "$dev" keepalive_ms=10000 >/dev/null

dk_csnap "$dev"
dk_show client "$DK_CS"
n_eq "$(cstat io_errors)" 0 && n_gt "$(cstat polled_completions)" 0
res $? "io_errors=$(cstat io_errors), polled_completions=$(cstat polled_completions), rdma_ios=$(cstat rdma_ios) tcp_ios=$(cstat tcp_ios)"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
dk_cleanup
