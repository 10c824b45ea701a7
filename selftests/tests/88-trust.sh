# Who may attach, write and supersede, with the kernel client (docs/design.md, "The fence
# invariant" and "Access control").
#
#   A. An unprivileged process on the compute VM (user nobody, with rdma_cm and the verbs
#      device open to all users, as distributions ship them) sends Hellos with made-up
#      sessions and epochs, and a NOP after each it is let in, over TCP and RDMA, on an
#      export without a key and on one with a secret, while a mapped disk runs verified fio.
#      Nothing is let in (an ordinary port on the first, no key on the second); the disk's
#      fio passes with no I/O error; the target moved no fence but the disk's own and holds
#      one fence; the disk's session is where it was.
#   B. Root on the compute VM with a reserved port and a higher session (a second writer on
#      the host, which the module itself refuses to map): its first request supersedes the
#      disk's session; the disk's next connection is refused Stale and the disk fails for good
#      with a line saying why (the fence working: a superseded session never writes again).
#   C. A normal unmap closes the session at the target (its fence goes); a forced one does
#      not, and the next mapping takes the session above the fence's floor.
#   D. Keys both ways: a disk mapped with a key refuses a target that does not ask for it and
#      one that proves another target key, and says why an export that admits only reserved
#      ports refuses it; a host key with a separate target key maps, and verified fio passes
#      over RDMA and TCP; after a forced unmap the next mapping is told the fence only after
#      both proofs; keyed connections come from ordinary ports.
#   E. RDMA connections that never establish: one whose client never sees the accept (let go at
#      the Hello deadline), and connect requests abandoned at once (the client rejects the
#      accept): the target keeps no connection, hold or fence for them, and a disk maps after.
#   F. A target with no allow-list does not start.
# timeout: 900

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
C=$DK_CLIENT
tr_dmesg_mark
KEY=00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef
OTHER=ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100
KEYF=$DK_BACKDIR/$DK_ID.key
OTHERF=$DK_BACKDIR/$DK_ID.other.key
back0=$(dk_backing vol0 16M) back1=$(dk_backing vol1 16M) back2=$(dk_backing vol2 16M)
on storage "umask 077; echo $KEY >$KEYF; echo $OTHER >$OTHERF" >/dev/null
# The test client where user nobody can run it, and the RDMA devices open to all users.
UC=/tmp/$DK_ID.testclient
on compute "cp $C $UC && chmod 755 $UC && chmod 666 /dev/infiniband/rdma_cm /dev/infiniband/uverbs* && umask 077 && echo $KEY >$TB_DIR/$DK_ID.key" >/dev/null
res $? "[setup] the test client copied for user nobody; /dev/infiniband open to all users"

# A. Made-up sessions from an unprivileged process, beside a mapped disk.
dk_target_start --export "vol0=$back0" --export "vol1=$back1" --secret-file "vol1=$KEYF" --no-exclusive vol0 >/dev/null &&
  dk_load && dk_map_disk d88 vol0 queues=2
