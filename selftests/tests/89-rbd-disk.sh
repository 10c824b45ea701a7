# An RDMA disk (/dev/rdmadiskN) on a Ceph RBD export. The storage VM runs a throwaway Ceph
# cluster on its own loopback (selftests/ceph/cluster.sh: one monitor, one bluestore OSD on a
# sparse file, cephx), and the target serves an RBD image of it. On the compute VM: fio writes
# and verifies the disk; the target restarts (SIGTERM, start again: it takes the image's lock
# again) under fio verify; the OSD restarts under fio verify (the disk's I/O stalls until the
# monitor has the OSD up again, then resumes; the test prints the longest stretch without a
# completion); the compute VM's RDMA device is deleted and added back under fio verify (the
# disk goes on over TCP and comes back); `rbd resize` under fio verify (the disk grows, with
# no reconnect, and its new space verifies); then ext4 with a checksum manifest, read back
# after an unmap and a fresh map. No step until then may see an I/O error. Last, Ceph goes
# away (the OSD frozen): a read fails by the loss-timeout rules, with an error and no data,
# and the disk serves again once the OSD is back. Then two gateways of the image serve one
# disk (below).

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
# shellcheck source-path=SCRIPTDIR source=lib/gateways.sh
source "$TB_REPO/selftests/tests/lib/gateways.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
MNT=/mnt/rdmadisk89
SUMS=$TB_DIR/$DK_ID.sha256
DK_MOUNTS=$MNT
CL=/tmp/rdmadisk-ceph89

cleanup89() {
  dk_cleanup
  on storage "$TB_REPO/selftests/ceph/cluster.sh stop $CL" >/dev/null 2>&1
}

s0=$SECONDS
env=$(on storage "CEPH_NETNS=none CEPH_STORE=bluestore $TB_REPO/selftests/ceph/cluster.sh start $CL 2>$CL.err || { cat $CL.err; exit 1; }
grep '^# ' $CL.err
rbd -c $CL/ceph.conf create --size 64M --image-feature layering,exclusive-lock rbd/vol89 && echo IMAGE=ok")
rc=$?
printf '%s\n' "$env" | grep -v '^CEPH_' | indent
grep -q IMAGE=ok <<<"$env"
if ! res $? "a Ceph cluster on the storage VM's loopback ($((SECONDS - s0)) s) and a 64 MiB image rbd/vol89"; then
  cleanup89; return 0 2>/dev/null || exit 0
fi
socks=$(on storage "ss -ltunpH | grep ceph- | awk '{ print \$5 }'")
[ -n "$socks" ] && ! grep -qv '^127\.0\.0\.1:' <<<"$socks"
res $? "Ceph's daemons listen on the storage VM's loopback only ($(grep -c . <<<"$socks") sockets)"
CEPH_ARGS="--ceph-conf $(kv CEPH_CONF "$env") --ceph-client $(kv CEPH_CLIENT "$env") --ceph-keyring $(kv CEPH_KEYRING "$env")"
TARGS="--export vol89=rbd:rbd/vol89 $CEPH_ARGS"

# shellcheck disable=SC2086 # TARGS: words
dk_target_start $TARGS >/dev/null && dk_load && dk_map_disk d89 vol89
if ! res $? "target serving rbd:rbd/vol89; map name=d89: /dev/${DK_DEV:-?} is live"; then
  on storage "cat $DK_TLOG" | tail -n 5 | indent
  cleanup89; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
echo "  transport: $(tr_get "$dev" active_transport)"

# 4-64 KiB, not all 4 KiB: a bluestore OSD under TCG takes about 30 ms a 4 KiB write.
dk_fio w "--name=w --filename=/dev/$dev --ioengine=libaio --direct=1 --size=8M --bsrange=4k-64k --iodepth=8 --verify=crc32c --rw=randwrite --do_verify=1 --verify_fatal=1"
res $? "fio: 8 MiB of random 4-64 KiB writes, then read back and verified ($FIO_SUM)"

# Under verifying fio rounds: the target restarts. The old one releases the image's lock at
# its clean exit; the new one takes it, and the disk reconnects. The restart comes once I/O
# flows, and the rounds stop once I/O has completed on the new target.
base=$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2 }')
tr_rounds_start r1 "$(tr_fio_args r1)"
tr_wait r1 "$dev" 60 any ios "${base:-0}" >/dev/null
s=$SECONDS
dk_target_stop >/dev/null
# shellcheck disable=SC2086 # TARGS: words
dk_target_start $TARGS >/dev/null
started=$?
took=$((SECONDS - s))
base=$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2 }')
tr_wait r1b "$dev" 120 any ios "${base:-0}" >/dev/null
tr_rounds_stop r1 180
rc=$?
[ $started = 0 ] && [ $rc = 0 ]
res $? "target restarted under fio verify (serving again in $took s): no I/O error ($FIO_SUM)"

