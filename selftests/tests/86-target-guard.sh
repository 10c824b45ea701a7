# The target as a server on a network (the target issue): shared-secret authentication end to
# end through the kernel client, and misbehaving RDMA clients next to a healthy disk.
#
#   A. The export requires a secret (--secret-file): a map without one, or with a wrong one,
#      fails with EACCES and a kernel line saying why; with the right one the disk is live,
#      verified fio passes over RDMA, then over TCP (transport=tcp: every new connection
#      proves the secret again), then over RDMA again; the test client is refused without it.
#   B. Small caps and timeouts (--max-connections 24, --max-connections-per-host 16,
#      --idle-timeout-s 8, --send-timeout-s 4). With a disk mapped and verified fio rounds
#      running, the test client over RDMA, on another export: ignores its credits (the extra Sends find no
#      receive: cut off), grants the target no response credit (closed within the send
#      timeout), sits idle (closed within the idle timeout), floods 40 connections (those over
#      the caps refused Busy). Meanwhile the disk's fio verifies with no error, and the
#      target's peak RSS stays under 128 MiB (printed).
#   C. SIGTERM while a client holds the target up (it grants no response credits; attached and
#      still held when the signal goes): the target still exits, within the shutdown timeout
#      plus a margin, and the client is cut off.
# timeout: 900

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
C=$DK_CLIENT
tr_dmesg_mark
SECRET=00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef
WRONG=ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100
KEY=$DK_BACKDIR/$DK_ID.key
back=$(dk_backing vol0 16M)
on storage "umask 077; echo $SECRET >$KEY" >/dev/null

# A. Authentication.
dk_target_start --export "vol0=$back" --secret-file "vol0=$KEY" >/dev/null && dk_load
res $? "[auth] target with a secret for vol0; insmod"
for bad in "" "secret=$WRONG"; do
  out=$(dk_map "name=d86 addr=$DK_S export=vol0${bad:+ $bad}" 60)
  rc=$(sed -n 's/^rc=\([0-9]*\) .*/\1/p' <<<"$out" | head -n1)
  printf '%s\n' "$out" | grep -E 'secret|refused|EACCES|rc=' | head -n 4 | indent
  [ "$rc" != 0 ] && grep -qiE 'requires a key|refused our key' <<<"$out"
  res $? "[auth] map ${bad:+with a wrong secret}${bad:-without a secret}: refused (rc=$rc), the kernel says why"
done
dk_map_disk d86 vol0 "secret=$SECRET queues=2"
if res $? "[auth] map with the secret: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  dk_fio a1 "--name=a1 --filename=/dev/$dev --rw=randwrite --bs=4k --size=2M --iodepth=8 --verify=crc32c --do_verify=1"
  res $? "[auth] verified fio over RDMA: $FIO_SUM"
  tr_set "$dev" transport=tcp >/dev/null && tr_wait tcp "$dev" 60 tcp >/dev/null
  res $? "[auth] transport=tcp: the TCP connections authenticate too ($TR_WAIT)"
  dk_fio a2 "--name=a2 --filename=/dev/$dev --rw=randwrite --bs=4k --size=2M --offset=4M --iodepth=8 --verify=crc32c --do_verify=1"
  res $? "[auth] verified fio over TCP: $FIO_SUM"
  tr_set "$dev" transport=auto >/dev/null && tr_wait rdma "$dev" 60 rdma >/dev/null
  res $? "[auth] transport=auto: back on RDMA, its probes and connections authenticated ($TR_WAIT)"
  out=$(on compute "timeout 60 $C --transport rdma --target $DK_S:$DK_PORT --export vol0 --count 10 --queue-depth 1" 2>&1)
  grep -q 'requires a secret' <<<"$out"
  res $? "[auth] the test client without the secret is refused: $(grep -m1 -E 'cannot attach|RESULT' <<<"$out")"
  dk_tsnap
  n_gt "$(tstat auth_failures)" 0
  res $? "[auth] the target counted the failures (auth_failures=$(tstat auth_failures))"
  dk_unmap_rmmod 30 "$dev"
  res $? "[auth] unmap; rmmod"
fi

# B. Misbehaving clients next to a healthy disk.
# The misbehaving clients use an export of their own: from the disk's host, on the disk's
# export, a client session of theirs would move the fence past the disk's (one client per
# host and export, docs/design.md), which is the fencing rule working, not a misbehaviour.
back1=$(dk_backing vol1 16M)
dk_target_start --export "vol0=$back" --export "vol1=$back1" --max-connections 24 --max-connections-per-host 16 \
  --idle-timeout-s 8 --send-timeout-s 4 --shutdown-timeout-s 5 --credits 8 >/dev/null &&
  dk_load && dk_map_disk d86b vol0 queues=2
