#!/usr/bin/env bash
# A throwaway Ceph cluster for the tests: one monitor and one OSD, cephx on, a pool of size 1
# and a keyring for the target's client.
#
#   cluster.sh start DIR        makes the cluster in DIR and starts it; prints KEY=VALUE lines
#                               (CEPH_CONF, CEPH_KEYRING, CEPH_CLIENT, CEPH_POOL, CEPH_NETNS)
#   cluster.sh restart-osd DIR  stops the OSD (SIGTERM: it tells the monitor it goes down),
#                               starts it again and waits until it is up in the monitor's OSD
#                               map; prints OSD_RESTART_MS (from the SIGTERM to up). Bluestore
#                               only.
#   cluster.sh stop DIR         stops its daemons and removes its network namespace
#
# The OSD's object store, CEPH_STORE at start: memstore (the default) keeps its objects in the
# OSD's memory, which is fast to make but loses them when the OSD stops; bluestore keeps them
# in a sparse 1 GiB file in DIR (data, RocksDB and its log in the one file, small caches), so
# the OSD can restart with its data.
# "Up" is the OSD's own log line "state: booting -> active", which it writes when an OSD map
# from the monitor has it up: no `ceph` command to poll, each of which costs seconds under TCG.
#
# Everything runs in a network namespace of its own (CEPH_NETNS, made here, with only its
# loopback up), and the daemons listen on 127.0.0.1 there: nothing listens on any address of
# the host. Whoever talks to the cluster runs in that namespace too (`ip netns exec`).
# CEPH_NETNS=none runs them on the loopback of the system itself instead: the test bed's
# storage VM does, where the target that serves the cluster's images must also reach the
# compute VM.
# No manager: the monitor serves every command the tests use (pools, keys, RBD images and
# the OSD blocklist); without one `ceph -s` says HEALTH_WARN, which changes nothing here.
set -uo pipefail
cmd=${1:-} dir=${2:-}
usage() { echo "usage: $0 start|restart-osd|stop DIR" >&2; exit 2; }
[ -n "$cmd" ] && [ -n "$dir" ] || usage
log() { echo "# [ceph] $*" >&2; }

