# The sysfs ABI document against what a loaded module really creates.
#
# Documentation/ABI/testing/{sysfs-class-rdmadisk,sysfs-block-rdmadisk,debugfs-rdmadisk} list
# every file of /sys/class/rdmadisk/ctl/, /sys/block/rdmadiskN/rdmadisk/ and
# /sys/kernel/debug/rdmadisk/rdmadiskN/, with (RO), (WO) or (RW). Two disks are mapped (one
# with a poll queue, one read-only) and every file of those directories is listed in the VM.
#
# Acceptance: every file there is documented (no undocumented file), every documented entry
# names a file that is there (no stale entry), and each file's permission bits say what the
# document says (read-only, write-only or read-write); every map key reads back as it was
# given (name, export, address, port, tcp_port, queues, poll_queues, ro, secret, target_secret),
# and a first mapping's session is 1.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
ABI=$TB_REPO/Documentation/ABI/testing

back0=$(dk_backing vol0 16M) back1=$(dk_backing vol1 16M)
dk_target_start --export "vol0=$back0" --export "vol1=$back1" >/dev/null && dk_load &&
  dk_map_disk d69a vol0 "queues=2 poll_queues=1" && d0=$DK_DEV &&
  dk_map_disk d69b vol1 "ro" && d1=$DK_DEV
if ! res $? "target; insmod; map d69a (queues=2 poll_queues=1) as /dev/${d0:-?} and d69b (ro) as /dev/${d1:-?}"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi

# Every file of the three directories, with its permission bits, as "MODE PATH" (the disk
# number as <N>). The class device's own files (uevent, power/, subsystem) are the driver
# core's, not ours.
files=$(on compute "mount -t debugfs none /sys/kernel/debug 2>/dev/null
for d in /sys/class/rdmadisk/ctl/ /sys/block/$d0/rdmadisk/ /sys/block/$d1/rdmadisk/ /sys/kernel/debug/rdmadisk/$d0/ /sys/kernel/debug/rdmadisk/$d1/; do
  find -L \$d -maxdepth 1 -type f -printf '%m %p\n'
done | grep -v '/ctl/uevent\$' | sed 's/rdmadisk[0-9][0-9]*/rdmadisk<N>/g' | sort -u")
n=$(wc -l <<<"$files")
n_le 60 "$n"
res $? "$n distinct files in ctl/, the disks' rdmadisk/ and their debugfs directories" || printf '%s\n' "$files" | head | indent

cat >"$TB_DIR/$DK_ID.abi.py" <<'PY'
import glob, os, re, sys
abi = sys.argv[1]
# The placeholders of the document, and the names each stands for.
expand = {
    "<N>": "<N>",
    "<transport>": "(?:rdma|tcp)",
    "<op>": "(?:read|write|flush|discard|write_zeroes)",
    "<fault>": "(?:drop_response|delay_response|corrupt_read|corrupt_write_crc|fail_mr_reg|qp_error|fail_tcp_send|short_tcp_send|fail_connect)",
}
entries = []
for f in sorted(glob.glob(os.path.join(abi, "*rdmadisk"))):
    text = open(f).read()
    for block in text.split("What:")[1:]:
        what = block.split("\n", 1)[0].strip()
        m = re.search(r"Description:\s*\((RO|WO|RW)\)", block)
        if not m:
            print(f"FAIL {os.path.basename(f)}: {what} has no (RO)/(WO)/(RW)")
            continue
        rx = re.escape(what)
        for k, v in expand.items():
            rx = rx.replace(re.escape(k), v)
        entries.append((what, m.group(1), re.compile(rx + "$"), os.path.basename(f)))
seen = {e[0]: 0 for e in entries}
for line in sys.stdin.read().splitlines():
    mode, path = line.split(" ", 1)
    m = [e for e in entries if e[2].match(path)]
    if not m:
        print(f"FAIL undocumented: {path} ({mode})")
        continue
    what, kind, _, doc = m[0]
    seen[what] += 1
    owner = int(mode, 8) >> 6
    want = {"RO": 4, "WO": 2, "RW": 6}[kind]
    if owner & 6 != want:
        print(f"FAIL {path}: mode {mode}, but {doc} says ({kind})")
for what, k in seen.items():
    if k == 0:
        print(f"FAIL stale: {what} is documented but not there")
print(f"{len(entries)} documented entries, {sum(seen.values())} files matched")
PY
out=$(python3 "$TB_DIR/$DK_ID.abi.py" "$ABI" <<<"$files")
printf '%s\n' "$out" | indent
! grep -q FAIL <<<"$out" && grep -q 'documented entries' <<<"$out"
res $? "no undocumented file, no stale entry, every file's mode as documented"

rb=$(on compute "cd /sys/block/$d0/rdmadisk; for f in name export address port tcp_port queues poll_queues ro secret target_secret session_id; do printf '%s=%s ' \$f \$(cat \$f); done; echo
cd /sys/block/$d1/rdmadisk; for f in name queues poll_queues ro secret target_secret session_id; do printf '%s=%s ' \$f \$(cat \$f); done")
printf '%s\n' "$rb" | indent
l0=$(head -n1 <<<"$rb") l1=$(tail -n1 <<<"$rb")
[ "$l0" = "name=d69a export=vol0 address=$DK_S:$DK_PORT port=$DK_PORT tcp_port=$DK_TCP_PORT queues=2 poll_queues=1 ro=0 secret=none target_secret=none session_id=1 " ] &&
  [ "$l1" = "name=d69b queues=1 poll_queues=0 ro=1 secret=none target_secret=none session_id=1 " ]
res $? "every map key reads back as given"
dk_cleanup
