# A hostile target: the target runs with --hostile, breaking every 4th response on purpose in
# each of the ways a broken or malicious peer would (rdmadisk-target's hostile mode):
#   RDMA: unknown request ids, duplicate responses, the wrong rkey invalidated, no invalidation,
#         out-of-range statuses, lengths larger than asked, truncated and garbage messages,
#         credit grants that overflow, and an RDMA Write to a read's rkey after its response;
#   TCP:  the same, where TCP has them (no rkeys, no invalidation, no late write).
# Verified fio runs on RDMA (transport=rdma, so resets reconnect RDMA instead of failing over),
# then on TCP (transport=tcp).
#
# Acceptance: fio finishes both phases with no error and its data verified (no request failed
# or was completed twice or with another's response); every hostile kind was acted out; every
# late RDMA Write was refused by the client's NIC (late_write_rejected > 0,
# late_write_succeeded = 0: no buffer stayed reachable after its response); the client dropped
# stale responses, caught wrong keys, invalidated locally, and reset connections; io_errors=0;
# no kernel splat; the disk unmaps and the module unloads.
# timeout: 1500

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
RDMA_KINDS=unknown_tag,dup_response,wrong_rkey,no_invalidate,bad_status,long_length,truncated,garbage,credit_overflow,late_write
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" --hostile "$RDMA_KINDS" --hostile-every 4 >/dev/null &&
  dk_load && dk_map_disk d78 vol0
if ! res $? "hostile target (every 4th response, all kinds); insmod; map name=d78: /dev/${DK_DEV:-?} is live"; then
  tail -n 20 "$DK_TLOG" | indent "target: "
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
grep -m1 'HOSTILE' "$DK_TLOG" | indent "target: "
# Each reset reconnects at once; keep every other timer out of the way.
tr_set "$dev" transport=rdma io_timeout_ms=20000 loss_timeout_s=600 keepalive_ms=0
res $? "transport=rdma (resets reconnect RDMA), io_timeout_ms=20000, loss_timeout_s=600"

fio_args() { # NAME SEED
  echo "--name=$1 --filename=/dev/$dev --rw=randrw --rwmixread=50 --bsrange=4k-64k --iodepth=8" \
    "--size=3M --verify=crc32c --do_verify=1 --randseed=$2"
}
DK_FIO_TIMEOUT=600 dk_fio rdma "$(fio_args hostile-rdma 781)"
res $? "over RDMA: fio with verify through the hostile responses: $FIO_SUM"
dk_csnap "$dev"; c1=$DK_CS
dk_show client "$c1"

# Where the TCP phase begins in the target's log and in the compute VM's kernel log (the
# test's own mark, for the splat check at the end, is kept).
tlog0=$(wc -l <"$DK_TLOG")
m0=$TR_MARK; tr_dmesg_mark; tcp_mark=$TR_MARK; TR_MARK=$m0
tr_set "$dev" transport=tcp && tr_wait tcp "$dev" 120 tcp
res $? "transport=tcp: on TCP ($TR_WAIT)"
DK_FIO_TIMEOUT=600 dk_fio tcp "$(fio_args hostile-tcp 782) --offset=4M"
res $? "over TCP: fio with verify through the hostile responses: $FIO_SUM"
dk_csnap "$dev"
dk_show client "$DK_CS"
dk_tsnap
dk_show target "$(grep -E '^(hostile|late_write|resets|rdma_errors|tcp_connections|rdma_connections)' <<<"$DK_TS")"

