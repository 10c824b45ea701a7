# IPv6 (issue 30, item 6): a disk mapped by an IPv6 address, over TCP and over RDMA, from a
# target listening on an IPv6 address.
#
#   A. Each VM gets an IPv6 address on the bed's link (fd00:db8::1 and ::2, nodad: the link is
#      the bed's alone). Each rxe0 lists it as a RoCE v2 GID when soft-RoCE carries IPv6.
#   B. The kernel refuses a bare IPv6 address in target= (its colons read as ports) and a
#      link-local one, with EINVAL and a line saying which key.
#   C. The target listens on fd00:db8::2 only, RDMA and TCP. With the compute VM's rxe0 deleted,
#      map_device target=[fd00:db8::2] maps the disk on TCP (from a reserved port); sysfs and
#      ctl/devices show the target as [fd00:db8::2]:7700; verified fio; the disk's tcp_ios
#      moved, and the target served [fd00:db8::1]. A second disk, mapped with a key, proves it
#      over TCP by IPv6 (the proofs cover both ends' addresses).
#   D. rxe0 added back: both disks move to RDMA by themselves (their probes reach the target
#      over IPv6; the keyed one proves its key again); verified fio; rdma_ios moved. When a
#      VM's rxe0 has no IPv6 GID, soft-RoCE in this bed cannot carry RoCE over IPv6: D is
#      skipped, saying so, and C stands alone.
#   E. A target listening on :: serves IPv4 and IPv6 clients: the kernel's RDMA probe to
#      192.0.2.2 (and to fd00:db8::2), the test client over TCP to both (and over RDMA by
#      IPv6).
# timeout: 300

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

C6=fd00:db8::1
S6=fd00:db8::2
# v6_cleanup: the test's disk, module and target gone, rxe0 back, the addresses removed.
v6_cleanup() {
  tr_rxe_restore
  dk_cleanup
  on compute "ip -6 addr del $C6/64 dev $(tr_nic) 2>/dev/null; true" >/dev/null
  on storage "ip -6 addr del $S6/64 dev $(cat "$TB_DIR/storage.nic") 2>/dev/null; true" >/dev/null
}

