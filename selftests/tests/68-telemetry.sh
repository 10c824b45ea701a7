# Telemetry: per transport and operation, the disk counts I/Os, bytes, errors and credit waits,
# and keeps two log2 latency histograms (dispatch to end, and send to response), in
# /sys/block/rdmadiskN/rdmadisk/telemetry_<transport>_<op>; `telemetry_reset` zeroes them,
# `telemetry` 0 stops the recording.
#
# Acceptance: the ten files are there and parse (the shared text form); after a reset, fio's
# 4 KiB random reads at QD1 on RDMA are counted exactly (ios = fio's completed I/Os, bytes =
# 4 KiB each), and the histogram's p50 and p99 lie within one bucket of fio's clat p50 and
# p99; writes, a discard and the reads over TCP land in their own files and nowhere else; with
# max_credits=1 at QD8 the credit waits of the telemetry add up to the disk's credit_waits;
# with `telemetry` 0 nothing moves; a reset zeroes every file. The cost of recording: fio 4 KiB
# random reads at QD16, with and without it, interleaved (a figure, not a pass/fail test).

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d68 vol0 queues=2
if ! res $? "target; insmod; map name=d68 queues=2: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
D=/sys/block/$dev/rdmadisk
FILES="rdma_read rdma_write rdma_flush rdma_discard rdma_write_zeroes tcp_read tcp_write tcp_flush tcp_discard tcp_write_zeroes"

# tele: every telemetry file as "via_op key=value ..." lines, one per file.
tele() {
  on compute "for f in $FILES; do printf '%s ' \$f; tr '\n' ' ' <$D/telemetry_\$f; echo; done"
}
# tq: FILE KEY from a tele snapshot.
tq() { awk -v f="$2" -v k="$3" '$1 == f { for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) print substr($i, length(k) + 2) }' <<<"$1"; }
# tfio NAME ARGS: fio (libaio, direct) on the disk, its JSON in $TB_DIR/$DK_ID.NAME.json.
tfio() {
  local n=$1; shift
  on compute "fio --name=$n --filename=/dev/$dev --ioengine=libaio --direct=1 --output-format=json --output=$TB_DIR/$DK_ID.$n.json $*" >/dev/null
}
# hist_check FIO-JSON TELE FILE: the python check of counts and percentiles.
cat >"$TB_DIR/$DK_ID.check.py" <<'PY'
import json, sys
fio, tele, fname, ddir = sys.argv[1:5]
j = json.load(open(fio))["jobs"][0][ddir]
line = next(l for l in open(tele) if l.split(" ", 1)[0] == fname)
kv = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
hist = {}
for part in line.split("lat_us=", 1)[1].split("wire_us=", 1)[0].split():
    i, c = part.split(":")
    hist[int(i)] = int(c)
def bucket_of(us):
    return 0 if us < 2 else min(int(us).bit_length() - 1, 25)
