# A failback that fails must leave the serving transport alone (review item 1: a failed RDMA
# connect during failback once moved a healthy TCP disk to reconnecting, and EIO followed).
#
# The target refuses RDMA connections of client sessions while a marker file exists
# (--refuse-rdma-file), but still answers probes (session 0) and TCP. The disk is put on TCP
# (transport=tcp), the marker is created, and transport=auto lets it probe: every probe
# succeeds, every failback attempt is refused. Verified fio rounds run throughout.
#
# Acceptance: over 30 s the failback was attempted and refused several times
# (connect_failures rise, failbacks do not), and the disk stayed live on TCP the whole time
# (sampled every 0.5 s: state live, active_transport tcp), its TCP connections untouched
# (tcp_connects and reconnects unchanged) and I/O flowing (tcp_ios rising); with the marker
# gone it is back on RDMA; fio verified every round with no error; io_errors=0; no splat.
#
# And the serving set is still health-checked while the switch keeps failing (review finding
# 5): with keepalive_ms=2000 and io_timeout_ms=120000, the target is frozen (SIGSTOP), and the
# health check must find the serving connections dead (its kernel line; state no longer live)
# within 2 x keepalive_ms + 12 s, long before the I/O timeout; resumed, the disk is live again.
#   [frozen-tcp] on TCP under the rounds while RDMA failbacks are refused (the marker): regression
#     cover only, as the policy stays Probing there and the old code checked it too;
#   [frozen-rdma] the mirror, the case the finding was about, where a failed switch leaves the wanted transport unchanged: the
#     disk idle on RDMA with transport=tcp while the target serves no TCP (restarted with
#     --no-tcp), every switch to TCP refused.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
MARK=/run/rdmadisk-tests/refuse-rdma
WATCH=${RDT77_WATCH_S:-20}
tr_dmesg_mark

on storage "mkdir -p /run/rdmadisk-tests; rm -f $MARK" >/dev/null
back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" --refuse-rdma-file "$MARK" >/dev/null && dk_load && dk_map_disk d77 vol0 queues=2
if ! res $? "target (refusing RDMA while $MARK exists); insmod; map name=d77 queues=2: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
tr_set "$dev" probe_interval_ms=1000 failback_probes=2
tr_rounds_start f "$(tr_fio_args f77)"

tr_set "$dev" transport=tcp && tr_wait tcp "$dev" 120 tcp tcp_ios 0
res $? "transport=tcp: on TCP with I/O flowing ($TR_WAIT)"
on storage "touch $MARK" >/dev/null
read -r cf0 fb0 tc0 rc0 io0 <<<"$(tr_stat "$dev" connect_failures failbacks tcp_connects reconnects tcp_ios)"
tr_set "$dev" transport=auto
res $? "marker created; transport=auto: the disk probes RDMA, whose failbacks are refused"