if res $? "[attack] target (vol0 without a key, vol1 with one); map: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  s0=$(tr_get "$dev" session_id)
  tr_rounds_start a "$(tr_fio_args a88)"
  for t in tcp:$DK_TCP_PORT rdma:$DK_PORT; do
    for e in vol0 vol1; do
      out=$(on compute "setpriv --reuid=65534 --regid=65534 --clear-groups $UC --transport ${t%%:*} --target $DK_S:${t#*:} --export $e --made-up-sessions 25 --seed $RANDOM --timeout-secs 20" 2>&1)
      rc=$?
      line=$(grep -m1 '^made-up sessions' <<<"$out")
      [ $rc = 0 ] && grep -q 'attached=0 ' <<<"$line"
      res $? "[attack] user nobody, ${t%%:*}, $e: ${line:-$(tail -n 2 <<<"$out" | tr '\n' ' ')}"
    done
  done
  # Root may bind a reserved port, but without the key it still cannot attach vol1.
  out=$(on compute "$C --transport rdma --target $DK_S:$DK_PORT --export vol1 --made-up-sessions 10 --timeout-secs 20" 2>&1)
  line=$(grep -m1 '^made-up sessions' <<<"$out")
  grep -q 'attached=0 ' <<<"$line"
  res $? "[attack] root without the key, rdma, vol1: ${line:-$(tail -n 2 <<<"$out" | tr '\n' ' ')}"
  tr_rounds_stop a 300
  res $? "[attack] the disk's verified fio went on through it all: $FIO_SUM"
  ie=$(tr_stat "$dev" io_errors) s1=$(tr_get "$dev" session_id) st=$(tr_get "$dev" state)
  dk_tsnap
  n_eq "$ie" 0 && [ "$st" = live ] && [ "$s1" = "$s0" ] && n_eq "$(tstat fences)" 1 &&
    n_gt "$(tstat unreserved_port_refusals)" 0
  res $? "[attack] io_errors=$ie state=$st session $s0 -> $s1; target: fences=$(tstat fences) fence_moves=$(tstat fence_moves) unreserved_port_refusals=$(tstat unreserved_port_refusals) auth_failures=$(tstat auth_failures) stale_hellos=$(tstat stale_hellos)"

  # B. A second writer on the host, from a reserved port and a higher session.
  out=$(on compute "$C --transport tcp --target $DK_S:$DK_TCP_PORT --export vol0 --session-id $((s1 + 1000)) --count 4 --queue-depth 1 --max-size 4096 --span-mib 1 --timeout-secs 30" 2>&1)
  grep -q 'RESULT: .* 0 failed' <<<"$out"
  res $? "[supersede] root's own session $((s1 + 1000)) on vol0 writes: $(grep -m1 RESULT <<<"$out")"
  # The disk's next write meets the fence: Fenced, its connection resets, its reconnect is
  # refused Stale, and the disk fails.
  dk_timed sup 120 "dd if=/dev/zero of=/dev/$dev bs=4k count=1 seek=100 oflag=direct status=none" >/dev/null
  out=$(on compute "$DK_VM_DEFS
for ((i = 0; i < 150; i++)); do read -r s </sys/block/$dev/rdmadisk/state; [ \"\$s\" = failed ] && break; pause 0.2; done
echo state=\$s; dmesg | grep -E 'd88: .*(superseded|Stale)' | tail -n 3")
  printf '%s\n' "$out" | indent
  grep -q '^state=failed' <<<"$out" && grep -q 'was superseded at the target by a newer mapping' <<<"$out"
  res $? "[supersede] the superseded disk failed for good and says why ($(head -n1 <<<"$out"))"
  dk_unmap "$dev" force >/dev/null && dk_gone "$dev" 30
  res $? "[supersede] unmap force"
fi

# C. Close on a normal unmap; none on a forced one.
dk_target_start --export "vol0=$back0" --export "vol1=$back1" >/dev/null && dk_map_disk d88c vol0
if res $? "[close] map: /dev/${DK_DEV:-?} is live (session $(tr_get "${DK_DEV:-x}" session_id))"; then
  dev=$DK_DEV
  dk_fio c1 "--name=c1 --filename=/dev/$dev --rw=write --bs=64k --size=1M --verify=crc32c --do_verify=1"
  dk_tsnap; f1=$(tstat fences)
  dk_unmap "$dev" normal && dk_gone "$dev" 30
  # The target lets the fence go once the disk's connections are gone there too.
  for ((i = 0; i < 10; i++)); do dk_tsnap; n_eq "$(tstat fences)" 0 && break; done
  n_eq "$f1" 1 && n_eq "$(tstat fences)" 0 && n_eq "$(tstat closes)" 1 && grep -q 'closed; its fence goes' "$DK_TLOG"
  res $? "[close] a normal unmap closes the session: fences $f1 -> $(tstat fences), closes=$(tstat closes)"
  dk_map_disk d88c vol0 && dev=$DK_DEV && s=$(tr_get "$dev" session_id)
  dk_fio c2 "--name=c2 --filename=/dev/$dev --rw=write --bs=64k --size=1M --verify=crc32c --do_verify=1"
  dk_unmap "$dev" force && dk_gone "$dev" 30
  dk_tsnap; f2=$(tstat fences)
  dk_map_disk d88c vol0 && dev=$DK_DEV && s2=$(tr_get "$dev" session_id)
  n_eq "$s" 1 && n_eq "$f2" 1 && n_eq "$s2" 2 &&
    on compute "dmesg | grep -q 'fence for this host and export is at session 1: mapping as session 2'"
  res $? "[close] after a forced unmap the fence stays (fences=$f2) and the next mapping goes above it: session $s then ${s2:-?}"
  dk_unmap "$dev" normal && dk_gone "$dev" 30
  res $? "[close] unmap"
fi

# D. Keys both ways. vol0 has no key and takes any port (insecure), vol2 has no key and takes
# reserved ports only, vol1 has a key.
dk_target_start --export "vol0=$back0" --export "vol1=$back1" --export "vol2=$back2" --insecure vol0 \
  --secret-file "vol1=$KEYF" >/dev/null
res $? "[keys] target: vol0 and vol2 without a key (vol0 insecure), vol1 with one"
for bad in "secret=$KEY:vol0:did not ask for our key:Permission denied" \
  "secret=$KEY:vol2:admits only reserved ports:Connection refused" \
  "secret=$KEY target_secret=$OTHER:vol1:did not prove the key:Permission denied"; do
  IFS=: read -r opts e want err <<<"$bad"
  out=$(dk_map "name=d88d addr=$DK_S export=$e $opts" 60)
  rc=$(sed -n 's/^rc=\([0-9]*\) .*/\1/p' <<<"$out" | head -n1)
  [ "$rc" != 0 ] && grep -q "$want" <<<"$out" && grep -qi "$err" <<<"$out"
  res $? "[keys] map $e with $(sed -E 's/[0-9a-f]{64}/KEY/g' <<<"$opts"): refused (rc=$rc, $err), \"$want\""
done
dk_target_start --export "vol0=$back0" --export "vol1=$back1" --host-key "$TB_COMPUTE_ADDR=$KEYF" \
  --host-target-key "$TB_COMPUTE_ADDR=$OTHERF" >/dev/null && dk_map_disk d88k vol0 "secret=$KEY target_secret=$OTHER queues=2"
if res $? "[keys] a host key and a separate target key: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  dk_fio k1 "--name=k1 --filename=/dev/$dev --rw=randwrite --bs=4k --size=1M --iodepth=8 --verify=crc32c --do_verify=1"
  res $? "[keys] verified fio over RDMA: $FIO_SUM"
  tr_set "$dev" transport=tcp >/dev/null && tr_wait k88 "$dev" 60 tcp >/dev/null
  res $? "[keys] transport=tcp: the TCP connections authenticate both ways too ($TR_WAIT)"
  dk_fio k2 "--name=k2 --filename=/dev/$dev --rw=randwrite --bs=4k --size=1M --offset=4M --iodepth=8 --verify=crc32c --do_verify=1"
  res $? "[keys] verified fio over TCP: $FIO_SUM"
  # A keyed target says "superseded" only after both proofs: the next mapping after a forced
  # unmap (the fence stays) is told so that way, and goes above it.
  dk_unmap "$dev" force && dk_gone "$dev" 30 &&
    dk_map_disk d88k vol0 "secret=$KEY target_secret=$OTHER queues=2" && dev=$DK_DEV && s2=$(tr_get "$dev" session_id)
  n_eq "${s2:-x}" 2 &&
    on compute "dmesg | grep -q 'authenticated, and REJECTED by the target: Stale (its fence is at session 1)'" &&
    grep -q 'refusing it after the authentication' "$DK_TLOG"
  res $? "[keys] after a forced unmap, the next mapping is told the fence only after both proofs, and maps above it: session ${s2:-?}"
  # With a key the proofs vouch for the host: its connections use ordinary ports.
  ports=$(grep -oE "(rdma: |tcp )$TB_COMPUTE_ADDR:[0-9]+: authenticated" "$DK_TLOG" | sed -E 's/.*:([0-9]+): authenticated/\1/' | sort -un | tr '\n' ' ')
  low=$(for p in $ports; do ((p < 1024)) && echo "$p"; done | wc -l)
  [ -n "$ports" ] && n_eq "$low" 0
  res $? "[keys] the keyed connections came from ordinary ports ($(wc -w <<<"$ports") ports, $low below 1024)"
  dk_unmap "$dev" normal && dk_gone "$dev" 30
  res $? "[keys] unmap"
fi

# E. Half-open RDMA connections. First a client that never sees the target's accept (RoCE
#    dropped on the compute VM's input, which leaves its rdma_cm healthy: TESTBED.md): the target
#    accepted, the connection never establishes, and the target lets it go at the Hello deadline
#    (3 s), or when the client's CM gives up first and rejects. Then
#    connect requests abandoned at once: the client's CM rejects the accept (or the target
#    finds the request gone before it accepts); either way nothing stays.
dk_target_start --export "vol0=$back0" --hello-timeout-s 3 >/dev/null
on compute "nft add table ip f88 && nft add chain ip f88 in '{ type filter hook input priority 0; }' && nft add rule ip f88 in udp dport 4791 drop" >/dev/null
out=$(on compute "timeout 60 $C --transport rdma --target $DK_S:$DK_PORT --export vol0 --count 1 --timeout-secs 10" 2>&1)
on compute "nft delete table ip f88" >/dev/null
dk_tsnap
# The client's CM may give up first (its REJ goes out; only input is dropped): either way the
# target lets the connection go as never established.
n_gt "$(tstat half_open_closes)" 0 && n_eq "$(tstat connections_active)" 0 && n_eq "$(tstat fences)" 0 &&
  grep -qE 'never established (within the Hello deadline|\(the client rejected)' "$DK_TLOG"
res $? "[half-open] an accept the client never answers: let go, never established (half_open_closes=$(tstat half_open_closes) connections_active=$(tstat connections_active) fences=$(tstat fences))"
h0=$(tstat half_open_closes) r0=$(tstat refused)
out=$(on compute "$C --transport rdma --target $DK_S:$DK_PORT --export vol0 --hostile half-open --count 8 --timeout-secs 20" 2>&1)
grep -q '^ok - hostile half-open' <<<"$out"
res $? "[half-open] $(grep -m1 -E '^(ok|not ok) - ' <<<"$out")"
for ((i = 0; i < 10; i++)); do dk_tsnap; n_eq "$(tstat connections_active)" 0 && break; sleep 1; done
n_eq "$(tstat connections_active)" 0 && n_eq "$(tstat fences)" 0 && n_eq "$(tstat exclusive_refusals)" 0 &&
  n_le 8 $(($(tstat half_open_closes) - h0 + $(tstat refused) - r0))
res $? "[half-open] 8 abandoned connect requests: none left (connections_active=$(tstat connections_active)), $(($(tstat half_open_closes) - h0)) released after the accept, $(($(tstat refused) - r0)) before it, fences=$(tstat fences)"
dk_map_disk d88h vol0 && dk_fio h1 "--name=h1 --filename=/dev/$DK_DEV --rw=write --bs=64k --size=1M --verify=crc32c --do_verify=1" &&
  dk_unmap "$DK_DEV" normal && dk_gone "$DK_DEV" 30
res $? "[half-open] a disk maps and writes afterwards: nothing was left holding the export"

# F. Default deny.
out=$(on storage "timeout 20 $DK_TARGET --listen $DK_S --tcp-port 7799 --no-rdma --export vol9=$back1 2>&1; echo rc=\$?")
grep -q 'no allow-list' <<<"$out" && grep -q '^rc=2' <<<"$out"
res $? "[deny] a target with no allow-list, even on a specific address, does not start: $(grep -m1 'no allow-list' <<<"$out" | cut -c1-90)"

on compute "rm -f $UC $TB_DIR/$DK_ID.key; rmmod rdmadisk 2>/dev/null; true" >/dev/null
tr_splat_check
dk_cleanup
