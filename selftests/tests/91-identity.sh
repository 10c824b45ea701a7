# Stable identity: the export's UUID and serial reach the disk, udev names the disk after them,
# and the names follow the export, not the slot (docs/design.md, "Identity").
#
# The target serves vol0 with a configured uuid and serial, and vol1 with none (the target makes
# one and keeps it in vol1's sidecar file). In the compute VM, systemd-udevd runs with the
# shipped rule (userspace-tools/udev/60-rdmadisk.rules, from /run/udev/rules.d).
# Acceptance:
# - vol0 mapped: /sys/block/<dev>/{serial,uuid,wwid} (and rdmadisk/serial) show the configured
#   serial, uuid and rdmadisk.<uuid>; a rule run on the disk's "add" event found its
#   rdmadisk/ directory there (the module makes it inside device_add_disk, before that event;
#   made after it, as before, it was there too as a rule, a few microseconds later: this
#   check catches a directory made late, not that race);
# - after mkfs.ext4 -L: /dev/disk/by-id/rdmadisk-<serial>, /dev/disk/by-uuid/<fs uuid> and
#   /dev/disk/by-label/<label> resolve to the disk;
# - vol0 unmapped: its by-id link is gone; vol1 mapped takes vol0's old slot; vol0 mapped again
#   lands in another slot with the same serial and uuid, and all three links follow it there;
# - vol1's uuid is the one in its sidecar, its serial the uuid's first 16 hex digits; after a
#   target restart the sidecar and the disk's uuid are unchanged and the disk is live again;
# - the target restarted with another uuid for vol0: the disk refuses it, saying so, and is not
#   live 10 s later; the target as it was brings it back.
# timeout: 420

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

RULES=$TB_REPO/userspace-tools/udev/60-rdmadisk.rules
UUID0=5e1f0c2a-7b3d-4e8f-9a10-b2c3d4e5f601
SERIAL0=id91-vol0
LABEL=lbl91
back0=$(dk_backing vol0 32M)
back1=$(dk_backing vol1 16M)
targs=(--export "vol0=$back0,uuid=$UUID0,serial=$SERIAL0" --export "vol1=$back1")

# udev_stop: ends the udevd this test started (before the cleanup's rmmod).
udev_stop() { on compute "udevadm control --exit 2>/dev/null; rm -f /run/udev/rules.d/60-rdmadisk.rules /run/udev/rules.d/59-t91.rules /run/t91-*.add; true" >/dev/null; }
fail_out() { udev_stop; dk_cleanup; }