# Sample the disk for WATCH seconds in the VM.
# Builtins only (DK_VM_DEFS), so the samples come every 0.5 s, not every few seconds.
out=$(dk_timed watch $((WATCH + 60)) "$DK_VM_DEFS
a=/sys/block/$dev/rdmadisk; bad=0; n=0; end=\$((EPOCHSECONDS + $WATCH))
while [ \$EPOCHSECONDS -lt \$end ]; do
  s=; t=; read -r s <\$a/state; read -r t <\$a/active_transport; n=\$((n + 1))
  [ \"\$s\" = live ] && [ \"\$t\" = tcp ] || { bad=\$((bad + 1)); read -r ses <\$a/session; echo \"  sample: state=\$s active=\$t session=\$ses\"; }
  pause 0.5
done
echo \"SAMPLES n=\$n bad=\$bad\"")
grep '^  sample' <<<"$out" | head -n 10
line=$(grep '^SAMPLES' <<<"$out")
read -r cf1 fb1 tc1 rc1 io1 pr1 <<<"$(tr_stat "$dev" connect_failures failbacks tcp_connects reconnects tcp_ios probes)"
n_gt "$cf1" $((cf0 + 1)) && n_eq "$fb1" "$fb0"
res $? "failback attempted and refused: connect_failures $cf0 -> $cf1, failbacks $fb0 -> $fb1, probes $pr1"
[ "$(word bad "$line")" = 0 ] && n_gt "$(word n "$line")" 2
res $? "the disk stayed live on TCP throughout ($line)"
n_eq "$tc1" "$tc0" && n_eq "$rc1" "$rc0" && n_gt "$io1" "$io0"
res $? "its TCP connections were untouched (tcp_connects $tc0 -> $tc1, reconnects $rc0 -> $rc1) and I/O flowed (tcp_ios $io0 -> $io1)"
grep -c 'RDMA refused for client sessions' "$DK_TLOG" | sed 's/^/  target refusals logged: /'

KA=2000
# frozen TAG WANT [KNOB=VALUE...]: freezes the target; the disk's health check must find its
# serving connections dead (its own kernel line, not some other reset) within 2 x KA + 12 s;
# then sets the knobs, resumes the target and waits for the disk on WANT.
frozen() {
  local tag=$1 want=$2 out ms hc
  shift 2
  tr_dmesg_mark
  on storage "kill -STOP \$(cat $DK_TPID)" >/dev/null
  out=$(dk_timed "$tag" 120 "$DK_VM_DEFS
a=/sys/block/$dev/rdmadisk; now_us; t0=\$us; s=
while :; do read -r s <\$a/state; now_us; ms=\$(( (us - t0) / 1000 )); [ \"\$s\" != live ] || [ \$ms -ge 60000 ] && break; pause 0.2; done
echo state=\$s ms=\$ms" | head -n1)
  ms=$(word ms "$out")
  hc=$(tr_kmsg_since | grep -m1 'd77: queue .*: \(no response while requests are in flight\|keepalive unanswered\)')
  [ $# = 0 ] || tr_set "$dev" "$@" >/dev/null
  on storage "kill -CONT \$(cat $DK_TPID)" >/dev/null
  printf '%s\n' "${hc:-no health-check line}" | indent
  [ "$(word state "$out")" != live ] && [ -n "$hc" ] && is_num "$ms" && (( ms <= 2 * KA + 12000 ))
  res $? "[$tag] the target frozen: the health check found the serving connections dead after ${ms:-?} ms (limit 2 x keepalive_ms + 12 s = $((2 * KA + 12000)) ms; io_timeout_ms 120000): $out"
  tr_wait "$tag" "$dev" 120 "$want"
  res $? "[$tag] the target resumed: the disk is live on $want again ($TR_WAIT)"
}
tr_set "$dev" keepalive_ms=$KA io_timeout_ms=120000 loss_timeout_s=300 >/dev/null
frozen frozen-tcp tcp
tr_set "$dev" keepalive_ms=10000 io_timeout_ms=30000 loss_timeout_s=60 >/dev/null

on storage "rm -f $MARK" >/dev/null
tr_wait rdma "$dev" 120 rdma rdma_ios "$(tr_stat "$dev" rdma_ios)"
res $? "marker removed: back on RDMA with I/O flowing ($TR_WAIT)"
tr_rounds_stop f 300
res $? "fio through it all: every round verified with no error: $FIO_SUM"
dk_check_image "$dev" "$back"
res $? "after it all: the whole disk read through the driver is the backing file: $DK_BACKING"

# The mirror, on the idle disk (its keepalive NOPs find a frozen target): on RDMA, TCP wanted
# but refused. Pinned to TCP with no TCP, the disk would not reconnect RDMA after a reset of
# its own (soft-RoCE's rare one), so the precondition is tried up to three times.
dk_target_start --export "vol0=$back" --no-tcp >/dev/null && tr_wait rdma2 "$dev" 120 rdma
res $? "target restarted with --no-tcp: live on RDMA ($TR_WAIT)"
tr_set "$dev" keepalive_ms=$KA io_timeout_ms=120000 loss_timeout_s=300 >/dev/null
for try in 1 2 3; do
  read -r cf0 <<<"$(tr_stat "$dev" connect_failures)"
  tr_set "$dev" transport=tcp >/dev/null
  sleep 6
  read -r cf1 <<<"$(tr_stat "$dev" connect_failures)"
  act=$(tr_get "$dev" active_transport); ses=$(tr_get "$dev" session)
  n_gt "$cf1" "$cf0" && [ "$act" = rdma ] && [ "$ses" = draining-to-tcp ] && break
  echo "  try $try: active_transport $act, session $ses; again"
  tr_set "$dev" transport=auto >/dev/null && tr_wait "again$try" "$dev" 120 rdma >/dev/null
done
n_gt "$cf1" "$cf0" && [ "$act" = rdma ] && [ "$ses" = draining-to-tcp ]
res $? "transport=tcp with no TCP at the target: the switch is refused (connect_failures $cf0 -> $cf1), RDMA serves on (active_transport $act, session $ses; try $try)"
# Pinned to TCP, the disk would not try RDMA again: auto lets it.
frozen frozen-rdma rdma transport=auto
tr_set "$dev" keepalive_ms=10000 io_timeout_ms=30000 loss_timeout_s=60 >/dev/null
dk_target_start --export "vol0=$back" >/dev/null && tr_wait rdma3 "$dev" 120 rdma
res $? "target restarted as it was: live on RDMA ($TR_WAIT)"
dk_csnap "$dev"
n_eq "$(cstat io_errors)" 0
res $? "io_errors=$(cstat io_errors), failbacks=$(cstat failbacks), connect_failures=$(cstat connect_failures)"
dk_unmap_rmmod 30 "$dev"
res $? "unmap normal; rmmod"
tr_splat_check
dk_cleanup
