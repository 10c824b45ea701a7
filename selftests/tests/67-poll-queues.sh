# Poll queues: a disk mapped with queues=1 poll_queues=1 has a blk-mq poll queue whose RDMA
# completions are reaped by the task polling for them (io_uring IOPOLL: fio --hipri), not by
# the IB completion workqueue. Polled I/O must survive a switch to TCP and back, and an idle
# poll queue (nobody polling) must still answer its keepalives. A polled read the target never
# answers (--stall-sector, outside fio's ranges) must time out on its own clock while other
# polled reads complete around it, and fail once older than loss_timeout_s.
#
# Acceptance: the disk shows 2 hardware queues and io_poll 1; fio rounds with io_uring
# --hipri, crc32c-verified, run on RDMA with polled_completions rising; a switch to TCP and
# back under them loses nothing (every round verified, tcp_ios then rdma_ios rising, and
# polled_completions rising again on RDMA); a pattern written through the disk is in the
# backing file; after 2.5 keepalive intervals with no I/O the connections are still the
# same (no reconnect) and keepalives were answered; io_errors=0. Then, with io_timeout_ms=2000,
# loss_timeout_s=6 and keepalives out of the way (600000), one polled read of the stalled
# sector and 16 polled reads elsewhere go on an io_uring whose owner reaps it only every 2 s
# (the other reads' completions wait in the poll queue's CQ meanwhile, as they do for any
# poller that is busy elsewhere): the stalled read fails with EIO within loss_timeout_s + 2 x
# io_timeout_ms + 8 s, the other reads go on, and the driver counted timeouts. (Any completion
# a timeout's reap found used to spare the stalled request a timer period.) Unmap and rmmod
# work; no kernel splat.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
SW=${RDT67_SWITCH_S:-60}
KA_MS=2000
tr_dmesg_mark

back=$(dk_backing vol0 16M)
# Sector 24576 (12 MiB): beyond fio's ranges (0-2 and 4-6 MiB) and the backing check's (8 MiB).
STALL=24576
dk_target_start --export "vol0=$back" --stall-sector $STALL >/dev/null && dk_load && dk_map_disk d67 vol0 "queues=1 poll_queues=1"
if ! res $? "target; insmod; map name=d67 queues=1 poll_queues=1: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

