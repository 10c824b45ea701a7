# The block device's control interface, before any data moves (malformed input is
# tests/79-bad-input.sh's): EEXIST for a name in use, a bounded connect
# timeout for an unreachable target, the ctl/devices line, the per-disk sysfs files and
# knobs, unmap's EBUSY for an open disk, and rmmod with a disk mapped.
#
# Target: one 16 MiB export vol0 on the storage VM.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null
res $? "target listens on $DK_S:$DK_PORT with a 16 MiB export vol0"

dk_load && on compute "[ \$(stat -c %a $DK_CTL/map_device) = 200 ] && [ \$(stat -c %a $DK_CTL/devices) = 444 ] && [ -z \"\$(cat $DK_CTL/devices)\" ]"
if ! res $? "module loads; ctl/map_device is write-only, ctl/devices read-only and empty"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi

no_disks() { on compute "[ -z \"\$(cat $DK_CTL/devices)\" ] && ! ls -d /sys/block/rdmadisk* >/dev/null 2>&1"; }

# Malformed map lines and knob values (EINVAL, a dmesg line naming the key, no disk) are
# tests/79-bad-input.sh's corpus.

# 1. A good map line: /dev/rdmadisk0, ctl/devices, the per-disk sysfs files and their modes.
out=$(dk_map "name=m0 addr=$DK_S port=$DK_PORT export=vol0")
rc=$?
printf '%s\n' "$out" | indent
line=$(on compute "cat $DK_CTL/devices")
[ $rc = 0 ] && [ "$line" = "rdmadisk0 m0 $DK_S:$DK_PORT vol0 live" ] && on compute "test -b /dev/rdmadisk0"
if ! res $? "map name=m0: /dev/rdmadisk0, ctl/devices reads 'rdmadisk0 m0 $DK_S:$DK_PORT vol0 live' (got '$line')"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
A=/sys/block/rdmadisk0/rdmadisk
out=$(on compute "cd $A && echo \$(cat name) \$(cat export) \$(cat address) \$(cat state) \$(cat ../size)")
[ "$out" = "m0 vol0 $DK_S:$DK_PORT live 32768" ]
res $? "sysfs: name, export, address, state, size read 'm0 vol0 $DK_S:$DK_PORT live 32768' (got '$out')"
out=$(on compute "cd $A && stat -c '%n=%a' unmap name export address state stats io_timeout_ms loss_timeout_s | tr '\n' ' '")
[ "$out" = "unmap=200 name=444 export=444 address=444 state=444 stats=444 io_timeout_ms=644 loss_timeout_s=644 " ]
res $? "sysfs modes: unmap write-only, name/export/address/state/stats read-only, knobs read-write ($out)"

# 2. The stats file: the data path's counters, as key=value lines.
dk_csnap rdmadisk0
missing=
for k in reads writes read_bytes write_bytes flushes discards write_zeroes responses remote_invalidations \
  local_invalidations rkey_mismatches crc_read_errors crc_write_errors crc_retries io_errors credit_waits \
  max_outstanding timeouts reconnects requeued; do
  is_num "$(cstat $k)" || missing+=" $k"
done
[ -z "$missing" ]
res $? "stats has every counter as key=value${missing:+ (missing:$missing)}"

# 3. Two knobs, io_timeout_ms (blk-mq's request timeout) and loss_timeout_s: defaults and good
#    values (bad ones are 79's).
out=$(on compute "cd $A && echo \$(cat io_timeout_ms) \$(cat loss_timeout_s) \$(cat ../queue/io_timeout)")
[ "$out" = "30000 60 30000" ]
res $? "defaults: io_timeout_ms=30000 (queue/io_timeout 30000), loss_timeout_s=60 (got '$out')"
out=$(on compute "cd $A && echo 5000 >io_timeout_ms && echo 30 >loss_timeout_s && echo \$(cat io_timeout_ms) \$(cat loss_timeout_s) \$(cat ../queue/io_timeout)")
[ "$out" = "5000 30 5000" ]
res $? "io_timeout_ms=5000 sets blk-mq's timeout (queue/io_timeout 5000); loss_timeout_s=30 (got '$out')"
on compute "cd $A && echo 30000 >io_timeout_ms && echo 60 >loss_timeout_s" >/dev/null

