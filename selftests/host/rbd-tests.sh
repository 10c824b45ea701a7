#!/usr/bin/env bash
# RBD exports on the host, no VM: a real Ceph cluster (selftests/ceph/cluster.sh: one monitor,
# one OSD, cephx) in a network namespace of its own, rdmadisk-target serving an RBD image over
# TCP on that namespace's loopback, and rdmadisk-testclient's verified workload against it.
#   1. the verified workload (reads, writes, flushes, FUA, discards, write-zeroes, sizes from
#      4 KiB to 1 MiB), and --check-config reaching the cluster;
#   2. the target SIGKILLed and started again: the image's data is what it was, and the new
#      target takes the dead one's lock once Ceph sees it gone;
#   3. a second target on the same image is refused while the first holds its lock; a
#      read-only one may share the image;
#   4. takeover: the owner frozen (SIGSTOP) with a client's writes queued, a new target breaks
#      its lock (break_lock) and serves; the old one, thawed, has its late writes refused
#      (Ceph blocklisted it) and the image does not change;
#   5. the OSD frozen under load: the requests stall, then complete, and every read verifies;
#   6. online resize: `rbd resize` under a running client reaches it in the responses, and the
#      new space serves verified I/O; a shrink is logged and reported at the next attach;
#   7. gateways: two targets with `gateway` serve one image; a read-write attach of a newer
#      epoch takes the lock over (Ceph blocklists the other), whose later writes are refused
#      and not applied; attaching back, the blocklisted one connects afresh and serves
#      verified I/O; a gateway frozen with writes queued has them refused once thawed; and
#      `gateway` on a file export is refused.
# TAP output, then "N passed, N failed". Needs root (network namespaces) and Ceph's packages.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${CARGO_TARGET_DIR:-$HOME/.cache/rdmadisk/cargo-target}/release
T=$BIN/rdmadisk-target C=$BIN/rdmadisk-testclient
OUT=$REPO/selftests/out/rbd
CL=$OUT/ceph
n=0 pass=0 fail=0 t0=$SECONDS
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $1 ($((SECONDS - t0)) s)"; }
nok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $1 ($((SECONDS - t0)) s)"; shift; for f; do [ -f "$f" ] && tail -n 15 "$f" | sed 's/^/#   /'; done; }
finish() {
  for p in $(cat "$OUT"/*.tpid 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  "$REPO/selftests/ceph/cluster.sh" stop "$CL" >/dev/null 2>&1
  echo "1..$n"
  echo "$pass passed, $fail failed"
}
trap finish EXIT
echo "TAP version 13"
[ -x "$T" ] && [ -x "$C" ] || { nok "rdmadisk-target and rdmadisk-testclient are built (make userspace)"; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"
echo "# starting a Ceph cluster (one monitor, one OSD on memstore) in its own network namespace"
env=$(CEPH_NETNS=rdmadisk-rbd-$$ "$REPO/selftests/ceph/cluster.sh" start "$CL" 2>"$OUT/cluster.err") ||
  { nok "a Ceph cluster starts" "$OUT/cluster.err"; exit 1; }
eval "$env"
ok "a Ceph cluster starts (monitor, OSD, pool $CEPH_POOL, cephx key for $CEPH_CLIENT)"
ns() { ip netns exec "$CEPH_NETNS" "$@"; }
# Its daemons' sockets: TCP listeners and UDP, none but on the loopback.
socks=$(ns ss -ltunpH | grep ceph-)
if [ -n "$socks" ] && ! awk '{ print $5 }' <<<"$socks" | grep -qv '^127\.0\.0\.1:'; then
  ok "Ceph's daemons listen on 127.0.0.1 only ($(wc -l <<<"$socks") sockets)"
else nok "Ceph's daemons listen on 127.0.0.1 only: $(awk '{ print $5 }' <<<"$socks" | tr '\n' ' ')"; fi
rbd_() { ns timeout 120 rbd -c "$CEPH_CONF" "$@"; }
IMG=disk
rbd_ create --size 64M --image-feature layering,exclusive-lock "$CEPH_POOL/$IMG" &&
  rbd_ create --size 16M --image-feature layering "$CEPH_POOL/nolock" ||
  { nok "rbd create"; exit 1; }
# The image's contents, as another client reads them (reads need no lock).
digest() { rbd_ export "$CEPH_POOL/$IMG" - 2>/dev/null | sha256sum | cut -c1-16; }

# tstart NAME PORT ARGS...: a target in the namespace, TCP only; its pid in $OUT/NAME.tpid.
tstart() {
  local name=$1 port=$2; shift 2
  # Not through ns(): $! must be the target itself (ip netns exec execs it), for the signals.
  ip netns exec "$CEPH_NETNS" "$T" --listen 127.0.0.1 --tcp-port "$port" --no-rdma --allow 127.0.0.1 \
    --ceph-conf "$CEPH_CONF" --ceph-client "$CEPH_CLIENT" --ceph-keyring "$CEPH_KEYRING" \
    "$@" >"$OUT/$name.log" 2>&1 &
  echo $! >"$OUT/$name.tpid"
}
# tready NAME: waits (up to 120 s) until target NAME listens; fails if it exited.
tready() {
  local p i; p=$(cat "$OUT/$1.tpid")
  for ((i = 0; i < 240; i++)); do
    grep -q "listening" "$OUT/$1.log" && return 0
    kill -0 "$p" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
# (Over the first 32 MiB, the client's default --span-mib.)
client() { ns "$C" --transport tcp --export "$IMG" "$@"; }

echo "# 1: the verified workload over TCP"
if ns "$T" --check-config --no-rdma --allow 127.0.0.1 --ceph-conf "$CEPH_CONF" \
  --ceph-client "$CEPH_CLIENT" --ceph-keyring "$CEPH_KEYRING" \
  --export "$IMG=rbd:$CEPH_POOL/$IMG" >"$OUT/check.log" 2>&1 &&
  grep -q "RBD image $CEPH_POOL/$IMG" "$OUT/check.log"; then
  ok "--check-config reaches the cluster and opens the image"
else nok "--check-config reaches the cluster and opens the image" "$OUT/check.log"; fi
if ! ns "$T" --check-config --no-rdma --allow 127.0.0.1 --ceph-conf "$CEPH_CONF" \
  --ceph-client "$CEPH_CLIENT" --ceph-keyring "$CEPH_KEYRING" \
  --export "x=rbd:$CEPH_POOL/nolock" >"$OUT/check-nolock.log" 2>&1 &&
  grep -q "exclusive-lock" "$OUT/check-nolock.log"; then
  ok "an image without the exclusive-lock feature is refused read-write, with the fix named"
else nok "an image without the exclusive-lock feature is refused read-write" "$OUT/check-nolock.log"; fi
tstart a 7801 --export "$IMG=rbd:$CEPH_POOL/$IMG" --insecure "$IMG"
if tready a && grep -q "RBD image $CEPH_POOL/$IMG as client.rdmadisk, exclusive lock held" "$OUT/a.log"; then
  ok "the target serves the image read-write, holding its exclusive lock"
else nok "the target serves the image" "$OUT/a.log"; exit 1; fi
if client --target 127.0.0.1:7801 --count 1500 --queue-depth 8 --seed 11 --negative >"$OUT/w1.log" 2>&1; then
  ok "verified workload, with the negative checks: $(grep RESULT "$OUT/w1.log" | tail -n1)"
else nok "verified workload over TCP on an RBD export" "$OUT/w1.log" "$OUT/a.log"; fi

echo "# bad input: each refused at start and by --check-config, with a clear error, no crash"
# bad DESCRIPTION EXPECT ARGS...: the target started with ARGS exits 1 (not a signal) saying
# EXPECT, and --check-config with ARGS exits 1 saying it too.
bad() {
  local desc=$1 want=$2 rc1 rc2; shift 2
  ns timeout 120 "$T" --listen 127.0.0.1 --tcp-port 7809 --no-rdma --allow 127.0.0.1 "$@" >"$OUT/bad.log" 2>&1
  rc1=$?
  ns timeout 120 "$T" --check-config --no-rdma --allow 127.0.0.1 "$@" >"$OUT/bad-check.log" 2>&1
  rc2=$?
  if [ $rc1 = 1 ] && [ $rc2 = 1 ] && grep -q "$want" "$OUT/bad.log" && grep -q "$want" "$OUT/bad-check.log"; then
    ok "$desc: $(grep -m1 "$want" "$OUT/bad.log" | cut -c1-150)"
  else nok "$desc (start: exit $rc1, --check-config: exit $rc2, want \"$want\")" "$OUT/bad.log" "$OUT/bad-check.log"; fi
}
cargs=(--ceph-conf "$CEPH_CONF" --ceph-client "$CEPH_CLIENT" --ceph-keyring "$CEPH_KEYRING")
bad "a missing pool" "cannot open pool nopool: No such file or directory" "${cargs[@]}" --export "x=rbd:nopool/$IMG"
bad "a missing image" "cannot open image none: No such file or directory" "${cargs[@]}" --export "x=rbd:$CEPH_POOL/none"
sed 's/key = .*/key = AQBbc1ZhAAAAABAAn2xV3Zk0oZ2uj6QwN7ZUjQ==/' "$CEPH_KEYRING" >"$OUT/wrong.keyring"
bad "a wrong keyring" "cannot connect to the cluster as client.rdmadisk" --ceph-conf "$CEPH_CONF" \
  --ceph-client "$CEPH_CLIENT" --ceph-keyring "$OUT/wrong.keyring" --export "x=rbd:$CEPH_POOL/$IMG"
rbd_ create --size 16M --image-feature layering,exclusive-lock "$CEPH_POOL/cachey" &&
  rbd_ config image set "$CEPH_POOL/cachey" rbd_cache true
bad "an image whose own configuration turns librbd's cache on" "has rbd_cache = true" "${cargs[@]}" --export "x=rbd:$CEPH_POOL/cachey"
# Monitors that do not answer: nothing listens on port 1 (the conf may shorten the target's 30 s).
sed 's/^mon host = .*/mon host = 127.0.0.1:1/' "$CEPH_CONF" >"$OUT/nomon.conf"
printf '[client]\nclient mount timeout = 5\n' >>"$OUT/nomon.conf"
bad "monitors that cannot be reached" "cannot connect to the cluster as client.rdmadisk" --ceph-conf "$OUT/nomon.conf" \
  --ceph-client "$CEPH_CLIENT" --ceph-keyring "$CEPH_KEYRING" --export "x=rbd:$CEPH_POOL/$IMG"

echo "# 2: SIGKILL and restart"
before=$(digest)
kill -9 "$(cat "$OUT/a.tpid")"; wait "$(cat "$OUT/a.tpid")" 2>/dev/null
s=$SECONDS
tstart a2 7801 --export "$IMG=rbd:$CEPH_POOL/$IMG" --insecure "$IMG" --lock-wait-s 90
if tready a2; then
  ok "a target started after the SIGKILL takes the dead owner's lock ($((SECONDS - s)) s)"
else nok "a target started after the SIGKILL takes the lock" "$OUT/a2.log"; fi
after=$(digest)
if [ -n "$before" ] && [ "$before" = "$after" ]; then
  ok "the image is unchanged by the crash and the restart (sha256 $after)"
else nok "the image is unchanged by the crash and the restart ($before -> $after)"; fi
if client --target 127.0.0.1:7801 --count 400 --queue-depth 8 --seed 12 >"$OUT/w2.log" 2>&1; then
  ok "the restarted target serves the verified workload"
else nok "the restarted target serves the verified workload" "$OUT/w2.log" "$OUT/a2.log"; fi

echo "# 3: one writer per image"
tstart b 7802 --export "$IMG=rbd:$CEPH_POOL/$IMG" --insecure "$IMG" --lock-wait-s 0
bp=$(cat "$OUT/b.tpid")
for ((i = 0; i < 240; i++)); do kill -0 "$bp" 2>/dev/null || break; sleep 0.5; done
if ! kill -0 "$bp" 2>/dev/null && ! wait "$bp" && grep -q "another client serves this image" "$OUT/b.log"; then
  ok "a second read-write target is refused while the first holds the lock"
else kill -9 "$bp" 2>/dev/null; nok "a second read-write target is refused" "$OUT/b.log"; fi
tstart ro 7803 --export-ro "$IMG=rbd:$CEPH_POOL/$IMG" --insecure "$IMG"
if tready ro && client --target 127.0.0.1:7803 --count 200 --read-pct 100 --flush-every 0 \
  --discard-every 0 --write-zeroes-every 0 --fua-every 0 >"$OUT/ro.log" 2>&1; then
  ok "a read-only target shares the image and serves reads"
else nok "a read-only target shares the image" "$OUT/ro.log" "$OUT/ro.log"; fi
kill "$(cat "$OUT/ro.tpid")" 2>/dev/null

echo "# 4: takeover from a frozen owner"
ap=$(cat "$OUT/a2.tpid")
# A client whose writes go on until the owner freezes, and queue there.
client --target 127.0.0.1:7801 --count 100000 --queue-depth 4 --read-pct 0 --seed 13 --timeout-secs 600 \
  >"$OUT/late.log" 2>&1 &
lp=$!
sleep 3
kill -STOP "$ap"
sleep 1
s=$SECONDS
tstart c 7804 --export "$IMG=rbd:$CEPH_POOL/$IMG" --insecure "$IMG" --break-lock "$IMG" --lock-wait-s 0 \
  --stats-file "$OUT/c.stats"
if tready c && grep -q "breaking" "$OUT/c.log"; then
  ok "a new target breaks the frozen owner's lock and serves ($((SECONDS - s)) s)"
else nok "a new target breaks the frozen owner's lock" "$OUT/c.log"; fi
if ns timeout 60 ceph -c "$CEPH_CONF" osd blocklist ls 2>/dev/null | grep -q .; then
  ok "Ceph blocklisted the old owner"
else nok "Ceph blocklisted the old owner"; fi
client --target 127.0.0.1:7804 --count 300 --queue-depth 8 --seed 14 >"$OUT/w3.log" 2>&1 ||
  nok "the new owner serves the verified workload" "$OUT/w3.log" "$OUT/c.log"
taken=$(digest)
kill -CONT "$ap"
# The thawed owner reads the queued writes and tries them: every one must be refused.
for ((i = 0; i < 60; i++)); do kill -0 "$lp" 2>/dev/null || break; sleep 1; done
kill -9 "$lp" 2>/dev/null
late=$(grep -cE "failed|no longer holds" "$OUT/a2.log")
now=$(digest)
if [ "$late" -gt 0 ] && [ -n "$taken" ] && [ "$taken" = "$now" ]; then
  ok "the thawed owner's late writes are refused ($late refused in its log) and the image is unchanged"
else nok "the thawed owner's late writes are refused (failed: $late; image $taken -> $now)" "$OUT/a2.log" "$OUT/late.log"; fi
echo "# 5: the OSD frozen under load: requests stall, then complete, with the data verified"
served() { sed -n 's/^served=//p' "$OUT/c.stats" 2>/dev/null; }
# librbd may let the lock go while it recovers its watch after the stall, and the target then
# refuses writes (Fenced: not applied) until a client's next Hello has it take the lock back,
# as the kernel client's reconnect does: after the run, a new client's writes must verify.
client --target 127.0.0.1:7804 --count 20000 --queue-depth 8 --seed 15 --timeout-secs 120 --fenced-ok \
  >"$OUT/osd.log" 2>&1 &
cp=$!
sleep 1
op=$(cat "$CL/run/osd.0.pid")
kill -STOP "$op"
# The target rewrites its stats file every second: what it answered 2 s into the freeze and at
# its end must be the same (nothing completes), and more after the thaw.
sleep 2; a=$(served)
sleep 6; b=$(served)
kill -CONT "$op"
wait "$cp"; rc=$?
c=$(served)
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "${c:-0}" -gt "$b" ] && [ $rc = 0 ] &&
  grep -q "RESULT: [0-9]* passed, 0 failed" "$OUT/osd.log"; then
  ok "the OSD frozen 8 s under load: nothing answered meanwhile (served $a, then $b), then the workload finished verified: $(grep RESULT "$OUT/osd.log")"
else nok "a frozen OSD stalls the workload, which then finishes verified (served $a, $b, then $c; exit $rc)" "$OUT/osd.log" "$OUT/c.log"; fi
if client --target 127.0.0.1:7804 --count 300 --queue-depth 8 --seed 16 >"$OUT/osd2.log" 2>&1; then
  ok "after the stall a new session writes and verifies: $(grep RESULT "$OUT/osd2.log") ($(grep -o 'fenced=[0-9]*' "$OUT/osd.log") in the stalled run)"
else nok "after the stall a new session writes and verifies" "$OUT/osd2.log" "$OUT/c.log"; fi

echo "# 6: online resize"
# A client attached at 64 MiB; the image grows to 128 MiB under its workload.
attaches() { grep -c "attached to export" "$OUT/c.log"; }
n0=$(attaches)
client --target 127.0.0.1:7804 --count 40000 --max-size 65536 --queue-depth 4 --seed 16 >"$OUT/grow.log" 2>&1 &
gp=$!
for ((i = 0; i < 100; i++)); do [ "$(attaches)" -gt "$n0" ] && break; sleep 0.1; done
rbd_ resize --size 128M "$CEPH_POOL/$IMG" >"$OUT/resize.log" 2>&1
rs=$?
wait "$gp"; rc=$?
caps=$(grep "^capacity:" "$OUT/grow.log")
if [ $rs = 0 ] && [ $rc = 0 ] && grep -q "attached=131072 .*last_response=262144" <<<"$caps" &&
  grep -q "resized from 67108864 to 134217728 bytes" "$OUT/c.log"; then
  ok "rbd resize 64 -> 128 MiB under a running client: its responses report it ($caps)"
else nok "rbd resize reaches a running client (resize exit $rs, client exit $rc: $caps)" "$OUT/resize.log" "$OUT/grow.log" "$OUT/c.log"; fi
if client --target 127.0.0.1:7804 --span-mib 128 --count 600 --queue-depth 8 --seed 17 >"$OUT/grown.log" 2>&1 &&
  grep -q "attached=262144" "$OUT/grown.log"; then
  ok "a new attach gets 128 MiB, and I/O across all of it verifies: $(grep RESULT "$OUT/grown.log")"
else nok "the grown image serves I/O across its new space" "$OUT/grown.log" "$OUT/c.log"; fi
rbd_ resize --size 96M --allow-shrink "$CEPH_POOL/$IMG" >"$OUT/shrink.log" 2>&1
for ((i = 0; i < 20; i++)); do grep -q "resized from 134217728 to 100663296" "$OUT/c.log" && break; sleep 0.5; done
if grep -q "resized from 134217728 to 100663296 bytes; mapped disks keep their size" "$OUT/c.log" &&
  client --target 127.0.0.1:7804 --span-mib 96 --count 100 --seed 18 >"$OUT/shrunk.log" 2>&1 &&
  grep -q "attached=196608" "$OUT/shrunk.log"; then
  ok "a shrink (rbd resize --allow-shrink 96 MiB) is logged, and the next attach gets 96 MiB"
else nok "a shrink is logged and reported at the next attach" "$OUT/shrink.log" "$OUT/shrunk.log" "$OUT/c.log"; fi

echo "# 7: gateways: two targets serve one image, and a read-write attach takes its lock over"
GW=gw
rbd_ create --size 64M --image-feature layering,exclusive-lock "$CEPH_POOL/$GW" || nok "rbd create $GW"
gdigest() { rbd_ export "$CEPH_POOL/$GW" - 2>/dev/null | sha256sum | cut -c1-16; }
gclient() { ns "$C" --transport tcp --export "$GW" --session-id 7 "$@"; }
# Reads only: an attach that takes the lock over and writes nothing.
greads() { gclient --read-pct 100 --flush-every 0 --discard-every 0 --write-zeroes-every 0 --fua-every 0 "$@"; }
gstart() { tstart "$1" "$2" --export "$GW=rbd:$CEPH_POOL/$GW" --insecure "$GW" --gateway "$GW" --stats-file "$OUT/$1.stats"; }
# gstat NAME COUNTER: the counter as target NAME's stats file has it (rewritten every second).
gstat() { sleep 1.2; sed -n "s/^$2=//p" "$OUT/$1.stats" 2>/dev/null; }
# took NAME: how long target NAME's last takeover took, in ms.
took() { sed -n 's/.*after a takeover of \([0-9]*\) ms.*/\1/p' "$OUT/$1.log" | tail -n1; }
# A configuration refused at load: exit 2 at start (as any bad configuration), 1 from --check-config.
ns "$T" --listen 127.0.0.1 --tcp-port 7809 --no-rdma --allow 127.0.0.1 --export "f=$OUT/f.img" --gateway f >"$OUT/bad.log" 2>&1
rc1=$?
ns "$T" --check-config --no-rdma --allow 127.0.0.1 --export "f=$OUT/f.img" --gateway f >"$OUT/bad-check.log" 2>&1
rc2=$?
if [ $rc1 = 2 ] && [ $rc2 = 1 ] && grep -q "two gateways cannot share a local file" "$OUT/bad.log" &&
  grep -q "two gateways cannot share a local file" "$OUT/bad-check.log"; then
  ok "gateway on a file export is refused: $(grep -m1 "two gateways" "$OUT/bad.log" | cut -c1-150)"
else nok "gateway on a file export is refused (start: exit $rc1, --check-config: exit $rc2)" "$OUT/bad.log" "$OUT/bad-check.log"; fi
if ns "$T" --check-config --no-rdma --allow 127.0.0.1 "${cargs[@]}" --export "$GW=rbd:$CEPH_POOL/$GW" \
  --gateway "$GW" >"$OUT/check-gw.log" 2>&1 &&
  grep -q "gateway: takes the lock over when a client attaches" "$OUT/check-gw.log"; then
  ok "--check-config says what a gateway does"
else nok "--check-config says what a gateway does" "$OUT/check-gw.log"; fi
gstart ga 7811
gstart gb 7812
if tready ga && tready gb && grep -q "standby: it takes the exclusive lock over" "$OUT/ga.log" &&
  grep -q "standby: it takes the exclusive lock over" "$OUT/gb.log"; then
  ok "two gateways serve one image, neither taking its lock at start"
else nok "two gateways start on one image" "$OUT/ga.log" "$OUT/gb.log"; fi
if gclient --target 127.0.0.1:7811 --epoch 1 --count 300 --queue-depth 8 --seed 21 >"$OUT/g1.log" 2>&1 &&
  [ "$(gstat ga gateway_takeovers)" = 1 ]; then
  ok "a read-write attach to gateway A takes the lock ($(took ga) ms) and serves verified I/O"
else nok "a read-write attach to gateway A takes the lock" "$OUT/g1.log" "$OUT/ga.log"; fi
# A writer on A that goes on while B takes the image over.
gclient --target 127.0.0.1:7811 --epoch 1 --count 100000 --read-pct 0 --queue-depth 4 --seed 22 \
  --timeout-secs 120 >"$OUT/glate.log" 2>&1 &
lp=$!
sleep 2
if greads --target 127.0.0.1:7812 --epoch 2 --count 50 >"$OUT/g2.log" 2>&1 &&
  grep -q "taking the exclusive lock over from 127\.0\.0\.1:[0-9]*/[0-9]* (gateway)" "$OUT/gb.log" &&
  [ "$(gstat gb gateway_takeovers)" = 1 ]; then
  ok "the attach of a newer epoch to gateway B takes the lock over from A in $(took gb) ms"
else nok "gateway B takes the lock over from A" "$OUT/g2.log" "$OUT/gb.log"; fi
taken=$(gdigest)
sleep 3
kill "$lp" 2>/dev/null; wait "$lp" 2>/dev/null
now=$(gdigest)
refused=$(gstat ga writes_refused_unlocked)
if [ "${refused:-0}" -gt 0 ] && [ -n "$taken" ] && [ "$taken" = "$now" ]; then
  ok "A's writes after the takeover are refused ($refused) and not applied (image $now)"
else nok "A's writes after the takeover are refused (refused: $refused; image $taken -> $now)" "$OUT/ga.log" "$OUT/glate.log"; fi
if gclient --target 127.0.0.1:7811 --epoch 3 --count 400 --queue-depth 8 --seed 23 >"$OUT/g3.log" 2>&1 &&
  grep -q "connected afresh" "$OUT/ga.log" && [ "$(gstat ga gateway_takeovers)" = 2 ]; then
  ok "attached back, A connects afresh, takes the lock over from B ($(took ga) ms) and serves verified I/O: $(grep RESULT "$OUT/g3.log")"
else nok "attached back, A connects afresh and serves" "$OUT/g3.log" "$OUT/ga.log"; fi
# A frozen while it holds the lock, with writes queued: B takes the image over meanwhile.
gap=$(cat "$OUT/ga.tpid")
before=$(gstat ga writes_refused_unlocked)
gclient --target 127.0.0.1:7811 --epoch 3 --count 100000 --read-pct 0 --queue-depth 4 --seed 24 \
  --timeout-secs 600 >"$OUT/gfrozen.log" 2>&1 &
lp=$!
sleep 2
kill -STOP "$gap"
sleep 1
if greads --target 127.0.0.1:7812 --epoch 4 --count 50 >"$OUT/g4.log" 2>&1 &&
  [ "$(gstat gb gateway_takeovers)" = 2 ]; then
  ok "with A frozen, B connects afresh and takes the lock over in $(took gb) ms"
else nok "with A frozen, B takes the lock over" "$OUT/g4.log" "$OUT/gb.log"; fi
taken=$(gdigest)
kill -CONT "$gap"
for ((i = 0; i < 30; i++)); do kill -0 "$lp" 2>/dev/null || break; sleep 1; done
kill "$lp" 2>/dev/null; wait "$lp" 2>/dev/null
now=$(gdigest)
after=$(gstat ga writes_refused_unlocked)
if [ "${after:-0}" -gt "${before:-0}" ] && [ -n "$taken" ] && [ "$taken" = "$now" ]; then
  ok "the thawed gateway's late writes are refused ($((after - before))) and the image is unchanged"
else nok "the thawed gateway's late writes are refused (refused $before -> $after; image $taken -> $now)" "$OUT/ga.log" "$OUT/gfrozen.log"; fi
if gclient --target 127.0.0.1:7812 --epoch 5 --count 300 --queue-depth 8 --seed 25 >"$OUT/g5.log" 2>&1; then
  ok "B serves verified I/O after the takeover"
else nok "B serves verified I/O after the takeover" "$OUT/g5.log" "$OUT/gb.log"; fi
exit $((fail > 0))