def pct(h, pm):
    total = sum(h.values()); rank = max(1, -(-total * pm // 1000)); seen = 0
    for i in sorted(h):
        seen += h[i]
        if seen >= rank:
            return i
fio_ios = j["total_ios"]
lat_mean, wire_mean = int(kv["lat_us_sum"]) / max(1, fio_ios), int(kv["wire_us_sum"]) / max(1, fio_ios)
fio_clat = j["clat_ns"]["mean"] / 1000
# lat_us starts at the dispatch, which is inside fio's submission (its slat) on a transport
# that sends from queue_rq: it lies between fio's clat and its whole latency.
fio_lat = j["lat_ns"]["mean"] / 1000
out = [f"ios={kv['ios']} fio_ios={fio_ios} bytes={kv['bytes']} fio_bytes={j['io_bytes']} hist_total={sum(hist.values())}"]
ok = int(kv["ios"]) == fio_ios and int(kv["bytes"]) == j["io_bytes"] and sum(hist.values()) == fio_ios
out.append(f"mean: lat {lat_mean:.0f} us, wire {wire_mean:.0f} us, fio clat {fio_clat:.0f} us, fio lat {fio_lat:.0f} us")
ok = ok and 0.5 * fio_clat <= lat_mean <= fio_lat * 1.02 and wire_mean <= lat_mean
for name, pm in (("p50", 500), ("p99", 990)):
    f_us = j["clat_ns"]["percentile"][f"{pm / 10:.6f}"] / 1000
    hb, fb = pct(hist, pm), bucket_of(f_us)
    out.append(f"{name}: histogram bucket {hb} ({2 ** hb}-{2 ** (hb + 1) - 1} us), fio {f_us:.0f} us (bucket {fb})")
    ok = ok and abs(hb - fb) <= 1
print(" ".join(out))
sys.exit(0 if ok else 1)
PY

on compute "echo 2 >/sys/block/$dev/queue/nomerges"
t=$(tele)
bad=$(grep -v 'ios=[0-9]* bytes=[0-9]* errors=[0-9]* credit_waits=[0-9]* lat_us_sum=[0-9]* wire_us_sum=[0-9]* lat_us=.*wire_us=' <<<"$t")
[ "$(wc -l <<<"$t")" = 10 ] && [ -z "$bad" ] && [ "$(on compute "cat $D/telemetry")" = 1 ]
res $? "ten telemetry files, each ios/bytes/errors/credit_waits/lat_us_sum/wire_us_sum/lat_us/wire_us; telemetry is on" || printf '%s\n' "$t" | indent

# 1. Reads on RDMA, counted exactly, percentiles within a bucket of fio's.
on compute "udevadm settle; echo 1 >$D/telemetry_reset"
t=$(tele)
[ -z "$(grep -v 'ios=0 bytes=0 errors=0 credit_waits=0 lat_us_sum=0 wire_us_sum=0 lat_us= wire_us=' <<<"$t")" ]
res $? "telemetry_reset zeroes every file" || printf '%s\n' "$t" | indent
tfio rr --rw=randread --bs=4k --iodepth=1 --size=4M --number_ios=400 --randseed=68
tele >"$TB_DIR/$DK_ID.t1"
out=$(python3 "$TB_DIR/$DK_ID.check.py" "$TB_DIR/$DK_ID.rr.json" "$TB_DIR/$DK_ID.t1" rdma_read read)
res $? "400 4 KiB random reads at QD1 on RDMA: $out"
others=$(grep -v '^rdma_read ' "$TB_DIR/$DK_ID.t1" | grep -v 'ios=0 bytes=0')
[ -z "$others" ]
res $? "no other file counted them" || printf '%s\n' "$others" | indent

# 2. Writes, and a discard, in their own files.
tfio rw --rw=randwrite --bs=4k --iodepth=4 --size=1M --randseed=681
on compute "blkdiscard -o 8M -l 1M /dev/$dev"
t=$(tele)
w=$(tq "$t" rdma_write ios) wb=$(tq "$t" rdma_write bytes) dc=$(tq "$t" rdma_discard ios) db=$(tq "$t" rdma_discard bytes)
n_eq "$w" 256 && n_eq "$wb" 1048576 && n_le 1 "$dc" && n_eq "$db" 1048576
res $? "1 MiB of 4 KiB writes: rdma_write ios=$w bytes=$wb; a 1 MiB discard: rdma_discard ios=$dc bytes=$db"

# 3. Credit waits: max_credits=1 at QD8.
dk_csnap "$dev"; c0=$(cstat credit_waits)
mc=$(on compute "cat $D/max_credits")
on compute "echo 1 >$D/max_credits"
tfio cw --rw=randread --bs=4k --iodepth=8 --size=4M --number_ios=200 --randseed=682
on compute "echo $mc >$D/max_credits"
dk_csnap "$dev"; c1=$(cstat credit_waits)
t=$(tele)
sum=0
for f in $FILES; do sum=$((sum + $(tq "$t" "$f" credit_waits))); done
n_le 1 "$sum" && n_eq "$sum" $((c1 - c0))
res $? "max_credits=1 at QD8: the telemetry's credit waits ($sum) are the disk's credit_waits ($c0 -> $c1)"

# 4. Reads on TCP land in telemetry_tcp_read.
on compute "echo tcp >$D/transport"
tr_wait tcp "$dev" 120 tcp >/dev/null
on compute "echo 1 >$D/telemetry_reset"
tfio tr --rw=randread --bs=4k --iodepth=1 --size=4M --number_ios=200 --randseed=683
tele >"$TB_DIR/$DK_ID.t4"
out=$(python3 "$TB_DIR/$DK_ID.check.py" "$TB_DIR/$DK_ID.tr.json" "$TB_DIR/$DK_ID.t4" tcp_read read)
res $? "200 4 KiB random reads at QD1 on TCP: $out"
on compute "echo rdma >$D/transport"
tr_wait rdma "$dev" 120 rdma >/dev/null

# 5. Off: nothing moves.
on compute "echo 0 >$D/telemetry"
a=$(tele)
tfio off --rw=randread --bs=4k --iodepth=4 --size=4M --number_ios=100 --randseed=684
b=$(tele)
on compute "echo 1 >$D/telemetry"
[ "$a" = "$b" ] && [ "$(on compute "cat $D/telemetry")" = 1 ]
res $? "telemetry 0: 100 reads moved nothing; back to 1"

# 6. The cost of recording, QD16 random reads, interleaved (a figure, not a test).
declare -A iops=()
for r in 1 2 3; do
  # Alternating which goes first, so that neither always runs on a cooler or warmer bed.
  for m in $( ((r % 2)) && echo 1 0 || echo 0 1); do
    on compute "echo $m >$D/telemetry"
    tfio "ov$m$r" --rw=randread --bs=4k --iodepth=16 --runtime=4 --time_based --size=8M --randseed=68$r
    iops[$m]+="$(python3 -c "import json; print(round(json.load(open('$TB_DIR/$DK_ID.ov$m$r.json'))['jobs'][0]['read']['iops']))") "
  done
done
on compute "echo 1 >$D/telemetry"
echo "  QD16 4 KiB random reads, IOPS with telemetry: ${iops[1]}; without: ${iops[0]}"

dk_csnap "$dev"
n_eq "$(cstat io_errors)" 0
res $? "no I/O error"
dk_unmap_rmmod 30 "$dev"
res $? "unmap and rmmod"
dk_cleanup