out=$(on compute "echo hw=\$(ls /sys/block/$dev/mq | wc -l) poll=\$(cat /sys/block/$dev/queue/io_poll)
dmesg | grep -o 'as $dev: .*' | tail -n1")
printf '%s\n' "$out" | indent
[ "$(word hw "$out")" = 2 ] && [ "$(word poll "$out")" = 1 ] && grep -q '2 queue(s) (1 polled)' <<<"$out"
res $? "2 hardware queues, io_poll 1, the map's log line says 1 of 2 is polled"

# 1. Polled I/O on RDMA.
HIPRI="--ioengine=io_uring --hipri=1"
read -r p0 r0 <<<"$(tr_stat "$dev" polled_completions rdma_ios)"
tr_rounds_start p "$(tr_fio_args p67) $HIPRI"
tr_wait io "$dev" 120 rdma polled_completions "${p0:-0}"
if ! res $? "fio rounds (io_uring, --hipri) under way over RDMA, polled_completions ${p0:-?} -> $(word polled_completions "$TR_WAIT")"; then
  tr_rounds_stop p 300 >/dev/null; dk_cleanup; return 0 2>/dev/null || exit 0
fi

# 2. To TCP and back, under the polled rounds.
read -r _ t1 <<<"$(tr_stat "$dev" rdma_ios tcp_ios)"
tr_set "$dev" transport=tcp && tr_wait totcp "$dev" "$SW" tcp tcp_ios "${t1:-0}"
res $? "transport=tcp: active_transport tcp and tcp_ios rising within $SW s: $TR_WAIT"
sleep 4
read -r p2 r2 <<<"$(tr_stat "$dev" polled_completions rdma_ios)"
tr_set "$dev" transport=auto && tr_wait tordma "$dev" "$SW" rdma polled_completions "${p2:-0}"
res $? "transport=auto: back on RDMA, polled_completions rising again (${p2:-?} -> $(word polled_completions "$TR_WAIT")) within $SW s: $TR_WAIT"
sleep 4
tr_rounds_stop p 300
res $? "fio --hipri: every round finished with no error, data verified: $FIO_SUM"

dk_check_backing "$dev" "$back" 8 1
res $? "the backing file holds what was written, where it was written: $DK_BACKING"

# 3. An idle poll queue: its keepalives are reaped by the health check.
read -r k0 c0 <<<"$(tr_stat "$dev" keepalives reconnects)"
tr_set "$dev" keepalive_ms=$KA_MS >/dev/null
sleep $((KA_MS * 5 / 2000))
read -r k1 c1 <<<"$(tr_stat "$dev" keepalives reconnects)"
st=$(tr_get "$dev" state)
n_gt "$k1" "$((${k0:-0} + 1))" && n_eq "$c1" "${c0:-x}" && [ "$st" = live ]
res $? "idle for $((KA_MS * 5 / 2000)) s with keepalive_ms=$KA_MS: keepalives ${k0:-?} -> $k1 answered, reconnects ${c0:-?} -> $c1, state $st"
tr_set "$dev" keepalive_ms=10000 >/dev/null

dk_csnap "$dev"
dk_show client "$DK_CS"
n_eq "$(cstat io_errors)" 0 && n_gt "$(cstat polled_completions)" 0
res $? "io_errors=$(cstat io_errors), polled_completions=$(cstat polled_completions), rdma_ios=$(cstat rdma_ios) tcp_ios=$(cstat tcp_ios)"

# 4. A polled read the target never answers, beside polled reads that complete but are reaped
# late (lazy.py: one non-spinning poll pass every REAP_S seconds).
cat >"$TB_DIR/$DK_ID.lazy.py" <<'PY'
import ctypes, mmap, os, struct, sys, time
# lazy.py DEV STALL_OFF OTHER_OFF DEPTH REAP_S LIMIT_S: one polled read at STALL_OFF (which the
# target never answers) and DEPTH polled reads at OTHER_OFF.., on an io_uring with IOPOLL.
# The ring is reaped only every REAP_S seconds (one non-spinning poll pass): the other reads'
# completions wait in the poll queue's CQ meanwhile, and each reaped read is sent again.
dev, stall_off, other_off, depth, reap_s, limit_s = sys.argv[1], *map(int, sys.argv[2:5]), *map(float, sys.argv[5:7])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SETUP, ENTER, IOPOLL, GETEVENTS, OP_READ, BS = 425, 426, 1, 1, 22, 4096
params = ctypes.create_string_buffer(120)
struct.pack_into("I", params, 8, IOPOLL)
ring = libc.syscall(SETUP, ctypes.c_uint(64), params)
if ring < 0:
    sys.exit(f"io_uring_setup: {os.strerror(ctypes.get_errno())}")
p = struct.unpack_from("7I", params, 0)
sq_entries, cq_entries = p[0], p[1]
sq = struct.unpack_from("7I", params, 40)   # head tail mask entries flags dropped array
cq = struct.unpack_from("6I", params, 80)   # head tail mask entries overflow cqes
sqm = mmap.mmap(ring, sq[6] + sq_entries * 4, offset=0)
cqm = mmap.mmap(ring, cq[5] + cq_entries * 16, offset=0x8000000)
sqes = mmap.mmap(ring, sq_entries * 64, offset=0x10000000)
fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
bufs = mmap.mmap(-1, BS * (depth + 1))
base = ctypes.addressof(ctypes.c_char.from_buffer(bufs))
def u32(m, off, v=None):
    if v is None:
        return struct.unpack_from("I", m, off)[0]
    struct.pack_into("I", m, off, v)
pending = []
def queue(slot, off):
    pending.append((slot, off))
def submit():
    tail = u32(sqm, sq[1])
    for slot, off in pending:
        i = tail & u32(sqm, sq[2])
        sqe = bytearray(64)
        struct.pack_into("<BBHiQQII", sqe, 0, OP_READ, 0, 0, fd, off, base + slot * BS, BS, 0)
        struct.pack_into("Q", sqe, 32, slot + 1)
        sqes[i * 64:(i + 1) * 64] = bytes(sqe)
        u32(sqm, sq[6] + i * 4, i)
        tail += 1
    n = len(pending)
    pending.clear()
    u32(sqm, sq[1], tail)
    if n and libc.syscall(ENTER, ring, n, 0, 0, None, 0) < 0:
        sys.exit(f"io_uring_enter: {os.strerror(ctypes.get_errno())}")
queue(0, stall_off)
for s in range(1, depth + 1):
    queue(s, other_off + (s - 1) * BS)
t0 = time.monotonic()
submit()
others = errors = 0
stall = None
while stall is None and time.monotonic() - t0 < limit_s:
    time.sleep(reap_s)
    libc.syscall(ENTER, ring, 0, 0, GETEVENTS, None, 0)
    head, tail = u32(cqm, cq[0]), u32(cqm, cq[1])
    while head != tail:
        user, res, _ = struct.unpack_from("QiI", cqm, cq[5] + (head & u32(cqm, cq[2])) * 16)
        head += 1
        slot = user - 1
        if slot == 0:
            stall = (res, int((time.monotonic() - t0) * 1000))
        elif res == BS:
            others += 1
            queue(slot, other_off + (slot - 1) * BS)
        else:
            errors += 1
    u32(cqm, cq[0], head)
    submit()
res, ms = stall if stall else ("none", int((time.monotonic() - t0) * 1000))
print(f"STALL res={res} ms={ms} others={others} other_errors={errors}")
PY
IO_MS=2000 LOSS_S=6
tr_set "$dev" io_timeout_ms=$IO_MS loss_timeout_s=$LOSS_S keepalive_ms=600000
res $? "[stuck] io_timeout_ms=$IO_MS loss_timeout_s=$LOSS_S keepalive_ms=600000"
read -r to0 ie0 <<<"$(tr_stat "$dev" timeouts io_errors)"
out=$(dk_timed lazy 150 "python3 $TB_DIR/$DK_ID.lazy.py /dev/$dev $((STALL * 512)) $((10 << 20)) 16 2 90")
printf '%s\n' "$out" | indent
line=$(grep '^STALL ' <<<"$out")
read -r to1 ie1 <<<"$(tr_stat "$dev" timeouts io_errors)"
limit=$(((LOSS_S + 8) * 1000 + 2 * IO_MS))
[ "$(word res "$line")" = -5 ] && is_num "$(word ms "$line")" && (( $(word ms "$line") <= limit )) &&
  n_gt "$(word others "$line")" 16 && n_eq "$(word other_errors "$line")" 0 && n_gt "$to1" "${to0:-x}"
res $? "[stuck] the polled read of sector $STALL failed (res $(word res "$line"), want -5: EIO) after $(word ms "$line") ms (limit $limit) while $(word others "$line") other polled reads completed (errors: $(word other_errors "$line")); timeouts ${to0:-?} -> ${to1:-?}, io_errors ${ie0:-?} -> ${ie1:-?}"
tr_set "$dev" io_timeout_ms=30000 loss_timeout_s=60 keepalive_ms=10000 >/dev/null

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
tr_splat_check
dk_cleanup
