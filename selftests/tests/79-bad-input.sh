# Malformed control-plane input: every entry of tests/data/bad-input.tsv (map_device and probe
# lines, each per-disk knob, and the fault-injection switches in debugfs: empty, whitespace,
# very long, binary, negative, overflowing (beyond 32 bits too, which debugfs's own u32 files
# truncate), hex, fractional, unknown and duplicate keys, out of range) is written once, as one
# write(2), in the compute VM.
#
# Acceptance, for every entry: the write fails with EINVAL; exactly the kernel log lines it
# caused name the problem (the words in the corpus); a knob keeps its value; a bad map line maps
# nothing and a bad unmap word unmaps nothing. Then: no kernel splat, and the disk still works.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
CORPUS=$TB_REPO/selftests/tests/data/bad-input.tsv
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d79 vol0
if ! res $? "target; insmod; map name=d79: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

# One pass over the corpus inside the VM, in one process: each entry is one write(2), and the
# kernel log lines it caused are read from /dev/kmsg (positioned at its end before the write).
cat >"$TB_DIR/$DK_ID.corpus.py" <<'PY'
import codecs, errno, fcntl, os, sys
corpus, dev, ctl = sys.argv[1:4]
def new_lines(fd):
    out = []
    while True:
        try:
            rec = os.read(fd, 8192).decode(errors="replace")
        except BlockingIOError:
            return out
        except OSError as e:
            if e.errno == errno.EPIPE:  # overwritten records: carry on
                continue
            return out
        out.append(rec.split(";", 1)[-1].strip())
i = 0
for line in open(corpus, encoding="utf-8"):
    if not line.strip() or line.startswith("#"):
        continue
    f, words, inp = line.rstrip("\n").split("\t", 2)
    data = codecs.escape_decode(inp.encode())[0]
    i += 1
    if f in ("map_device", "probe"):
        path = f"{ctl}/{f}"
    elif f.startswith("debugfs/"):
        path = f"/sys/kernel/debug/rdmadisk/{dev}/{f[len('debugfs/'):]}"
    else:
        path = f"/sys/block/{dev}/rdmadisk/{f}"
    try:
        before = open(path).read()
    except OSError:
        before = None
    kfd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    os.lseek(kfd, 0, os.SEEK_END)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
        rc, err = 0, ""
    except OSError as e:
        rc, err = 1, os.strerror(e.errno)
    os.close(fd)
    lines = [l for l in new_lines(kfd) if "rdmadisk" in l]
    os.close(kfd)
    try:
        after = open(path).read()
    except OSError:
        after = None
    hit = sum(1 for l in lines if words in l)
    einval = 1 if err == os.strerror(errno.EINVAL) else 0
    print(f"R {i} file={f} rc={rc} einval={einval} lines={len(lines)} hit={hit} same={int(before == after)} words={words}")
    if not (einval and hit):
        print(f"  input: {data[:60]!r}\n  error: {err}\n  log: {lines}")
print("DEVICES " + open(f"{ctl}/devices").read().replace("\n", ";"))
PY
out=$(dk_timed corpus 600 "python3 $TB_DIR/$DK_ID.corpus.py $CORPUS $dev $DK_CTL")
total=$(grep -c '^R ' <<<"$out")
bad=$(grep '^R ' <<<"$out" | grep -v 'rc=1 einval=1' | head -n 20)
echo "  $total corpus entries written"
[ "$total" -ge 150 ] && [ -z "$bad" ]
res $? "every entry ($total) fails with EINVAL" || printf '%s\n' "$bad" "$(grep -A3 '^R ' <<<"$out" | grep '^  ' | head -n 30)" | indent

nolog=$(grep '^R ' <<<"$out" | grep -E 'hit=0|lines=0' | head -n 20)
[ "$total" -ge 150 ] && [ -z "$nolog" ]
res $? "every entry logs a kernel line naming the problem (the knob, or map_device's key and fault)" || printf '%s\n' "$nolog" | indent

changed=$(grep '^R ' <<<"$out" | grep -v 'file=map_device\|file=probe\|file=unmap' | grep 'same=0' | head)
[ -z "$changed" ]
res $? "every knob keeps its value after a refused write" || printf '%s\n' "$changed" | indent

devs=$(sed -n 's/^DEVICES //p' <<<"$out")
[ "$devs" = "$dev d79 $DK_S:$DK_PORT vol0 live;" ]
res $? "no bad map line mapped anything and no bad unmap word unmapped (ctl/devices: '$devs')"

dk_fio after "--name=after --filename=/dev/$dev --rw=randwrite --bs=4k --size=512k --iodepth=4 --verify=crc32c --do_verify=1"
res $? "the disk still works: 512 KiB of verified writes: $FIO_SUM"
tr_splat_check
dk_cleanup