# What a disk's rdmadisk/ holds when udev runs the rules of its "add" event.
cat >"$TB_DIR/$DK_ID.59-t91.rules" <<'EOF'
ACTION=="add", SUBSYSTEM=="block", KERNEL=="rdmadisk[0-9]*", RUN+="/bin/sh -c 'ls /sys/block/%k/rdmadisk >/run/t91-%k.add'"
EOF
out=$(on compute "mkdir -p /run/udev/rules.d && cp $RULES /run/udev/rules.d/ && rm -f /run/t91-*.add &&
cp $TB_DIR/$DK_ID.59-t91.rules /run/udev/rules.d/59-t91.rules &&
/lib/systemd/systemd-udevd --daemon </dev/null >/dev/null 2>&1 && udevadm settle -t 30 && pgrep -x systemd-udevd" 2>&1)
res $? "systemd-udevd runs in the compute VM with the shipped rule (pid $(tail -n1 <<<"$out"))" || { fail_out; return 0 2>/dev/null || exit 0; }

dk_target_start "${targs[@]}" >/dev/null && dk_load && dk_map_disk d91a vol0
res $? "target (vol0 with uuid and serial, vol1 without); insmod; map vol0: /dev/${DK_DEV:-?}" || { fail_out; return 0 2>/dev/null || exit 0; }
devA=$DK_DEV

# ident DEV: "serial uuid wwid dirserial" as the disk's sysfs files show them ('-' for missing).
ident() {
  on compute "for f in serial uuid wwid rdmadisk/serial; do v=-; read -r v </sys/block/$1/\$f; printf '%s ' \"\${v:--}\"; done 2>/dev/null; echo"
}
# link NAME: where /dev/disk/NAME resolves, waiting up to 20 s for udev ('-' if it never does).
link() {
  on compute "for ((i = 0; i < 20; i++)); do udevadm settle -t 5; r=\$(readlink -e /dev/disk/$1) && { echo \$r; exit; }; sleep 1; done; echo -"
}

atadd=$(on compute "udevadm settle -t 30; grep -cx 'unmap\\|state\\|serial' /run/t91-$devA.add")
n_eq "${atadd:-0}" 3
res $? "on the add event of $devA, a udev rule found rdmadisk/ with its unmap, state and serial files (${atadd:-none} of 3)"
id=$(ident "$devA")
[ "$id" = "$SERIAL0 $UUID0 rdmadisk.$UUID0 $SERIAL0 " ]
res $? "/sys/block/$devA/{serial,uuid,wwid,rdmadisk/serial}: $id(want $SERIAL0 $UUID0 rdmadisk.$UUID0 $SERIAL0)"

fsuuid=$(on compute "mkfs.ext4 -q -F -L $LABEL /dev/$devA && udevadm settle -t 30 && blkid -s UUID -o value /dev/$devA")
res $? "mkfs.ext4 -L $LABEL /dev/$devA: filesystem uuid ${fsuuid:-?}"
l_id=$(link "by-id/rdmadisk-$SERIAL0"); l_uuid=$(link "by-uuid/$fsuuid"); l_lbl=$(link "by-label/$LABEL")
[ "$l_id" = "/dev/$devA" ] && [ "$l_uuid" = "/dev/$devA" ] && [ "$l_lbl" = "/dev/$devA" ]
res $? "by-id/rdmadisk-$SERIAL0 -> $l_id, by-uuid/$fsuuid -> $l_uuid, by-label/$LABEL -> $l_lbl (want /dev/$devA)"

# Unmap vol0, let vol1 take its slot, map vol0 again: it lands elsewhere.
on compute "udevadm settle -t 30; echo normal >/sys/block/$devA/rdmadisk/unmap" && dk_gone "$devA"
res $? "vol0 unmapped: /dev/$devA gone"
gone=$(on compute "udevadm settle -t 30; readlink /dev/disk/by-id/rdmadisk-$SERIAL0 || echo none")
[ "$gone" = none ]
res $? "its by-id link is gone with it ($gone)"
dk_map_disk d91c vol1
res $? "map vol1: /dev/${DK_DEV:-?} (vol0's old slot /dev/$devA)" || { fail_out; return 0 2>/dev/null || exit 0; }
devC=$DK_DEV
dk_map_disk d91b vol0
res $? "map vol0 again: /dev/${DK_DEV:-?}" || { fail_out; return 0 2>/dev/null || exit 0; }
devB=$DK_DEV
tr_set "$devB" loss_timeout_s=300 >/dev/null
idB=$(ident "$devB")
[ "$devB" != "$devA" ] && [ "$idB" = "$id" ]
res $? "vol0 now at /dev/$devB (was /dev/$devA) shows the same identity: $idB"
l_id=$(link "by-id/rdmadisk-$SERIAL0"); l_uuid=$(link "by-uuid/$fsuuid"); l_lbl=$(link "by-label/$LABEL")
[ "$l_id" = "/dev/$devB" ] && [ "$l_uuid" = "/dev/$devB" ] && [ "$l_lbl" = "/dev/$devB" ]
res $? "the links follow it: by-id -> $l_id, by-uuid -> $l_uuid, by-label -> $l_lbl (want /dev/$devB)"

# vol1: the uuid the target made and kept.
kept=$(on storage "cat $back1.rdmadisk-id")
idC=$(ident "$devC")
want1=$(tr -d - <<<"$kept" | cut -c1-16)
read -r s1 u1 _ <<<"$idC"
[ -n "$kept" ] && [ "$u1" = "$kept" ] && [ "$s1" = "$want1" ]
res $? "vol1 (no uuid configured) at /dev/$devC: uuid $u1, serial $s1 (sidecar $kept, serial $want1)"
l_c=$(link "by-id/rdmadisk-$want1")
[ "$l_c" = "/dev/$devC" ]
res $? "by-id/rdmadisk-$want1 -> $l_c"
tr_dmesg_mark
dk_target_start "${targs[@]}" >/dev/null && tr_wait restart "$devC" 120 any
res $? "target restarted: /dev/$devC is live again ($TR_WAIT)"
kept2=$(on storage "cat $back1.rdmadisk-id")
read -r _ u2 _ <<<"$(ident "$devC")"
[ "$kept2" = "$kept" ] && [ "$u2" = "$kept" ]
res $? "vol1's uuid survived the restart: sidecar $kept2, disk $u2"

# Another uuid for vol0 is another export: refused.
other=5e1f0c2a-7b3d-4e8f-9a10-b2c3d4e5f6ff
tr_dmesg_mark
dk_target_start --export "vol0=$back0,uuid=$other,serial=$SERIAL0" --export "vol1=$back1" >/dev/null
t0=$SECONDS
until line=$(tr_kmsg_since | grep "d91b: .*with uuid $other, not the $UUID0" | tail -n1); [ -n "$line" ] || ((SECONDS - t0 > 60)); do
  sleep 2
done
sleep 10
st=$(tr_get "$devB" state)
[ -n "$line" ] && [ "$st" != live ]
res $? "vol0 served with uuid $other: the disk refuses it: '${line#*] }'; 10 s later state $st (want not live)"
dk_target_start "${targs[@]}" >/dev/null && tr_wait back "$devB" 120 any
res $? "the target as it was: /dev/$devB is live again ($TR_WAIT)"

udev_stop
dk_unmap_rmmod 30 "$devB" "$devC"
res $? "unmap both; rmmod"
tr_splat_check
dk_cleanup
