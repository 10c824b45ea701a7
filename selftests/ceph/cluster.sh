#!/usr/bin/env bash
# A throwaway Ceph cluster for the tests: one monitor and one OSD (memstore: its objects live
# in the OSD's memory), cephx on, a pool of size 1 and a keyring for the target's client.
#
#   cluster.sh start DIR    makes the cluster in DIR and starts it; prints KEY=VALUE lines
#                           (CEPH_CONF, CEPH_KEYRING, CEPH_CLIENT, CEPH_POOL, CEPH_NETNS)
#   cluster.sh stop DIR     stops its daemons and removes its network namespace
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
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
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

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
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
admin socket = $dir/run/\$name.asok
log file = $dir/log/\$name.log
keyring = $dir/keyring
# Small: the test host's memory is shared with two VMs.
osd memory target = 536870912
bluestore cache size = 67108864

[mon]
mon data = $dir/mon.\$id
mon cluster log file = $dir/log/cluster.log

[osd]
osd data = $dir/osd.\$id
keyring = $dir/osd.\$id/keyring
osd objectstore = memstore
memstore device bytes = 1073741824
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
log "monitor up in $((SECONDS - t0)) s; making osd.0 (memstore)"
uuid=$(cat /proc/sys/kernel/random/uuid)
id=$(c osd new "$uuid") && [ "$id" = 0 ] &&
  in_ns ceph-osd -c "$conf" -i 0 --mkfs --mkkey --no-mon-config --osd-uuid "$uuid" >>"$dir/log/mkfs.log" 2>&1 &&
  c auth add osd.0 osd 'allow *' mon 'allow profile osd' -i "$dir/osd.0/keyring" >/dev/null 2>&1 &&
  in_ns ceph-osd -c "$conf" -i 0 >>"$dir/log/start.log" 2>&1 ||
  { echo "ceph: osd.0 did not start (see $dir/log)" >&2; tail -n 20 "$dir/log/mkfs.log" >&2; stop; exit 1; }
t0=$SECONDS
until c osd stat 2>/dev/null | grep -q '1 up'; do
  (( SECONDS - t0 < 120 )) || { echo "ceph: osd.0 is not up after 120 s" >&2; tail -n 20 "$dir/log/osd.0.log" >&2; stop; exit 1; }
  sleep 1
done
log "osd.0 up in $((SECONDS - t0)) s; pool rbd and client.rdmadisk"
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
