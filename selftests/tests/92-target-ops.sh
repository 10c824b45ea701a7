# The target as an operator runs it: reloaded under a client, asked who is attached, scraped by
# Prometheus, and started before its RDMA device.
#
# The target runs from a config file (exports vol0 and old1; a control socket; metrics on the
# storage VM's loopback) with NOTIFY_SOCKET set to a listener that logs what it tells systemd.
# A. vol0 mapped on the compute VM (RDMA); `rdmadisk-target clients --json` lists it: export
#    vol0, peer the compute VM, transport rdma, read-write. The metrics parse with
#    prometheus_client's parsers (the Prometheus text one and the OpenMetrics one).
# B. Under fio on vol0, the config is rewritten (old1 removed, new1 added, vol0 as it was) and
#    the target gets SIGHUP: it logs both changes; new1 maps, old1 is refused; fio ends with no
#    error and the disk counted no I/O error; vol0's connections are the same ones (their
#    registry ids) as before the reload. A broken config then sent with SIGHUP is refused and
#    the target still serves. The metrics' per-export and per-client counters of vol0 grew.
# C. The target restarted with the storage VM's rxe0 deleted: it serves TCP, says so in its log
#    and its sd_notify STATUS; `rdma link add` brings rxe0 back and the target listens on RDMA
#    within 20 s (log, STATUS, metrics); vol0 maps over RDMA (a target serving TCP only would
#    refuse the map: the client takes an rdma_cm reject as a refusal) and a write and read
#    through it, pinned to transport=rdma, succeed.
# timeout: 420

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

CFG=$TB_DIR/$DK_ID.toml
SOCK=$DK_BACKDIR/$DK_ID.sock
NLOG=$TB_DIR/$DK_ID.notify.log
METRICS=127.0.0.1:9464
SNIC=$(cat "$TB_DIR/storage.nic")
vol0=$(dk_backing vol0 16M); old1=$(dk_backing old1 4M); new1=$(dk_backing new1 4M)

config() { # config EXPORT=PATH...: writes the target's config file with these exports
  local e
  {
    printf 'listen = "%s"\nrdma_port = %s\ntcp_port = %s\nallow = ["%s"]\n' "$DK_S" "$DK_PORT" "$DK_TCP_PORT" "$TB_COMPUTE_ADDR"
    printf 'stats_file = "%s"\ncontrol_socket = "%s"\nmetrics_listen = "%s"\n' "$DK_STATS" "$SOCK" "$METRICS"
    for e; do printf '[[export]]\nname = "%s"\npath = "%s"\n' "${e%%=*}" "${e#*=}"; done
  } >"$CFG"
}

# The sd_notify listener: every datagram the target sends, one line each.
cat >"$TB_DIR/$DK_ID.notify.py" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("\0rdmadisk-tests-92")
f = open(sys.argv[1], "a", buffering=1)
f.write("listening\n")
while True:
    f.write(s.recv(4096).decode(errors="replace").replace("\n", " ") + "\n")
PY
# The scraper: both formats, both parsers; the values the test follows.
cat >"$TB_DIR/$DK_ID.scrape.py" <<'PY'
import sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
url, client = sys.argv[1], sys.argv[2]
try:
    text = urllib.request.urlopen(url, timeout=20).read().decode()
    fams = list(text_string_to_metric_families(text))
    req = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    om = list(om_families(urllib.request.urlopen(req, timeout=20).read().decode()))
except Exception as e:
    print(f"error={type(e).__name__}: {e}")
    sys.exit(1)
def val(name, **labels):
    for f in fams:
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return int(s.value)
    return ""
types = {f.name: f.type for f in fams}
print(f"families={len(fams)} om_families={len(om)}"
      f" export_type={types.get('rdmadisk_target_export_bytes_written')}"
      f" export_bytes_written={val('rdmadisk_target_export_bytes_written_total', export='vol0')}"
      f" export_requests={val('rdmadisk_target_export_requests_total', export='vol0')}"
      f" client_requests={val('rdmadisk_target_client_requests_total', export='vol0', client=client, transport='rdma')}"
      f" rdma_up={val('rdmadisk_target_transport_up', transport='rdma')}"
      f" tcp_up={val('rdmadisk_target_transport_up', transport='tcp')}")
