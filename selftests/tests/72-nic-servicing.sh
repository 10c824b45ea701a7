# The NIC servicing drill: the compute VM's RDMA device is removed and added back RDT72_CYCLES times
# under verified I/O, and the disk rides it out on TCP.
#
# fio in rounds (2 jobs, random 50/50 reads and writes of 4-64 KiB at queue depth 16, crc32c
# headers, every written block verified) runs through RDT72_CYCLES (default 2: a second cycle in the same module lifetime; make soak runs
# many more) cycles of:
#   rdma link delete rxe0            (must return within RDT72_DEL_MAX_MS, default 15000 ms:
#                                     the driver lets go of the device without waiting
#                                     for its requests, which could take the 30 s I/O
#                                     timeout; the rdma tool's own run under TCG with fio
#                                     going has been seen at 5.5 s)
#   wait: active_transport tcp and tcp_ios rising     (within RDT72_WAIT_S, default 60 s,
#                                                     from the start of the delete)
#   rdma link add rxe0 type rxe netdev <the compute NIC>   (as vm/agent.sh created it)
#   wait: active_transport rdma and rdma_ios rising   (within RDT72_WAIT_S from the add)
# Each cycle prints its figures: delete time, time to TCP (from the delete), time back to RDMA
# (from the add).
#
# Acceptance: every cycle within its bounds; every fio round without error and verified;
# failovers and failbacks both rose by at least the cycles; io_errors=0; a seeded pattern
# written through the disk afterwards is in the backing file at the same offset; no kernel
# splat.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
CYCLES=${RDT72_CYCLES:-2}
DEL_MAX=${RDT72_DEL_MAX_MS:-15000}
WAIT=${RDT72_WAIT_S:-60}
nic=$(tr_nic)
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d72 vol0
if ! res $? "target (RDMA $DK_PORT, TCP $DK_TCP_PORT); insmod; map name=d72: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
out=$(on compute "cd /sys/block/$dev/rdmadisk && echo \$(cat transport) \$(cat active_transport) \$(cat probe_interval_ms) \$(cat failback_probes)")
echo "  transport, active_transport, probe_interval_ms, failback_probes: $out"
read -r f0 b0 r0 dr0 <<<"$(tr_stat "$dev" failovers failbacks rdma_ios switches_device_removed)"

tr_rounds_start s "$(tr_fio_args s72)"
tr_wait io "$dev" 120 rdma rdma_ios "${r0:-0}"
if ! res $? "fio rounds under way over RDMA: $TR_WAIT"; then
  tr_rounds_stop s 300 >/dev/null; dk_cleanup; return 0 2>/dev/null || exit 0
fi

# The delete and the add are timed in the VM, each followed there by the wait, so the times
# to TCP and back to RDMA start at the command. They run in the VM's background with a time
# limit (tr_wait, dk_timed): a driver that holds the device makes the delete block, and the
# VM's command queue must stay usable.
del_pre="T0=\$(date +%s%N); rdma link delete $TR_RXE; rc=\$?
echo \"DEL rc=\$rc ms=\$(( (\$(date +%s%N) - T0) / 1000000 ))\"; [ \$rc = 0 ] || exit 1"
add_pre="T0=\$(date +%s%N); rdma link add $TR_RXE type rxe netdev $nic; rc=\$?
echo \"ADD rc=\$rc ms=\$(( (\$(date +%s%N) - T0) / 1000000 ))\"; [ \$rc = 0 ] || exit 1"
fails=0 done=0
printf '  %-6s %10s %10s %10s %10s  %s\n' cycle delete_ms to_tcp_ms add_ms to_rdma_ms "tcp_ios rdma_ios"
for c in $(seq "$CYCLES"); do
  why='' dms=- tms=- ams=- rms=-
  read -r t1 <<<"$(tr_stat "$dev" tcp_ios)"
  TR_PRE=$del_pre tr_wait "tcp$c" "$dev" "$WAIT" tcp tcp_ios "${t1:-0}" >/dev/null
  ok=$?
  dline=$(grep '^DEL ' <<<"$TR_OUT")
  if [ "$(word rc "$dline")" != 0 ]; then
    why="rdma link delete failed or did not return in $((WAIT + 120)) s: $(tr '\n' ' ' <<<"$TR_OUT")"
  else
    dms=$(word ms "$dline")
    n_le "$dms" "$DEL_MAX" || why="rdma link delete took $dms ms (max $DEL_MAX)"
    [ $ok = 0 ] && tms=$TR_MS || why+="${why:+; }not on TCP with tcp_ios rising within $WAIT s ($TR_WAIT)"
  fi
  read -r r1 <<<"$(tr_stat "$dev" rdma_ios)"
  TR_PRE=$add_pre tr_wait "rdma$c" "$dev" "$WAIT" rdma rdma_ios "${r1:-0}" >/dev/null
  ok=$?
  aline=$(grep '^ADD ' <<<"$TR_OUT")
  if [ "$(word rc "$aline")" != 0 ]; then
    why+="${why:+; }rdma link add failed: $(tr '\n' ' ' <<<"$TR_OUT")"
  else
    ams=$(word ms "$aline")
    [ $ok = 0 ] && rms=$TR_MS || why+="${why:+; }not back on RDMA with rdma_ios rising within $WAIT s ($TR_WAIT)"
  fi
  printf '  %-6s %10s %10s %10s %10s  %s\n' "$c" "$dms" "$tms" "$ams" "$rms" "$(tr_stat "$dev" tcp_ios rdma_ios)"
  done=$c
  if [ -n "$why" ]; then
    fails=$((fails + 1))
    res 1 "cycle $c: $why"
    tr_rxe_restore
    # A cycle that left the disk off RDMA makes the next ones meaningless.
    [ "$(tr_get "$dev" active_transport)" = rdma ] || break
  fi
  tr_rounds_running s || { res 1 "fio rounds ended during cycle $c"; break; }
done
[ "$fails" = 0 ] && [ "$done" = "$CYCLES" ]
res $? "$done of $CYCLES NIC servicing cycles, $fails failed: delete within $DEL_MAX ms, on TCP and back on RDMA within $WAIT s each"

sleep 3
tr_rounds_stop s 300
res $? "fio through the drill: every round finished with no error, data verified: $FIO_SUM"
dk_check_backing "$dev" "$back" 8 1
res $? "after the drill: the backing file holds what was written, where it was written: $DK_BACKING"
dk_check_image "$dev" "$back"
res $? "after it all: the whole disk read through the driver is the backing file: $DK_BACKING"

dk_csnap "$dev"
dk_show client "$DK_CS"
n_le $((${f0:-0} + CYCLES)) "$(cstat failovers)" && n_le $((${b0:-0} + CYCLES)) "$(cstat failbacks)" &&
  n_le $((${dr0:-0} + CYCLES)) "$(cstat switches_device_removed)"
res $? "failovers ${f0:-?} -> $(cstat failovers), failbacks ${b0:-?} -> $(cstat failbacks) (at least +$CYCLES each); switches for device_removed ${dr0:-?} -> $(cstat switches_device_removed), device_added $(cstat switches_device_added), probes $(cstat switches_probes)"
out=$(on compute "cd /sys/block/$dev/rdmadisk && echo \$(cat state) \$(cat active_transport)")
n_eq "$(cstat io_errors)" 0 && [ "$out" = "live rdma" ]
res $? "io_errors=$(cstat io_errors); state and active_transport '$out' (want 'live rdma')"

tr_rxe_restore
dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
dk_cleanup
tr_rxe_restore
