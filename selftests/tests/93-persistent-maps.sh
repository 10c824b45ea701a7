# Persistent maps: rdmadisk.service's own ExecStart and ExecStopPost lines, run in the compute VM
# against a disks.conf of the test's (RDMADISK_DISKS_CONF), map and unmap its disks, and an
# fstab line with UUID= and _netdev mounts one of them.
#
# Acceptance:
# - the unit's ExecStart (its arguments, with the built rdmadiskctl for /usr/bin's) maps both
#   disks of the file: d93a (vol0, no key) and d93b (vol1, whose target asks for a key, given
#   by a secret_file= relative to the file), both live;
# - run again, it maps nothing twice: it says both are mapped already, and two disks are mapped;
# - a file with a good line and a bad one is refused with FILE:LINE (status 2) and maps
#   nothing, not even the good line;
# - mkfs.ext4 on d93b, then `mount -T FSTAB /mnt/t93` of a line `UUID=<its uuid> /mnt/t93
#   ext4 _netdev 0 0` mounts it; a file written, unmounted, mounted the same way again, reads
#   back the same;
# - the unit's ExecStopPost unmaps both: they leave /sys/block and /dev, and no disk is mapped.
# timeout: 300

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
CTL=${CARGO_TARGET_DIR:-$DK_UT/target}/release/rdmadiskctl
if ! (cd "$DK_UT" && nice -n 10 cargo build -q --release -p rdmadiskctl) >&2; then
  res 1 "build rdmadiskctl"; return 0 2>/dev/null || exit 0
fi
UNIT=$TB_REPO/userspace-tools/systemd/rdmadisk.service
# unit_cmd KEY: the unit's KEY= line as a command for the compute VM, with the built rdmadiskctl
# in place of the installed one (the program must be rdmadiskctl; its arguments are kept).
unit_cmd() {
  local line prog
  line=$(sed -n "s/^$1=//p" "$UNIT")
  [ "$(wc -l <<<"$line")" = 1 ] || return 1
  prog=${line%% *}
  [ "${prog##*/}" = rdmadiskctl ] || return 1
  echo "$CTL${line#"$prog"}"
}
START=$(unit_cmd ExecStart) STOP=$(unit_cmd ExecStopPost)
[ -n "$START" ] && [ -n "$STOP" ]
if ! res $? "the unit's ExecStart and ExecStopPost run rdmadiskctl: '${START#"$CTL "}', '${STOP#"$CTL "}'"; then
  return 0 2>/dev/null || exit 0
fi
CONF=$TB_DIR/$DK_ID.disks.conf BAD=$TB_DIR/$DK_ID.bad.conf FSTAB=$TB_DIR/$DK_ID.fstab
KEY=00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef
KEYF=$DK_BACKDIR/$DK_ID.key
# vm COMMAND: runs it in the compute VM; prints the output, then "rc=N".
vm() { on compute "$*; echo rc=\$?" 2>&1; }
rc_of() { sed -n 's/^rc=//p' <<<"$1" | tail -n1; }
# names: the map names of the mapped disks, sorted, on one line.
names() { on compute "cut -d' ' -f2 $DK_CTL/devices 2>/dev/null | sort | tr '\n' ' '"; }

back0=$(dk_backing vol0 32M) back1=$(dk_backing vol1 32M)
on storage "umask 077; echo $KEY >$KEYF" >/dev/null
on compute "umask 077; echo $KEY >$TB_DIR/$DK_ID.key
cat >$CONF <<EOF
# test 93's persistent maps
d93a addr=$DK_S export=vol0

d93b addr=$DK_S export=vol1 secret_file=$DK_ID.key queues=2   # the key is beside this file
EOF
cat >$BAD <<EOF
d93c addr=$DK_S export=vol0 ro
# a key the module does not take:
d93d addr=$DK_S export=vol1 transport=tcp
EOF" >/dev/null
# The unit loads the module with modprobe (ExecStartPre); the bed's is not installed: insmod.
dk_target_start --export "vol0=$back0" --export "vol1=$back1" --secret-file "vol1=$KEYF" >/dev/null && dk_load
res $? "[setup] target (vol0; vol1 with a key), module loaded" || { dk_cleanup; return 0 2>/dev/null || exit 0; }