PY
scrape() { on storage "python3 $TB_DIR/$DK_ID.scrape.py http://$METRICS/metrics $TB_COMPUTE_ADDR 2>&1"; }

start() { # start: (re)starts the target from $CFG; waits for its "serving" line
  on storage "$(_dk_tstop)
tstop >/dev/null
rm -f $DK_STATS $DK_TLOG; : >$NLOG
if ! [ -s $TB_DIR/$DK_ID.notify.pid ] || ! kill -0 \$(cat $TB_DIR/$DK_ID.notify.pid) 2>/dev/null; then
  setsid python3 $TB_DIR/$DK_ID.notify.py $NLOG </dev/null >/dev/null 2>&1 & echo \$! >$TB_DIR/$DK_ID.notify.pid
  for ((i = 0; i < 100; i++)); do has $NLOG listening && break; pause 0.2; done
fi
NOTIFY_SOCKET=@rdmadisk-tests-92 setsid $DK_TARGET --config $CFG >$DK_TLOG 2>&1 </dev/null &
echo \$! >$DK_TPID
for ((i = 0; i < 100; i++)); do has $DK_TLOG 'rdmadisk-target: serving ' && exit 0; pause 0.2; done
show $DK_TLOG; exit 1"
}
clients() { on storage "$DK_TARGET clients --socket $SOCK --json 2>&1"; }
# ids EXPORT JSON: the registry ids of EXPORT's connections from the compute VM on RDMA,
# read-write (space separated, sorted)
ids() {
  python3 -c 'import json, sys
try: cs = json.loads(sys.argv[3])
except ValueError: sys.exit(0)
print(" ".join(sorted(str(c["id"]) for c in cs if c["export"] == sys.argv[1]
      and (c["peer"] or "").startswith(sys.argv[2] + ":") and c["transport"] == "rdma" and c["mode"] == "read-write")))' "$1" "$TB_COMPUTE_ADDR" "$2"
}
logged() { on storage "$DK_VM_DEFS
for ((i = 0; i < ${2:-50}; i++)); do has $DK_TLOG '$1' && exit 0; pause 0.2; done; exit 1"; }
cleanup92() {
  on storage "rdma link show rxe0/1 >/dev/null 2>&1 || rdma link add rxe0 type rxe netdev $SNIC
[ -s $TB_DIR/$DK_ID.notify.pid ] && kill \$(cat $TB_DIR/$DK_ID.notify.pid); rm -f $TB_DIR/$DK_ID.notify.pid; true" >/dev/null 2>&1
  dk_cleanup
}

# ---- A. attached, listed, scraped
config "vol0=$vol0" "old1=$old1"
start >/dev/null && dk_load && dk_map_disk d92 vol0
if ! res $? "target from a config file (vol0, old1); insmod; map d92 vol0: /dev/${DK_DEV:-?} is live"; then
  on storage "cat $DK_TLOG" | indent; cleanup92; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
j0=$(clients); ids0=$(ids vol0 "$j0")
printf '%s\n' "$j0" | head -c 600 | indent "clients: "; echo
[ -n "$ids0" ]
res $? "clients --json lists vol0's connections from $TB_COMPUTE_ADDR, rdma, read-write: ids ${ids0:-none}"
m0=$(scrape); echo "  $m0"
[ "$(word export_type "$m0")" = counter ] && is_num "$(word export_bytes_written "$m0")" && [ "$(word rdma_up "$m0")" = 1 ]
res $? "the metrics parse (Prometheus text and OpenMetrics parsers): $(word families "$m0") families; vol0's counters are there, rdma up"

# ---- B. reload under fio
dk_fio_bg f1 "--name=f1 --filename=/dev/$dev --rw=randrw --bs=4k --size=8M --time_based --runtime=15 --iodepth=4 --randseed=92"
sleep 3
config "vol0=$vol0" "new1=$new1"
on storage "kill -HUP \$(cat $DK_TPID)" >/dev/null
logged 'reload done' && logged 'export new1 added' 5 && logged 'export old1 removed' 5
res $? "SIGHUP under fio (old1 removed, new1 added): the target says so: $(on storage "grep -h 'reload' $DK_TLOG | tr '\n' '|'")"
dk_map_disk d92n new1
res $? "the added export new1 maps: /dev/${DK_DEV:-?}"
devn=$DK_DEV
out=$(dk_map "name=d92o addr=$DK_S export=old1" 60)
[ "$(grep -m1 '^rc=' <<<"$out" | cut -d' ' -f1)" != rc=0 ] && [ -z "$(dk_dev_of d92o)" ]
res $? "the removed export old1 is refused: $(grep -m1 '^rc=' <<<"$out")"
dk_fio_wait f1 90 >/dev/null
res $? "fio on vol0 across the reload: $FIO_SUM"
j1=$(clients); ids1=$(ids vol0 "$j1")
dk_csnap "$dev"
[ -n "$ids0" ] && [ "$ids1" = "$ids0" ] && n_eq "$(cstat io_errors)" 0
res $? "vol0 kept its connections through the reload (ids ${ids0:-none} -> ${ids1:-none}), io_errors=$(cstat io_errors) reconnects=$(cstat reconnects)"
printf 'this is = not toml [\n' >>"$CFG"
on storage "kill -HUP \$(cat $DK_TPID)" >/dev/null
logged 'the running configuration stays' && [ -n "$(ids vol0 "$(clients)")" ]
res $? "a broken config on SIGHUP is refused, and vol0 is still attached: $(on storage "grep -h 'refused' $DK_TLOG | tail -n1")"
m1=$(scrape); echo "  $m1"
n_gt "$(word export_bytes_written "$m1")" "$(word export_bytes_written "$m0")" && n_gt "$(word client_requests "$m1")" "$(word client_requests "$m0")"
res $? "vol0's counters moved under I/O: export bytes written $(word export_bytes_written "$m0") -> $(word export_bytes_written "$m1"), client requests $(word client_requests "$m0") -> $(word client_requests "$m1")"
dk_unmap_rmmod 30 "$dev" "$devn"
res $? "unmap both; rmmod"

# ---- C. RDMA comes after the target
config "vol0=$vol0"
dk_target_stop >/dev/null
on storage "rdma link delete rxe0" >/dev/null
start >/dev/null && logged 'trying RDMA every second' 5
res $? "target started with the storage VM's rxe0 deleted: $(on storage "grep -h 'rdma unavailable' $DK_TLOG")"
sleep 2
on storage "rdma link add rxe0 type rxe netdev $SNIC" >/dev/null
logged 'the RDMA device came' 100
res $? "rdma link add rxe0: the target listens on RDMA: $(on storage "grep -h 'RDMA device came' $DK_TLOG")"
st=$(on storage "cat $NLOG")
printf '%s\n' "$st" | indent "notify: "
grep -q 'READY=1 STATUS=serving 1 export(s) over tcp (rdma: waiting for a device)' <<<"$st" && grep -q 'STATUS=serving 1 export(s) over tcp and rdma' <<<"$st"
res $? "sd_notify STATUS said TCP only, then TCP and RDMA"
m2=$(scrape)
[ "$(word rdma_up "$m2")" = 1 ]
res $? "metrics: transport_up rdma=$(word rdma_up "$m2") tcp=$(word tcp_up "$m2")"
dk_load && dk_map_disk d92r vol0
res $? "vol0 maps once the device is there: /dev/${DK_DEV:-?}"
dev=$DK_DEV
act=$(tr_get "$dev" active_transport)
tr_set "$dev" transport=rdma >/dev/null
out=$(on compute "dd if=/dev/urandom of=/tmp/92.pat bs=64k count=4 status=none && dd if=/tmp/92.pat of=/dev/$dev bs=64k oflag=direct status=none && dd if=/dev/$dev bs=64k count=4 iflag=direct status=none | cmp - /tmp/92.pat && echo same; rm -f /tmp/92.pat")
dk_csnap "$dev"
[ "$act" = rdma ] && [ "$out" = same ] && n_gt "$(cstat rdma_ios)" 0 && n_eq "$(cstat tcp_ios)" 0
res $? "on RDMA (active_transport $act, pinned transport=rdma): 256 KiB written and read back $out; rdma_ios=$(cstat rdma_ios) tcp_ios=$(cstat tcp_ios)"
dk_unmap_rmmod 30 "$dev"
res $? "unmap; rmmod"
tr_splat_check
cleanup92
