# The RDMA <-> TCP switching interface, before any data moves: the per-disk files transport,
# active_transport and session, the policy knobs, and the new counters.
#
# Acceptance: after map_device (tcp_port=7701 given explicitly) active_transport reads rdma,
# session rdma, transport auto; the files' modes; every knob's default; the range ends and a
# middle value of each knob are accepted and read back (bad input is 79's corpus); stats has
# every new counter; no kernel splat.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load &&
  out=$(dk_map "name=d70 addr=$DK_S port=$DK_PORT tcp_port=$DK_TCP_PORT export=vol0")
rc=$?
dev=$(dk_dev_of d70)
if ! res $rc "target (RDMA $DK_PORT, TCP $DK_TCP_PORT); insmod; map name=d70 tcp_port=$DK_TCP_PORT: /dev/${dev:-?}"; then
  printf '%s\n' "$out" | indent
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
A=/sys/block/$dev/rdmadisk

out=$(on compute "cd $A && echo \$(cat transport) \$(cat active_transport) \$(cat session)")
[ "$out" = "auto rdma rdma" ]
res $? "after map: transport auto, active_transport rdma, session rdma (got '$out')"
if ! on compute "test -e $A/transport"; then
  echo "  (no $A/transport: the driver has no transport switching; skipping the rest)"
  dk_cleanup; return 0 2>/dev/null || exit 0
fi

KNOBS="failover_threshold failover_window_ms failback_probes probe_interval_ms keepalive_ms io_timeout_ms loss_timeout_s max_credits inline_max"
out=$(on compute "cd $A && stat -c '%n=%a' transport active_transport session $KNOBS | tr '\n' ' '")
want="transport=644 active_transport=444 session=444"
for k in $KNOBS; do want+=" $k=644"; done
[ "$out" = "$want " ]
res $? "modes: transport and the knobs read-write, active_transport and session read-only ($out)"

dk_csnap "$dev"
missing=
for k in $TR_STATS_NEW; do is_num "$(cstat "$k")" || missing+=" $k"; done
[ -z "$missing" ]
res $? "stats has $TR_STATS_NEW${missing:+ (missing:$missing)}"
is_num "$(cstat rdma_ios)" && n_eq "$(cstat tcp_ios)" 0 && n_eq "$(cstat failovers)" 0 && n_eq "$(cstat failbacks)" 0
res $? "fresh disk: tcp_ios=$(cstat tcp_ios) failovers=$(cstat failovers) failbacks=$(cstat failbacks) (rdma_ios=$(cstat rdma_ios))"

# Defaults (keepalive_ms: any valid value; reported).
out=$(on compute "cd $A && for k in $KNOBS; do echo -n \"\$k=\$(cat \$k) \"; done")
echo "  defaults: $out"
want="failover_threshold=3 failover_window_ms=10000 failback_probes=3 probe_interval_ms=1000 io_timeout_ms=30000 loss_timeout_s=60 max_credits=64 inline_max=4096"
bad=
for kv in $want; do [[ " $out" == *" $kv "* ]] || bad+=" $kv"; done
ka=$(word keepalive_ms "$out")
n_eq "$ka" 0 || { n_le 100 "$ka" && n_le "$ka" 600000; } || bad+=" keepalive_ms(0 or 100..600000)"
[ -z "$bad" ]
res $? "defaults: $want, keepalive_ms=$ka${bad:+ (wrong:$bad)}"

check_good() { # check_good KNOB VALUE...: each accepted and read back; the first value is restored
  local knob=$1 orig out v s=
  shift
  orig=$(tr_get "$dev" "$knob")
  for v; do s+="printf '%s\n' '$v' >$knob || echo '$v refused'; [ \"\$(cat $knob)\" = '$v' ] || echo \"'$v' reads back \$(cat $knob)\"
"; done
  out=$(on compute "cd $A && { [ -e $knob ] || { echo 'no file $knob'; exit 0; }; }; $s printf '%s\n' '$orig' >$knob" 2>&1)
  [ -z "$out" ] && [ "$(tr_get "$dev" "$knob")" = "$orig" ]
  res $? "$knob: accepts and reads back $*, then $orig again" || printf '%s\n' "$out" | indent
}

# Refused input (empty, negative, non-numeric, out of range, huge) is tests/79-bad-input.sh's
# corpus; here each knob's bounds and a middle value are accepted and read back.
knob() { check_good "$@"; }
knob failover_threshold 1 32 5
knob failover_window_ms 1 3600000 2500
knob failback_probes 1 1000 7
knob probe_interval_ms 100 600000 250
knob io_timeout_ms 1000 600000 45000
knob loss_timeout_s 0 86400 120
knob max_credits 1 64 8
knob inline_max 0 4096 512
# keepalive_ms: 0 (off) or 100..600000
check_good keepalive_ms 0 100 600000 5000

# transport: the three words and nothing else; writing one switches, so rdma and auto only here
# (71 switches to tcp under I/O).
check_good transport rdma auto
out=$(on compute "cd $A && echo \$(cat transport) \$(cat active_transport) \$(cat session) \$(cat state)")
[ "$out" = "auto rdma rdma live" ]
res $? "after the knob writes: transport auto, active_transport rdma, session rdma, state live (got '$out')"
dk_csnap "$dev"
n_eq "$(cstat failovers)" 0 && n_eq "$(cstat io_errors)" 0
res $? "the knob writes switched nothing: failovers=$(cstat failovers) io_errors=$(cstat io_errors)"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
dk_cleanup