out=$(vm "RDMADISK_DISKS_CONF=$CONF $START")
printf '%s\n' "$out" | indent
j=$(on compute "$CTL list --json")
python3 -c "import json,sys; d={e['name']: e for e in json.loads(sys.argv[1])['disks']}
assert sorted(d) == ['d93a', 'd93b'], d
assert all(e['state'] == 'live' for e in d.values()), d
assert d['d93a']['export'] == 'vol0' and d['d93b']['export'] == 'vol1', d" "$j"
listed=$?
[ "$(rc_of "$out")" = 0 ] && [ $listed = 0 ]
res $? "ExecStart with RDMADISK_DISKS_CONF: d93a and d93b mapped and live (rc=$(rc_of "$out"); mapped: $(names))" ||
  printf '%s\n' "$j" | indent
devb=$(python3 -c "import json,sys; print([e['device'] for e in json.loads(sys.argv[1])['disks'] if e['name'] == 'd93b'][0])" "$j" 2>/dev/null)
deva=$(python3 -c "import json,sys; print([e['device'] for e in json.loads(sys.argv[1])['disks'] if e['name'] == 'd93a'][0])" "$j" 2>/dev/null)

out=$(vm "RDMADISK_DISKS_CONF=$CONF $START")
[ "$(rc_of "$out")" = 0 ] && [ "$(grep -c 'already mapped' <<<"$out")" = 2 ] && [ "$(names)" = "d93a d93b " ]
res $? "ExecStart again maps nothing twice: $(grep -c 'already mapped' <<<"$out") already mapped, mapped: $(names)" ||
  printf '%s\n' "$out" | indent

out=$(vm "$CTL map-all --config $BAD")
[ "$(rc_of "$out")" = 2 ] && grep -q "$BAD:3: unknown key 'transport'" <<<"$out" && [ "$(names)" = "d93a d93b " ]
res $? "a bad line is refused with FILE:LINE (rc=$(rc_of "$out")) and maps nothing, not its good line: $(grep -m1 'bad.conf' <<<"$out")" ||
  printf '%s\n' "$out" | indent

# An fstab line with UUID= and _netdev, resolved by mount itself.
out=$(vm "mkfs.ext4 -q -F /dev/${devb:-none} >/dev/null && u=\$(blkid -p -s UUID -o value /dev/$devb) && echo uuid=\$u &&
echo \"UUID=\$u /mnt/t93 ext4 _netdev 0 0\" >$FSTAB && mkdir -p /mnt/t93 && mount -T $FSTAB /mnt/t93 &&
findmnt -n -o SOURCE /mnt/t93 && head -c 1M /dev/urandom >/mnt/t93/f && sha256sum /mnt/t93/f >$TB_DIR/$DK_ID.sum && umount /mnt/t93 &&
mount -T $FSTAB /mnt/t93 && sha256sum -c $TB_DIR/$DK_ID.sum && umount /mnt/t93")
DK_MOUNTS=/mnt/t93
uuid=$(sed -n 's/^uuid=//p' <<<"$out")
[ "$(rc_of "$out")" = 0 ] && [ -n "$uuid" ] && grep -qx "/dev/$devb" <<<"$out" && grep -q ': OK$' <<<"$out"
res $? "fstab 'UUID=$uuid /mnt/t93 ext4 _netdev 0 0': mount -T mounted /dev/$devb, a 1 MiB file read back after a remount" ||
  printf '%s\n' "$out" | indent

out=$(vm "RDMADISK_DISKS_CONF=$CONF $STOP")
[ "$(rc_of "$out")" = 0 ] && dk_gone "${deva:-none}" 30 && dk_gone "${devb:-none}" 30 && [ -z "$(names)" ]
res $? "ExecStopPost: $(grep -c '^unmapped' <<<"$out") unmapped, /dev/$deva and /dev/$devb gone, mapped: '$(names)'" ||
  printf '%s\n' "$out" | indent
dk_cleanup