# A. The addresses, and the GIDs soft-RoCE made of them.
# gids VM: the RoCE v2 GIDs of the VM's rxe0 (GID, type), one a line.
gids() {
  on "$1" "for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
  read -r v <\$g 2>/dev/null || continue
  [ \"\$v\" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue
  read -r t </sys/class/infiniband/rxe0/ports/1/gid_attrs/types/\${g##*/} 2>/dev/null
  echo \"\$v \$t\"
done"
}
out=$(on compute "ip -6 addr add $C6/64 dev $(cat "$TB_DIR/compute.nic") nodad && ip -6 addr show dev $(cat "$TB_DIR/compute.nic") scope global" 2>&1 &&
  on storage "ip -6 addr add $S6/64 dev $(cat "$TB_DIR/storage.nic") nodad && ip -6 addr show dev $(cat "$TB_DIR/storage.nic") scope global" 2>&1)
rc=$?
printf '%s\n' "$out" | indent
if ! res $rc "[setup] $C6/64 on the compute VM, $S6/64 on the storage VM"; then
  v6_cleanup; return 0 2>/dev/null || exit 0
fi
# The GID of fd00:db8::1 as sysfs writes it.
gid_of() { python3 -c 'import ipaddress, sys; h = ipaddress.IPv6Address(sys.argv[1]).exploded; print(h)' "$1"; }
rdma6=1
for vm in compute:$C6 storage:$S6; do
  g=$(gids "${vm%%:*}")
  printf '%s\n' "$g" | indent "${vm%%:*} rxe0 GID: "
  grep -qi "^$(gid_of "${vm#*:}") RoCE v2" <<<"$g" || rdma6=0
done
if [ $rdma6 = 1 ]; then
  res 0 "[setup] each rxe0 has its VM's IPv6 address as a RoCE v2 GID"
else
  echo "  soft-RoCE here lists no RoCE v2 GID for an IPv6 address: RDMA over IPv6 (D) is skipped"
fi

# B. Bad IPv6 input.
back=$(dk_backing vol0 16M) backk=$(dk_backing vol2 16M)
KEY=00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef
KEYF=$DK_BACKDIR/$DK_ID.key
on storage "umask 077; echo $KEY >$KEYF" >/dev/null
dk_load
res $? "[parse] insmod"
for bad in "target=$S6" "target=[fe80::2]" "addr=[$S6]:7700"; do
  out=$(on compute "n=\$(dmesg | wc -l); out=\$( (echo 'name=b94 $bad export=vol0' >$DK_CTL/map_device) 2>&1 ); rc=\$?
echo \"rc=\$rc \$out\"; dmesg | tail -n +\$((n + 1)) | grep 'map_device:'")
  key=${bad%%=*}
  grep -q 'Invalid argument' <<<"$out" && grep -q "map_device: bad value for key '$key'" <<<"$out"
  res $? "[parse] '$bad' is refused: $(tr '\n' ' ' <<<"$out")"
done

# C. The target on IPv6 only; the disk on TCP (no RDMA device on the compute VM).
out=$(on storage "$(_dk_tstop)
tstop >/dev/null
rm -f $DK_STATS $DK_TLOG
setsid $DK_TARGET --listen $S6 --rdma-port $DK_PORT --tcp-port $DK_TCP_PORT --allow $C6 \
  --stats-file $DK_STATS --export vol0=$back --export vol2=$backk --secret-file vol2=$KEYF >$DK_TLOG 2>&1 </dev/null &
echo \$! >$DK_TPID
for ((i = 0; i < 100; i++)); do has $DK_TLOG 'rdma listening' && break; has $DK_TLOG 'rdma unavailable' && break; pause 0.2; done
show $DK_TLOG")
printf '%s\n' "$out" | indent "target: "
grep -q "tcp listening on \[$S6\]:$DK_TCP_PORT" <<<"$out"
res $? "[tcp] the target listens on TCP at [$S6]:$DK_TCP_PORT"
if [ $rdma6 = 1 ]; then
  grep -q "rdma listening on \[$S6\]:$DK_PORT" <<<"$out"
  res $? "[rdma] the target listens on RDMA at [$S6]:$DK_PORT"
fi

on compute "rdma link delete $TR_RXE"
DK_TARGETS="target=[$S6]" dk_map_disk d94 vol0
if ! res $? "[tcp] map target=[$S6] with no RDMA device: /dev/${DK_DEV:-?} is live"; then
  v6_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
out=$(on compute "cd /sys/block/$dev/rdmadisk && echo \$(cat active_transport address active_path) / \$(grep ' d94 ' $DK_CTL/devices)")
[ "$out" = "tcp [$S6]:$DK_PORT 0 [$S6]:$DK_PORT / $dev d94 [$S6]:$DK_PORT vol0 live" ]
res $? "[tcp] active_transport address active_path / ctl/devices: '$out'"
dk_fio t "--name=t --filename=/dev/$dev --rw=randwrite --bsrange=4k-64k --verify=crc32c --do_verify=1 --size=4M --iodepth=8 --randseed=94"
res $? "[tcp] verified fio over TCP by IPv6: $FIO_SUM"
dk_csnap "$dev"
dk_tsnap
grep -E "tcp: \[$C6\]:[0-9]+ attached" "$DK_TLOG" | head -n 2 | indent "target log: "
n_gt "$(cstat tcp_ios)" 0 && n_eq "$(cstat rdma_ios)" 0 && n_eq "$(cstat io_errors)" 0 &&
  n_gt "$(tstat tcp_connections)" 0 && grep -qE "tcp: \[$C6\]:[0-9]+ attached" "$DK_TLOG"
res $? "[tcp] disk: tcp_ios=$(cstat tcp_ios) rdma_ios=$(cstat rdma_ios) io_errors=$(cstat io_errors); target: tcp_connections=$(tstat tcp_connections), connections from [$C6] in its log"
DK_TARGETS="target=[$S6]" dk_map_disk d94k vol2 "secret=$KEY"
rc=$?
devk=$DK_DEV
grep -E "tcp \[$C6\]:[0-9]+: authenticated" "$DK_TLOG" | head -n 1 | indent "target log: "
[ $rc = 0 ] && [ "$(tr_get "$devk" active_transport)" = tcp ] && grep -qE "tcp \[$C6\]:[0-9]+: authenticated" "$DK_TLOG"
res $? "[tcp] a disk mapped with a key proves it over TCP by IPv6: /dev/${devk:-?} live on $(tr_get "${devk:-x}" active_transport)"

# D. RDMA over IPv6.
on compute "rdma link add $TR_RXE type rxe netdev $(tr_nic)"
if [ $rdma6 = 1 ]; then
  read -r r0 <<<"$(tr_stat "$dev" rdma_ios)"
  tr_wait back "$dev" 60 rdma
  res $? "[rdma] rdma link add: the disk moves to RDMA over IPv6: $TR_WAIT"
  dk_fio r "--name=r --filename=/dev/$dev --rw=randwrite --bsrange=4k-64k --verify=crc32c --do_verify=1 --size=4M --offset=8M --iodepth=8 --randseed=941"
  res $? "[rdma] verified fio over RDMA by IPv6: $FIO_SUM"
  dk_csnap "$dev"
  dk_tsnap
  grep -E "rdma: \[$C6\]:[0-9]+ attached" "$DK_TLOG" | head -n 2 | indent "target log: "
  n_gt "$(cstat rdma_ios)" "${r0:-0}" && n_eq "$(cstat io_errors)" 0 && n_gt "$(tstat rdma_connections)" 0 &&
    grep -qE "rdma: \[$C6\]:[0-9]+ attached" "$DK_TLOG"
  res $? "[rdma] disk: rdma_ios ${r0:-?} -> $(cstat rdma_ios), failbacks=$(cstat failbacks), io_errors=$(cstat io_errors); target: rdma_connections=$(tstat rdma_connections), RDMA connections from [$C6] in its log"
  if [ -n "$devk" ]; then
    tr_wait backk "$devk" 30 rdma >/dev/null
    grep -E "rdma: \[$C6\]:[0-9]+: authenticated" "$DK_TLOG" | head -n 1 | indent "target log: "
    [ "$(tr_get "$devk" active_transport)" = rdma ] && grep -qE "rdma: \[$C6\]:[0-9]+: authenticated" "$DK_TLOG"
    res $? "[rdma] the disk with a key proves it over RDMA by IPv6: $TR_WAIT"
  fi
else
  echo "ok - [rdma] # SKIP soft-RoCE in this bed lists no RoCE v2 GID for the VMs' IPv6 addresses (GIDs above): no RDMA over IPv6 to test"
fi

dk_unmap "$dev" normal && dk_gone "$dev" 30 && { [ -z "$devk" ] || { dk_unmap "$devk" normal && dk_gone "$devk" 30; }; }
res $? "unmap normal"

# E. A target listening on :: serves IPv4 clients too (as IPv4-mapped), on both transports:
# the kernel's RDMA probe and the test client over TCP, to 192.0.2.2 and to fd00:db8::2.
out=$(on storage "$(_dk_tstop)
tstop >/dev/null
rm -f $DK_STATS $DK_TLOG
setsid $DK_TARGET --listen :: --rdma-port $DK_PORT --tcp-port $DK_TCP_PORT --allow $TB_COMPUTE_ADDR --allow $C6 \
  --stats-file $DK_STATS --export vol1=$back >$DK_TLOG 2>&1 </dev/null &
echo \$! >$DK_TPID
for ((i = 0; i < 100; i++)); do has $DK_TLOG 'rdma listening' && break; has $DK_TLOG 'rdma unavailable' && break; pause 0.2; done
show $DK_TLOG")
printf '%s\n' "$out" | grep listening | indent "target: "
grep -q "tcp listening on \[::\]:$DK_TCP_PORT" <<<"$out" && grep -q "rdma listening on \[::\]:$DK_PORT" <<<"$out"
res $? "[dual] the target listens on [::] (TCP and RDMA)"
probes=("$DK_S")
[ $rdma6 = 1 ] && probes+=("$S6")
for a in "${probes[@]}"; do
  out=$(on compute "n=\$(dmesg | wc -l); out=\$( (echo 'addr=$a export=vol1' >$DK_CTL/probe) 2>&1 ); echo \"rc=\$? \$out\"
dmesg | tail -n +\$((n + 1)) | grep -m2 'probe'")
  grep -q '^rc=0 ' <<<"$out"
  res $? "[dual] RDMA probe addr=$a: $(tr '\n' ' ' <<<"$out")"
done
for t in "$DK_S:$DK_TCP_PORT" "[$S6]:$DK_TCP_PORT"; do
  out=$(on compute "$DK_CLIENT --transport tcp --target '$t' --export vol1 --count 16 --queue-depth 2 --max-size 16384 --span-mib 1 --timeout-secs 20" 2>&1)
  grep -q 'RESULT: .* 0 failed' <<<"$out"
  res $? "[dual] test client over TCP to $t: $(grep -m1 RESULT <<<"$out" || tail -n 2 <<<"$out" | tr '\n' ' ')"
done
if [ $rdma6 = 1 ]; then
  out=$(on compute "$DK_CLIENT --transport rdma --target '[$S6]:$DK_PORT' --export vol1 --count 16 --queue-depth 2 --max-size 16384 --span-mib 1 --timeout-secs 20" 2>&1)
  grep -q 'RESULT: .* 0 failed' <<<"$out"
  res $? "[dual] test client over RDMA to [$S6]:$DK_PORT: $(grep -m1 RESULT <<<"$out" || tail -n 2 <<<"$out" | tr '\n' ' ')"
fi
on compute "rmmod rdmadisk"
res $? "rmmod rdmadisk"
tr_splat_check
v6_cleanup