# Under verifying fio rounds: the OSD restarts (SIGTERM, the same command line again; bluestore
# keeps its objects). The target's librbd requests wait for an OSD map with the OSD up again,
# so the disk's I/O stalls, then resumes. A sampler in the compute VM logs its completions: the
# longest stretch without one that overlaps the restart is the gap.
base=$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2 }')
tr_rounds_start r3 "$(tr_fio_args r3)"
tr_gap_start osd "$dev"
tr_wait io "$dev" 60 any ios "${base:-0}" >/dev/null
ns_a=$(tr_vm_ns)
out=$(on storage "$TB_REPO/selftests/ceph/cluster.sh restart-osd $CL 2>&1")
restarted=$?
ns_b=$(tr_vm_ns)
printf '%s\n' "$out" | grep -v '^OSD_' | indent
tr_rounds_stop r3 180
rc=$?
tr_gap_stop osd
gap=$(tr_gap_ms osd "$ns_a" "$ns_b")
ie=$(tr_stat "$dev" io_errors)
[ $restarted = 0 ] && [ $rc = 0 ] && n_eq "$ie" 0
res $? "OSD restarted under fio verify (up again $(kv OSD_RESTART_MS "$out") ms after its SIGTERM), I/O gap $gap ms: no I/O error ($FIO_SUM), io_errors=$ie"

# Under verifying fio rounds: the compute VM's RDMA device goes away (once I/O flows) and
# comes back (once I/O has completed over TCP).
nic=$(tr_nic)
read -r base t2 <<<"$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2, $2 }')"
tr_rounds_start r2 "$(tr_fio_args r2)"
tr_wait r2 "$dev" 60 any ios "${base:-0}" >/dev/null
on compute "rdma link delete $TR_RXE" >/dev/null
tr_wait nic1 "$dev" 60 tcp tcp_ios "${t2:-0}" >/dev/null
on_tcp=$?
on compute "rdma link add $TR_RXE type rxe netdev $nic" >/dev/null
tr_wait nic2 "$dev" 120 rdma >/dev/null
back=$?
tr_rounds_stop r2 180
rc=$?
[ $on_tcp = 0 ] && [ $back = 0 ] && [ $rc = 0 ]
res $? "RDMA device deleted and added back under fio verify: TCP (I/O completed there), then RDMA again, no I/O error ($FIO_SUM)"
tr_rxe_restore >/dev/null 2>&1

# Online resize: rbd resize 64 -> 96 MiB on the storage VM under verifying fio rounds. The
# disk follows the capacity its responses report, with no reconnect; then the new space
# serves verified I/O.
read -r rz0 rc0 <<<"$(tr_stat "$dev" resizes reconnects)"
tr_rounds_start r4 "$(tr_fio_args r4)"
on compute "sleep 2" >/dev/null
on storage "rbd -c $CL/ceph.conf resize --size 96M rbd/vol89" >/dev/null 2>&1
rs=$?
s=$SECONDS
sz=$(on compute "for i in \$(seq 300); do s=\$(cat /sys/block/$dev/size); [ \"\$s\" = 196608 ] && break; sleep 0.1; done; echo \$s")
took=$((SECONDS - s))
tr_rounds_stop r4 180
rc=$?
read -r rz1 rc1 <<<"$(tr_stat "$dev" resizes reconnects)"
said=$(on compute "dmesg | grep -c '$dev: detected capacity change from 131072 to 196608'")
[ $rs = 0 ] && [ "$sz" = 196608 ] && [ $rc = 0 ] && n_eq "$rz1" $((rz0 + 1)) && n_eq "$rc1" "$rc0" && n_eq "$said" 1
res $? "rbd resize 64 -> 96 MiB under fio verify: /sys/block/$dev/size 196608 within $took s of the resize, resizes $rz0 -> $rz1, reconnects $rc0 -> $rc1, the kernel logged the change; no I/O error ($FIO_SUM)"
dk_fio grown "--name=grown --filename=/dev/$dev --ioengine=libaio --direct=1 --offset=92M --size=4M --bsrange=4k-64k --iodepth=8 --verify=crc32c --rw=randwrite --do_verify=1 --verify_fatal=1"
res $? "fio: the last 4 MiB of the grown disk written and verified ($FIO_SUM)"

