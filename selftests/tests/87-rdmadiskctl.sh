# rdmadiskctl drives a disk end to end against the real module: map, list, show, set,
# failover, stats, top, unmap; and says clearly what is wrong when something is.
#
# Acceptance:
# - before insmod, `list` says the module is not loaded (exit 3);
# - `map` prints the new /dev/rdmadiskN; `list --json` and `show --json` parse and name it,
#   with the map keys read back;
# - `set` writes a knob the module then shows; a value out of range is refused before it is
#   written, naming the valid values (exit 2); an unknown knob lists the knobs; an unknown disk
#   lists what is mapped (exit 4); a write as an unprivileged user is "permission denied"
#   (exit 5);
# - after `stats --reset`, fio's 4 KiB random reads at QD1: `stats --json` parses, its RDMA
#   read count is fio's completed I/O count, its histogram holds as many samples, and its p50
#   and p99 buckets are within one bucket of fio's clat p50 and p99;
# - `failover --to tcp --wait` returns once I/O runs on TCP, and `--to rdma --wait` once it is
#   back on RDMA;
# - `top`, under tmux with fio running, shows the disk, its transport and a nonzero IOPS
#   figure, and exits after --iterations;
# - `completions bash` is valid bash; `man` is a roff page;
# - `unmap` removes the disk; after rmmod, `list` says the module is not loaded again.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
CTL=${CARGO_TARGET_DIR:-$DK_UT/target}/release/rdmadiskctl
if [ ! -x "$CTL" ] && ! (cd "$DK_UT" && nice -n 10 cargo build -q --release -p rdmadiskctl) >&2; then
  res 1 "build rdmadiskctl"; return 0 2>/dev/null || exit 0
fi
# ctl ARGS: runs rdmadiskctl in the compute VM; prints its output, then "rc=N".
ctl() { on compute "$CTL $*; echo rc=\$?" 2>&1; }
rc_of() { sed -n 's/^rc=//p' <<<"$1" | tail -n1; }