stop() {
  local f ns
  for f in "$dir"/run/*.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  sleep 0.5
  for f in "$dir"/run/*.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  ns=$(cat "$dir/netns" 2>/dev/null)
  [ -n "$ns" ] && [ "$ns" != none ] && ip netns del "$ns" 2>/dev/null
  return 0
}

# osd_ups: how many times osd.0 has been up (its log's "booting -> active" lines)
osd_ups() { local n; n=$(grep -c 'state: booting -> active' "$dir/log/osd.0.log" 2>/dev/null); echo "${n:-0}"; }

# osd_wait_up N SECONDS: until osd.0 has been up more than N times; status 1 after SECONDS
osd_wait_up() {
  local t0=$SECONDS
  until [ "$(osd_ups)" -gt "$1" ]; do
    (( SECONDS - t0 < $2 )) || return 1
    sleep 0.2
  done
}

# restart_osd: SIGTERM (the OSD tells the monitor it goes down and exits), the same command
# line again, then until an OSD map has it up again.
restart_osd() {
  local pid t0 ms ups i
  grep -q '^osd objectstore = bluestore' "$conf" 2>/dev/null ||
    { echo "ceph: restart-osd needs a cluster started with CEPH_STORE=bluestore (memstore loses its objects)" >&2; exit 1; }
  pid=$(cat "$dir/run/osd.0.pid" 2>/dev/null)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then echo "ceph: osd.0 is not running" >&2; exit 1; fi
  ups=$(osd_ups)
  t0=${EPOCHREALTIME/[.,]/}
  kill -TERM "$pid"
  for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { log "osd.0 still running 30 s after SIGTERM: SIGKILL"; kill -KILL "$pid"; sleep 0.5; }
  log "osd.0 (pid $pid) stopped after $(( (${EPOCHREALTIME/[.,]/} - t0) / 1000 )) ms; starting it again"
  in_ns ceph-osd -c "$conf" -i 0 >>"$dir/log/start.log" 2>&1 ||
    { echo "ceph: osd.0 did not start again (see $dir/log)" >&2; tail -n 20 "$dir/log/osd.0.log" >&2; exit 1; }
  osd_wait_up "$ups" 120 ||
    { echo "ceph: osd.0 is not up 120 s after its restart" >&2; tail -n 20 "$dir/log/osd.0.log" >&2; exit 1; }
  ms=$(( (${EPOCHREALTIME/[.,]/} - t0) / 1000 ))
  log "osd.0 up again $ms ms after the SIGTERM"
  echo "OSD_RESTART_MS=$ms"
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
if [ "$cmd" = restart-osd ]; then
  dir=$(cd "$dir" && pwd) || exit 1
  conf=$dir/ceph.conf ns=$(cat "$dir/netns" 2>/dev/null)
  if [ ! -f "$conf" ] || [ -z "$ns" ]; then echo "ceph: no cluster in $dir" >&2; exit 1; fi
  if [ "$ns" = none ]; then in_ns() { "$@"; }; else in_ns() { ip netns exec "$ns" "$@"; }; fi
  restart_osd
  exit 0
fi
[ "$cmd" = start ] || usage
store=${CEPH_STORE:-memstore}
case $store in
  memstore) osd_store="osd objectstore = memstore
memstore device bytes = 1073741824" ;;
  # The block file is sparse: only what is written takes room. RocksDB and its log live in
  # it too (no separate db or wal device). Its memtables are small (16 MiB, at most 2) and
  # the caches are fixed at bluestore cache size, for the storage VM's 1 GiB.
  bluestore) osd_store="osd objectstore = bluestore
bluestore block create = true
bluestore block size = 1073741824
bluestore fsck on mkfs = false
bluestore block db create = false
bluestore block wal create = false
bluestore cache autotune = false
bluestore rocksdb options = compression=kNoCompression,max_write_buffer_number=2,min_write_buffer_number_to_merge=1,recycle_log_file_num=2,write_buffer_size=16777216,writable_file_max_buffer_size=0,compaction_readahead_size=2097152,max_background_compactions=1" ;;
  *) echo "ceph: CEPH_STORE must be memstore or bluestore, not $store" >&2; exit 2 ;;
esac
for b in ceph-mon ceph-osd ceph ceph-authtool monmaptool rbd; do
  command -v $b >/dev/null || { echo "ceph: $b is not installed (make deps installs it)" >&2; exit 1; }
done
[ -d "$dir" ] && stop
rm -rf "$dir" && mkdir -p "$dir/run" "$dir/log" "$dir/mon.a" "$dir/osd.0" || exit 1
dir=$(cd "$dir" && pwd)
ns=${CEPH_NETNS:-rdmadisk-ceph-$$}
echo "$ns" >"$dir/netns"
if [ "$ns" = none ]; then
  in_ns() { "$@"; }
else
  ip netns add "$ns" && ip -n "$ns" link set lo up || { echo "ceph: cannot make network namespace $ns" >&2; exit 1; }
  in_ns() { ip netns exec "$ns" "$@"; }
fi
fsid=$(cat /proc/sys/kernel/random/uuid)
conf=$dir/ceph.conf
cat >"$conf" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:3300,v1:127.0.0.1:6789]
mon initial members = a
public addr = 127.0.0.1
# The OSD's cluster and heartbeat sockets too: they would otherwise listen on every address.
cluster addr = 127.0.0.1
osd heartbeat addr = 127.0.0.1
ms bind ipv4 = true
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon allow pool delete = true
run dir = $dir/run
pid file = $dir/run/\$name.pid
# One admin socket per client instance: a client whose path is taken pings the socket's owner
# before it starts, and waits 10 s for the answer of one that is frozen (a SIGSTOPped target).
admin socket = $dir/run/\$name.\$pid.\$cctid.asok
log file = $dir/log/\$name.log
keyring = $dir/keyring
# Small: the test host's memory is shared with two VMs. 896 MiB is the least memory target
# Ceph takes (it ignores a smaller one); bluestore's caches are the fixed size below.
osd memory target = 939524096
bluestore cache size = 67108864

[mon]
admin socket = $dir/run/\$name.asok
mon data = $dir/mon.\$id
mon cluster log file = $dir/log/cluster.log

[osd]
admin socket = $dir/run/\$name.asok
osd data = $dir/osd.\$id
keyring = $dir/osd.\$id/keyring
$osd_store
osd op num threads per shard = 1
osd op num shards = 1
# A client that died without closing its watches (a SIGKILLed target) counts as gone after
# this long; its RBD locks can then be broken. 30 s by default: 10 keeps the tests short.
osd client watch timeout = 10
CONF

log "making the monitor (fsid $fsid) in $dir"
{ ceph-authtool --create-keyring "$dir/mon.keyring" --gen-key -n mon. --cap mon 'allow *' &&
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n client.admin \
    --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' &&
  ceph-authtool "$dir/mon.keyring" --import-keyring "$dir/keyring" &&
  monmaptool --create --fsid "$fsid" --addv a '[v2:127.0.0.1:3300,v1:127.0.0.1:6789]' "$dir/monmap"
} >>"$dir/log/mkfs.log" 2>&1 &&
  in_ns ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/mon.keyring" >>"$dir/log/mkfs.log" 2>&1 &&
  in_ns ceph-mon -c "$conf" -i a >>"$dir/log/start.log" 2>&1 ||
  { echo "ceph: the monitor did not start (see $dir/log)" >&2; tail -n 20 "$dir/log/"*.log >&2; stop; exit 1; }
c() { in_ns timeout 60 ceph -c "$conf" "$@"; }
t0=$SECONDS
until c -s >/dev/null 2>&1; do
  (( SECONDS - t0 < 60 )) || { echo "ceph: the monitor does not answer after 60 s" >&2; tail -n 20 "$dir/log/mon.a.log" >&2; stop; exit 1; }
  sleep 0.5
done
log "monitor up in $((SECONDS - t0)) s; making osd.0 ($store)"
uuid=$(cat /proc/sys/kernel/random/uuid)
t0=$SECONDS
id=$(c osd new "$uuid") && [ "$id" = 0 ] &&
  in_ns ceph-osd -c "$conf" -i 0 --mkfs --mkkey --no-mon-config --osd-uuid "$uuid" >>"$dir/log/mkfs.log" 2>&1 &&
  c auth add osd.0 osd 'allow *' mon 'allow profile osd' -i "$dir/osd.0/keyring" >/dev/null 2>&1 &&
  in_ns ceph-osd -c "$conf" -i 0 >>"$dir/log/start.log" 2>&1 ||
  { echo "ceph: osd.0 did not start (see $dir/log)" >&2; tail -n 20 "$dir/log/mkfs.log" >&2; stop; exit 1; }
osd_wait_up 0 180 ||
  { echo "ceph: osd.0 is not up after 180 s" >&2; tail -n 20 "$dir/log/osd.0.log" >&2; stop; exit 1; }
log "osd.0 made and up in $((SECONDS - t0)) s; pool rbd and client.rdmadisk"
pool=${CEPH_POOL:-rbd}
c osd pool create "$pool" 8 8 >/dev/null 2>&1 &&
  c osd pool set "$pool" size 1 --yes-i-really-mean-it >/dev/null 2>&1 &&
  in_ns timeout 60 rbd -c "$conf" pool init "$pool" &&
  c auth get-or-create client.rdmadisk mon 'profile rbd' osd "profile rbd pool=$pool" \
    -o "$dir/client.rdmadisk.keyring" ||
  { echo "ceph: cannot make pool $pool or the client's key" >&2; stop; exit 1; }
cat <<OUT
CEPH_CONF=$conf
CEPH_KEYRING=$dir/client.rdmadisk.keyring
CEPH_CLIENT=client.rdmadisk
CEPH_POOL=$pool
CEPH_NETNS=$ns
OUT