out=$(on compute "set -e; mkfs.ext4 -q -F /dev/$dev && mkdir -p $MNT && mount /dev/$dev $MNT && cd $MNT
head -c 3145731 /dev/urandom >a.bin; mkdir d; for i in \$(seq 10); do head -c \$((i * 5000 + 3)) /dev/urandom >d/f\$i; done
sync; find . -type f | sort | xargs sha256sum >$SUMS; cd /; umount $MNT" 2>&1)
rc=$?
printf '%s\n' "$out" | tail -n 3 | indent
[ $rc = 0 ] && n_eq "$(grep -c . "$SUMS" 2>/dev/null)" 11
res $? "ext4 on the RBD-backed disk: 11 files written, their sha256sums kept, unmounted"

dk_unmap "$dev" normal >/dev/null && dk_gone "$dev" 10 && dk_map_disk d89 vol89 &&
  on compute "mount /dev/$DK_DEV $MNT && cd $MNT && sha256sum -c --quiet $SUMS && cd / && umount $MNT"
res $? "unmap, map again (/dev/${DK_DEV:-?}), mount: every checksum matches"

# Ceph gone mid-I/O (the OSD frozen): a read stalls, and fails by the loss-timeout rules (a
# request older than loss_timeout_s fails when its connection is reset: the I/O timeout, 5 s
# here, resets it), with an error and no data. With the OSD back, the disk serves again.
dev=$DK_DEV
LT=10
tr_set "$dev" io_timeout_ms=5000 loss_timeout_s=$LT >/dev/null
ie0=$(tr_stat "$dev" io_errors)
op=$(on storage "cat $CL/run/osd.0.pid")
on storage "kill -STOP $op" >/dev/null
s=$SECONDS
out=$(on compute "dd if=/dev/$dev of=/dev/null bs=64k count=1 skip=300 iflag=direct 2>&1; echo rc=\$?")
took=$((SECONDS - s))
on storage "kill -CONT $op" >/dev/null
ie1=$(tr_stat "$dev" io_errors)
printf '%s\n' "$out" | grep -v '^rc=' | indent
! grep -q '^rc=0' <<<"$out" && grep -q 'Input/output error' <<<"$out" && n_le $LT "$took" && n_le "$took" $((LT + 30)) &&
  n_eq "$ie1" $((ie0 + 1))
res $? "the OSD frozen: a direct read fails after $took s (loss_timeout_s=$LT: $LT-$((LT + 30))) with an I/O error, no data; io_errors $ie0 -> $ie1"
on compute "mount /dev/$dev $MNT && cd $MNT && sha256sum -c --quiet $SUMS && cd / && umount $MNT"
res $? "the OSD thawed: the disk serves again, every checksum matches"

# ---------------------------------------------------------------- several gateways
# Two targets serve rbd/vol89 as gateways (--gateway: no lock at start; a read-write attach
# takes the image's lock over, and Ceph blocklists the previous owner). One disk names both
# (target=A,B); under verifying fio rounds: the active gateway is SIGKILLed (the disk moves to
# the other), restarted (the disk fails back after good probes), SIGSTOPped and later thawed
# (its late writes are refused), and killed at the moment the compute VM's RDMA device goes
# (the disk moves to the other gateway over TCP, then back to RDMA). Each reports the longest
# stretch without a completion. Last, ext4 with a checksum manifest across a gateway's death.
dk_unmap "$dev" normal >/dev/null && dk_gone "$dev" 10 && dk_target_stop >/dev/null
res $? "unmapped; the single target stopped (it releases the lock)"
cleanup89gw() {
  gw 0 dk_target_stop >/dev/null 2>&1
  gw 1 dk_target_stop >/dev/null 2>&1
  cleanup89
}
fback=$(dk_backing f89 16M)
# shellcheck disable=SC2086 # TARGS: words
gw 0 dk_target_start $TARGS --gateway vol89 --export "f89=$fback" >/dev/null &&
  gw 1 dk_target_start $TARGS --gateway vol89 >/dev/null
if ! res $? "two gateways of rbd/vol89: ports 7700/7701 and 7710/7711"; then
  on storage "tail -n 5 $TB_DIR/$DK_ID.gw0.log $TB_DIR/$DK_ID.gw1.log" | indent
  cleanup89gw; return 0 2>/dev/null || exit 0
fi
DK_TARGETS=$(gw_targets 2)

out=$(dk_map "name=f89 $DK_TARGETS export=f89")
rc=$?
said=$(grep -c 'does not serve export f89 as a gateway of a shared store' <<<"$out")
[ $rc != 0 ] && grep -q 'Invalid argument' <<<"$out" && n_gt "$said" 0
res $? "a local file through two targets, read-write: refused with EINVAL and a dmesg line" ||
  printf '%s\n' "$out" | tail -n 5 | indent
dk_map_disk f89 f89 ro && dk_unmap "$DK_DEV" normal >/dev/null && dk_gone "$DK_DEV" 10
res $? "the same read-only: mapped through target 0, then unmapped"

dk_map_disk d89g vol89 && dev=$DK_DEV &&
  tr_set "$dev" keepalive_ms=2000 path_failover_ms=2000 probe_interval_ms=2000 failback_probes=3 \
    loss_timeout_s=120 >/dev/null
if ! res $? "map name=d89g $DK_TARGETS: /dev/${DK_DEV:-?} live; keepalive 2 s, path_failover_ms 2000"; then
  cleanup89gw; return 0 2>/dev/null || exit 0
fi
paths=$(tr_get "$dev" paths)
printf '%s\n' "$paths" | indent
n_eq "$(grep -c . <<<"$paths")" 2 && grep -q '^0 .* state=active ' <<<"$paths" &&
  grep -q '^1 .* state=standby ' <<<"$paths" && [ "$(tr_get "$dev" path_policy)" = failover ]
res $? "paths: two, gateway 0 active, gateway 1 standby; path_policy failover"

# gw_drill TAG DESCRIPTION WANT SECONDS ACTION...: under verifying fio rounds, runs ACTION
# (a command) once I/O flows, waits until active_path is WANT, lets I/O run 2 s there, then
# checks the rounds, the longest I/O gap and io_errors.
gw_drill() {
  local tag=$1 what=$2 want=$3 secs=$4 base ns_a ns_b out moved rc gap ie
  shift 4
  base=$(tr_stat "$dev" rdma_ios tcp_ios | awk '{ print $1 + $2 }')
  tr_rounds_start "$tag" "$(tr_fio_args "$tag")"
  tr_gap_start "$tag" "$dev"
  tr_wait "$tag" "$dev" 60 any ios "${base:-0}" >/dev/null
  ns_a=$(tr_vm_ns)
  "$@" >/dev/null
  out=$(gw_wait "$dev" "$want" "$secs")
  moved=$?
  on compute "sleep 2" >/dev/null
  ns_b=$(tr_vm_ns)
  tr_rounds_stop "$tag" 180
  rc=$?
  tr_gap_stop "$tag"
  gap=$(tr_gap_ms "$tag" "$ns_a" "$ns_b")
  ie=$(tr_stat "$dev" io_errors)
  GW_GAPS+="$tag=${gap}ms "
  [ $moved = 0 ] && [ $rc = 0 ] && n_eq "$ie" 0
  res $? "$what: active_path $want after $(kv ms "$out") ms, longest I/O gap $gap ms; no I/O error ($FIO_SUM), io_errors=$ie" ||
    { printf '%s\n' "$out" | indent; tr_get "$dev" paths | indent; }
}
GW_GAPS=

gw_drill kill "gateway 0 SIGKILLed under fio verify" 1 60 gw_sig 0 KILL
fo=$(tr_stat "$dev" path_failovers)
n_eq "$fo" 1 && grep -q '^0 .* state=down ' <<<"$(tr_get "$dev" paths)"
res $? "path_failovers=$fo; gateway 0 shows down"

# shellcheck disable=SC2086 # TARGS: words
gw_drill back "gateway 0 restarted under fio verify: failback after 3 good probes" 0 120 \
  gw 0 dk_target_start $TARGS --gateway vol89 --export "f89=$fback"
fb=$(tr_stat "$dev" path_failbacks)
n_eq "$fb" 1
res $? "path_failbacks=$fb"

# Frozen: the disk's requests go unanswered, it moves on; the failback is held off so that
# the thawed gateway is never served again, and anything it still applies is a late write. On
# TCP, where the frozen gateway's socket keeps the requests it had not read (on RDMA it could
# no longer pull a write's data from the client), so that it has late writes to refuse.
tr_set "$dev" failback_probes=1000 transport=tcp >/dev/null
tr_wait tcp "$dev" 60 tcp >/dev/null
gw_drill stop "gateway 0 SIGSTOPped under fio verify" 1 60 gw_sig 0 STOP
tr_rounds_start thaw "$(tr_fio_args thaw)"
gw_sig 0 CONT
on compute "sleep 8" >/dev/null
tr_rounds_stop thaw 180
rc=$?
gw 0 dk_tsnap
late=$(tstat writes_refused_unlocked) lost=$(on storage "grep -c 'no longer holds its exclusive lock\|blocklisted' $TB_DIR/$DK_ID.gw0.log")
ie=$(tr_stat "$dev" io_errors)
[ $rc = 0 ] && n_eq "$ie" 0 && is_num "$late"
res $? "gateway 0 thawed under fio verify: late writes it refused: $late, log lines on the lost lock: $lost; every round verified ($FIO_SUM), io_errors=$ie"

# Back to gateway 0 (it lost the lock and its Ceph client was blocklisted: it reconnects as a
# new one when the disk attaches there again), and to RDMA.
tr_set "$dev" failback_probes=3 transport=auto >/dev/null
gw_drill back2 "failback to the thawed gateway 0 under fio verify" 0 120 true

# NIC servicing at the moment the active gateway dies: the disk moves to gateway 1 over TCP,
# then back to RDMA there once the device is back.
nic=$(tr_nic)
gw_nic() { gw_sig 0 KILL; on compute "rdma link delete $TR_RXE" >/dev/null; }
gw_drill nic "gateway 0 SIGKILLed as the compute VM's RDMA device is deleted" 1 90 gw_nic
t=$(tr_get "$dev" active_transport)
on compute "rdma link add $TR_RXE type rxe netdev $nic" >/dev/null
tr_wait nic2 "$dev" 120 rdma >/dev/null
back=$?
[ "$t" = tcp ] && [ $back = 0 ] && [ "$(tr_get "$dev" active_path | cut -d' ' -f1)" = 1 ]
res $? "on gateway 1 over $t while the device was gone; RDMA again there once it is back"
tr_rxe_restore >/dev/null 2>&1

# ext4 with a checksum manifest, written while the active gateway dies.
# shellcheck disable=SC2086 # TARGS: words
gw 0 dk_target_start $TARGS --gateway vol89 --export "f89=$fback" >/dev/null &&
  gw_wait "$dev" 0 120 >/dev/null
res $? "gateway 0 started again; the disk failed back to it"
rm -f "$TB_DIR/$DK_ID.gwkill"
on compute "set -e; mkfs.ext4 -q -F /dev/$dev && mkdir -p $MNT && mount /dev/$dev $MNT && cd $MNT
head -c 2097152 /dev/urandom >a.bin; sync; echo kill >$TB_DIR/$DK_ID.gwkill
for i in \$(seq 12); do head -c \$((i * 40000 + 7)) /dev/urandom >f\$i; sync; done
find . -type f | sort | xargs sha256sum >$SUMS.gw; cd /; umount $MNT" >"$TB_DIR/$DK_ID.ext4gw.out" 2>&1 &
wpid=$!
for ((i = 0; i < 600; i++)); do [ -e "$TB_DIR/$DK_ID.gwkill" ] && break; sleep 0.2; done
gw_sig 0 KILL
wait $wpid
tail -n 3 "$TB_DIR/$DK_ID.ext4gw.out" | indent
on compute "mount /dev/$dev $MNT && cd $MNT && sha256sum -c --quiet $SUMS.gw && cd / && umount $MNT"
rc=$?
ie=$(tr_stat "$dev" io_errors)
[ $rc = 0 ] && n_eq "$(grep -c . "$SUMS.gw" 2>/dev/null)" 13 && n_eq "$ie" 0 &&
  [ "$(tr_get "$dev" active_path | cut -d' ' -f1)" = 1 ]
res $? "ext4: 13 files written and synced while gateway 0 was SIGKILLed; on gateway 1, every checksum matches; io_errors=$ie"
echo "  gateway I/O gaps: $GW_GAPS"

cleanup89gw