out=$(ctl list)
[ "$(rc_of "$out")" = 3 ] && grep -q 'rdmadisk is not loaded' <<<"$out"
res $? "before insmod: list says the module is not loaded (exit 3): $(head -n1 <<<"$out")"

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load
out=$(ctl map --name d87 --addr "$DK_S" --export vol0 --queues 2)
dev=$(grep -o '^/dev/rdmadisk[0-9]*$' <<<"$out" | head -n1)
dev=${dev#/dev/}
[ "$(rc_of "$out")" = 0 ] && [ -n "$dev" ]
if ! res $? "map --name d87 --addr $DK_S --export vol0 --queues 2 printed /dev/${dev:-?}"; then
  printf '%s\n' "$out" | indent; dk_cleanup; return 0 2>/dev/null || exit 0
fi
DK_DEV=$dev

j=$(on compute "$CTL list --json")
python3 -c "import json,sys; d=json.loads(sys.argv[1])['disks']; x=[e for e in d if e['name']=='d87'][0]; assert x['device']=='$dev' and x['state']=='live' and x['export']=='vol0', x" "$j"
res $? "list --json parses and names $dev (d87, vol0, live)" || printf '%s\n' "$j" | indent
j=$(on compute "$CTL show d87 --json")
python3 -c "import json,sys; s=json.loads(sys.argv[1]); flat={k: v for g in s.values() if isinstance(g, dict) for k, v in g.items()}; assert flat['queues']=='2' and flat['poll_queues']=='0' and flat['tcp_port']=='$DK_TCP_PORT' and flat['max_credits']=='64', flat" "$j"
res $? "show d87 --json parses, the map keys read back (queues 2, poll_queues 0, tcp_port $DK_TCP_PORT)" || printf '%s\n' "$j" | head -c 600 | indent

# set, and what a bad one says.
out=$(ctl set "$dev" max_credits 32)
[ "$(rc_of "$out")" = 0 ] && [ "$(on compute "cat /sys/block/$dev/rdmadisk/max_credits")" = 32 ]
res $? "set $dev max_credits 32: the module shows 32 ($(head -n1 <<<"$out"))"
out=$(ctl set d87 max_credits 999)
[ "$(rc_of "$out")" = 2 ] && grep -q 'expected a whole number from 1 to 64' <<<"$out" &&
  [ "$(on compute "cat /sys/block/$dev/rdmadisk/max_credits")" = 32 ]
res $? "set max_credits 999 refused before the write, naming the range (exit 2): $(head -n1 <<<"$out")"
out=$(ctl set d87 no_such_knob 1)
[ "$(rc_of "$out")" = 2 ] && grep -q 'failover_threshold' <<<"$out"
res $? "an unknown knob lists the knobs (exit 2): $(head -n1 <<<"$out")"
out=$(ctl show nosuchdisk)
[ "$(rc_of "$out")" = 4 ] && grep -q 'd87' <<<"$out"
res $? "an unknown disk says what is mapped (exit 4): $(head -n1 <<<"$out")"
out=$(on compute "setpriv --reuid=65534 --regid=65534 --clear-groups $CTL set d87 max_credits 16; echo rc=\$?" 2>&1)
[ "$(rc_of "$out")" = 5 ] && grep -qi 'permission denied' <<<"$out" &&
  [ "$(on compute "cat /sys/block/$dev/rdmadisk/max_credits")" = 32 ]
res $? "set as an unprivileged user: permission denied (exit 5): $(head -n1 <<<"$out")"
ctl set d87 max_credits 64 >/dev/null

# stats against fio.
on compute "echo 2 >/sys/block/$dev/queue/nomerges; udevadm settle; $CTL stats d87 --reset >/dev/null"
on compute "fio --name=st --filename=/dev/$dev --ioengine=libaio --direct=1 --rw=randread --bs=4k --iodepth=1 --size=8M --number_ios=300 --randseed=87 --output-format=json --output=$TB_DIR/$DK_ID.st.json" >/dev/null
on compute "$CTL stats d87 --json" >"$TB_DIR/$DK_ID.stats.json"
on compute "$CTL stats d87" | head -n 40 | indent
out=$(python3 - "$TB_DIR/$DK_ID.st.json" "$TB_DIR/$DK_ID.stats.json" <<'PY'
import json, sys
fio = json.load(open(sys.argv[1]))["jobs"][0]["read"]
st = json.load(open(sys.argv[2]))
r = st["telemetry"]["rdma"]["read"]
def bucket_of(us):
    return 0 if us < 2 else min(int(us).bit_length() - 1, 25)
ok = r["ios"] == fio["total_ios"] and sum(c for _, c in r["lat_us"]["buckets"]) == r["ios"]
msg = [f"ios {r['ios']} (fio {fio['total_ios']}), mean {r['lat_us']['mean_us']} us (fio clat {fio['clat_ns']['mean'] / 1000:.0f})"]
for name, key in (("p50", "50.000000"), ("p99", "99.000000")):
    f_us = fio["clat_ns"]["percentile"][key] / 1000
    b = r["lat_us"][name]
    ok = ok and abs(b["bucket"] - bucket_of(f_us)) <= 1
    msg.append(f"{name}: {b['low_us']}-{b['high_us']} us (fio {f_us:.0f} us)")
print("; ".join(msg))
sys.exit(0 if ok else 1)
PY
)
res $? "stats --json after 300 fio reads: $out"

# failover, both ways.
out=$(ctl failover d87 --to tcp --wait 120)
[ "$(rc_of "$out")" = 0 ] && [ "$(on compute "cat /sys/block/$dev/rdmadisk/active_transport")" = tcp ]
res $? "failover --to tcp --wait 120: on TCP ($(head -n1 <<<"$out"))"
out=$(ctl failover d87 --to rdma --wait 120)
[ "$(rc_of "$out")" = 0 ] && [ "$(on compute "cat /sys/block/$dev/rdmadisk/active_transport")" = rdma ]
res $? "failover --to rdma --wait 120: back on RDMA ($(head -n1 <<<"$out"))"
ctl failover d87 --to auto >/dev/null

# top under tmux, with fio running.
dk_fio_bg top "--name=top --filename=/dev/$dev --rw=randread --bs=4k --iodepth=4 --size=8M --time_based --runtime=20"
screen=$(on compute "export TERM=xterm-256color; S=/tmp/rdmadiskctl-top.sock; rm -f \$S
tmux -S \$S new-session -d -x 120 -y 12 \"$CTL top --interval-ms 1000 --iterations 8; echo exit=\\\$?; sleep 30\"
sleep 5; tmux -S \$S capture-pane -p; for i in \$(seq 30); do tmux -S \$S capture-pane -p | grep -q '^exit=' && break; sleep 1; done
echo ---; tmux -S \$S capture-pane -p | grep '^exit='; tmux -S \$S kill-server")
dk_fio_wait top 60 >/dev/null
printf '%s\n' "$screen" | indent
row=$(grep "$dev " <<<"$screen" | head -n1)
grep -q 'd87' <<<"$row" && grep -q 'rdma' <<<"$row" && grep -Eq ' [1-9][0-9]* ' <<<"$row" && grep -q '^exit=0$' <<<"$screen"
res $? "top under tmux: a row for $dev (d87, rdma, IOPS above 0), and it exits 0 after --iterations"

out=$(on compute "$CTL completions bash | bash -n && echo bash-ok; $CTL man | head -n 5 | grep -c '^\.TH'")
grep -q bash-ok <<<"$out" && grep -qx 1 <<<"$(tail -n1 <<<"$out")"
res $? "completions bash is valid bash; man prints a roff page"

out=$(ctl unmap d87)
[ "$(rc_of "$out")" = 0 ] && dk_gone "$dev" 30
res $? "unmap d87: $dev is gone"
on compute "rmmod rdmadisk"
out=$(ctl list)
[ "$(rc_of "$out")" = 3 ]
res $? "after rmmod: list says the module is not loaded (exit 3)"
dk_cleanup