# 4. The name is taken: EEXIST, the first disk untouched.
out=$(dk_map "name=m0 addr=$DK_S export=vol0")
grep -q '^rc=1 .*File exists' <<<"$out" && grep -q "rdmadisk.*m0" <<<"$out" &&
  [ "$(on compute "cat $DK_CTL/devices")" = "rdmadisk0 m0 $DK_S:$DK_PORT vol0 live" ]
res $? "map the name m0 again: EEXIST, dmesg names m0, rdmadisk0 untouched"
printf '%s\n' "$out" | grep -v '^---' | indent

# 5. Targets that do not answer or refuse: bounded failure, nothing left behind. An unreachable
#    address answers neither over RDMA nor over TCP (the map tries both and fails with the
#    RDMA attempt's errno); a port with no RDMA listener answers with the CM's reject, and the
#    map tries TCP then (here a port with no listener either: ECONNREFUSED); an unknown export
#    gets the target's refusal, which is final (ECONNREFUSED, no TCP attempt).
fails() { # fails OPTIONS BUDGET-SECONDS DESCRIPTION
  local out secs
  out=$(dk_map "$1" 60)
  secs=$(sed -n 's/^rc=[0-9]* secs=\([0-9]*\) .*/\1/p' <<<"$out" | head -n1)
  grep -q '^rc=1 ' <<<"$out" && n_le "$secs" "$2" &&
    [ "$(on compute "cat $DK_CTL/devices")" = "rdmadisk0 m0 $DK_S:$DK_PORT vol0 live" ] &&
    on compute "! test -e /sys/block/rdmadisk1"
  res $? "$3: fails within $2 s (${secs:-?} s: $(sed -n 's/^rc=.* err=.*: //p' <<<"$out" | head -n1)), no disk left"
  printf '%s\n' "$out" | grep -v '^---' | indent
}
fails "name=m1 addr=192.0.2.99 export=vol0" 15 "unreachable target 192.0.2.99"
fails "name=m1 addr=$DK_S port=7799 tcp_port=7798 export=vol9" 15 "no listener on port 7799 nor on TCP 7798"
fails "name=m1 addr=$DK_S export=nosuch" 15 "unknown export nosuch"

# 6. unmap: a bad word, an open disk (EBUSY), then normal on the idle disk.
out=$(on compute "(echo sideways >$A/unmap) 2>&1; test -b /dev/rdmadisk0")
rc=$?
grep -q 'Invalid argument' <<<"$out" && [ $rc = 0 ]
res $? "unmap 'sideways': EINVAL, the disk stays"
out=$(on compute "exec 3</dev/rdmadisk0; (echo normal >$A/unmap) 2>&1; echo state=\$(cat $A/state); exec 3<&-")
grep -q 'Device or resource busy' <<<"$out" && grep -q '^state=live' <<<"$out"
res $? "unmap normal while /dev/rdmadisk0 is open: EBUSY, still live" || printf '%s\n' "$out" | indent
dk_unmap rdmadisk0 normal && dk_gone rdmadisk0 10 && no_disks
res $? "unmap normal of the closed disk: /sys/block/rdmadisk0 and /dev/rdmadisk0 go, ctl/devices empty"

# 7. The name and the index are free again; rmmod with the disk mapped removes it.
dk_map_disk m0 vol0 && [ "$DK_DEV" = rdmadisk0 ]
res $? "map m0 again after the unmap: rdmadisk0 again"
on compute "rmmod rdmadisk && ! test -e /sys/block/rdmadisk0 && ! test -e /dev/rdmadisk0 && ! test -e /sys/class/rdmadisk"
res $? "rmmod rdmadisk with an idle disk mapped: the disk and the class go"

dk_tsnap
echo "  target: rdma_connections=$(tstat rdma_connections) refused=$(tstat refused) connections_active=$(tstat connections_active) resets=$(tstat resets)"
dk_target_stop >/dev/null
res $? "target exits on SIGTERM"
dk_cleanup