if res $? "[guard] target with caps and timeouts; map: /dev/${DK_DEV:-?} is live"; then
  dev=$DK_DEV
  tr_set "$dev" keepalive_ms=2000 >/dev/null
  tr_rounds_start g "$(tr_fio_args g86)"
  hostile() { # hostile MODE ARGS...: runs the test client's misbehaviour; prints its result line
    on compute "timeout 120 $C --transport rdma --target $DK_S:$DK_PORT --export vol1 --timeout-secs 30 --hostile $*" 2>&1 | grep -E '^(ok|not ok) - |^flood' | sed 's/^ok - //; s/^not ok - /FAILED: /'
    return "${PIPESTATUS[0]}"
  }
  out=$(hostile ignore-credits --count 200 --queue-depth 4)
  res $? "[guard] a client ignoring its credits is cut off: $out"
  out=$(hostile no-credits --recv-credits 0 --queue-depth 1)
  res $? "[guard] a client granting no response credit is closed (send timeout 4 s): $out"
  out=$(hostile idle --queue-depth 1)
  res $? "[guard] an idle client is closed (idle timeout 8 s): $out"
  out=$(hostile flood --count 40 --queue-depth 1 --max-size 4096 --hold-secs 3)
  res $? "[guard] a flood of 40 connections: $out"
  dk_tsnap
  rss=$(on storage "read -r p <$DK_TPID; sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' /proc/\$p/status")
  n_le "${rss:-999999}" $((128 * 1024)) && n_gt "$(tstat connections_over_cap)" 0
  res $? "[guard] target peak RSS ${rss:-?} KiB (limit 131072); connections_over_cap=$(tstat connections_over_cap) send_timeouts=$(tstat send_timeouts) idle_closes=$(tstat idle_closes)"
  tr_rounds_stop g 300
  res $? "[guard] the disk's verified fio went on through it all: $FIO_SUM"
  ie=$(tr_stat "$dev" io_errors)
  n_eq "$ie" 0
  res $? "[guard] io_errors=$ie"
  dk_check_image "$dev" "$back"
  res $? "[guard] the whole disk read through the driver is the backing file: $DK_BACKING"
  dk_unmap_rmmod 30 "$dev"
  res $? "[guard] unmap; rmmod"
fi

# C. SIGTERM with a client holding the target up. A target of its own, with the send timeout
# at its default (30 s), so that nothing but the shutdown can end the hold; the signal goes
# only once the holder is attached (the target logged it) and still held (no result of its
# own yet), and the holder must then be cut off by the shutdown.
H=$TB_DIR/$DK_ID.holder.log
dk_target_start --export "vol0=$back" --shutdown-timeout-s 5 >/dev/null
n0=$(grep -c ' attached to export ' "$DK_TLOG" 2>/dev/null)
on compute "rm -f $H; setsid timeout 120 $C --transport rdma --target $DK_S:$DK_PORT --export vol0 --timeout-secs 60 --hostile no-credits --recv-credits 0 --queue-depth 1 >$H 2>&1 </dev/null &" >/dev/null
attached=
for _ in $(seq 120); do
  n=$(grep -c ' attached to export ' "$DK_TLOG" 2>/dev/null)
  is_num "$n" && is_num "$n0" && [ "$n" -gt "$n0" ] && { attached=1; break; }
  grep -qE '^(ok|not ok) - ' "$H" 2>/dev/null && break
  sleep 0.5
done
# Its NOP is posted right after the attach; give it a moment to wait for a credit.
sleep 2
held=$(grep -cE '^(ok|not ok) - ' "$H" 2>/dev/null)
out=$(on storage "$DK_VM_DEFS
read -r p <$DK_TPID; now_us; t0=\$us; kill -TERM \$p
for ((i = 0; i < 300; i++)); do kill -0 \$p 2>/dev/null || break; pause 0.1; done
kill -0 \$p 2>/dev/null && echo still-running; now_us; echo secs=\$(( (us - t0) / 1000000 ))")
secs=$(sed -n 's/^secs=//p' <<<"$out")
for _ in $(seq 60); do grep -qE '^(ok|not ok) - ' "$H" 2>/dev/null && break; sleep 0.5; done
holder=$(grep -m1 -E '^(ok|not ok) - ' "$H" 2>/dev/null)
[ -n "$attached" ] && [ "$held" = 0 ] && ! grep -q still-running <<<"$out" && is_num "$secs" && (( secs <= 15 )) &&
  grep -q '^ok - hostile no-credits: ' <<<"$holder"
res $? "[shutdown] SIGTERM while a client granting no credits held a connection (attached: ${attached:-no}, still held: $([ "$held" = 0 ] && echo yes || echo no)): the target exited in ${secs:-?} s (shutdown timeout 5 s + margin); the holder: ${holder:-no result}"
grep -E 'exports synced|exiting without' "$DK_TLOG" | tail -n 1 | indent "target: "
tr_splat_check
dk_cleanup