missing=
for k in ${RDMA_KINDS//,/ }; do n_gt "$(tstat "hostile_$k")" 0 || missing+=" $k"; done
[ -z "$missing" ]
res $? "the target acted out every hostile kind (hostile_acts=$(tstat hostile_acts))${missing:+; never:$missing}"
n_gt "$(tstat late_write_rejected)" 0 && n_eq "$(tstat late_write_succeeded)" 0
res $? "every late RDMA Write after a response was refused by the client (late_write_rejected=$(tstat late_write_rejected), late_write_succeeded=$(tstat late_write_succeeded)): no buffer stayed reachable"
grep -E 'late RDMA Write|late_write' "$DK_TLOG" | head -n 2 | indent "target log: "
# A wrong key is refused by the client's NIC (rxe fails the receive: the connection resets)
# or caught by the driver (rkey_mismatches); either way nothing completes with it.
n_gt "$(kv stale_responses "$c1")" 0 && n_gt "$(kv local_invalidations "$c1")" 0 && n_gt "$(kv reconnects "$c1")" 0
res $? "over RDMA the client dropped stale responses ($(kv stale_responses "$c1")), invalidated locally what was left valid ($(kv local_invalidations "$c1")), and reset and reconnected on the rest ($(kv reconnects "$c1"); wrong keys caught by the driver: $(kv rkey_mismatches "$c1"))"
# Over TCP the client reads a connection's frames in order and resets it at the first one that
# breaks the protocol, with that frame's reason; it never reads what came after. The target
# logs each hostile frame with its connection (one at a time here: one queue), so each
# connection that carried one is paired with the client's next TCP reset, whose reason must be
# the one the connection's first such frame calls for. A credit_overflow frame breaks nothing
# (the budget is capped by max_credits) and resets nothing: the frame after it counts. A
# hostile frame the client let through would leave its connection to be reset later, for
# another reason or by a timeout: a mismatch. One exception: a connection the target closed
# with a later frame (truncated) may be reset for the close before the client's receiver has
# read the earlier frame (its sender saw the closed socket first; a CI run had long_length,
# then truncated, reset as "a send failed"). The frames behind a reset are never read, so
# nothing went through; such a connection's reset may give any reason, as truncated's does.
tcp_check=$(TR_MARK=$tcp_mark tr_kmsg_since | python3 -c '
import re, sys
tlog = open(sys.argv[1], errors="replace").read().splitlines()[int(sys.argv[2]):]
expect = {
    "unknown_tag": "response for no request in flight",
    "dup_response": "response for no request in flight",
    "bad_status": "undecodable response",
    "long_length": "response with the wrong amount of data",
    # The target closes the connection after the cut frame. The client has given five reasons
    # for that reset so far (the target closed the connection, receiving failed, receiving
    # read data failed, a send failed, undecodable frame header): the reset is what is checked.
    "truncated": ".+",
    "garbage": "undecodable frame header|unexpected frame",
}
# The target logs every hostile act: its rate limit does not apply to these lines. A peer
# address is one connection, unless the target logged that address attaching again: the client
# may attach from the same port at once (a reserved port just given back). Attach lines may be
# rate-limited away, so they only split the frames of a peer, never start the count.
conns, cur = [], {}
for l in tlog:
    m = re.search(r"tcp: (\d+\.\d+\.\d+\.\d+:\d+) attached to export", l)
    if m and m.group(1) in cur:
        del cur[m.group(1)]
        continue
    m = re.search(r"tcp (\d+\.\d+\.\d+\.\d+:\d+): hostile (\w+) sent", l)
    if not m:
        continue
    peer, kind = m.groups()
    if peer not in cur:
        conns.append([peer, None, False]); cur[peer] = conns[-1]
    if cur[peer][1] is None and kind != "credit_overflow":
        cur[peer][1] = kind
    elif cur[peer][1] is not None and kind == "truncated":
        cur[peer][2] = True
kinds = [(k, closed) for _, k, closed in conns if k]
resets = re.findall(r"d78: queue \d+ \(TCP, set \d+\): (.*); resetting the connection", sys.stdin.read())
bad = [f"{i + 1}: {k} -> {r!r}" for i, ((k, closed), r) in enumerate(zip(kinds, resets))
       if not re.fullmatch(expect["truncated"] if closed else expect[k], r)]
closed_early = sum(1 for (k, closed), r in zip(kinds, resets) if closed and not re.fullmatch(expect[k], r))
verdict = "ok" if kinds and len(kinds) == len(resets) and not bad else "bad"
text = f"{verdict} {len(kinds)} connections with a hostile frame, {len(resets)} TCP resets"
if closed_early:
    text += f"; {closed_early} reset for the later close first"
if bad:
    text += "; mismatched: " + "; ".join(bad[:5])
if kinds:
    text += "; first kinds: " + ",".join(sorted(set(k for k, _ in kinds)))
print(text)
' "$DK_TLOG" "$tlog0")
[[ $tcp_check == "ok "* ]] && n_gt "$(cstat tcp_ios)" 0
res $? "over TCP the client reset each connection at its first hostile frame, for that frame's reason (${tcp_check#* }); reconnects $(kv reconnects "$c1") -> $(cstat reconnects), tcp_ios=$(cstat tcp_ios)"
n_eq "$(cstat io_errors)" 0 && [ "$(on compute "cat /sys/block/$dev/rdmadisk/state")" = live ]
res $? "io_errors=$(cstat io_errors), state live"

dk_unmap "$dev" normal && dk_gone "$dev" 30 && dk_timed rmmod 60 "rmmod rdmadisk" >/dev/null
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
dk_cleanup
