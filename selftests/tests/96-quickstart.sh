# The README's quick start ("On real hosts", the three blocks after "<!-- quickstart: NAME -->"),
# run as it is written: the build block on the host, the storage block in the storage VM, the
# compute block in the compute VM, each line in turn, stopping at the first that fails.
#
# What the bed cannot do as a real host would, and what the test does instead:
# - the build block's install goes to a DESTDIR (`make install-userspace` for real, staged),
#   which is then unpacked into each VM's root (the VMs' /usr, /lib, /etc and /srv are
#   copy-on-write overlays of the host's, thrown away with the VM); its `make KDIR=...` line,
#   which needs the running kernel's tree, is the bed's module, built by `make module` against
#   the test kernel;
# - the VMs run no systemd: `systemctl enable --now UNIT` is a stand-in that runs the installed
#   unit's ExecStartPre, then its ExecStart with NOTIFY_SOCKET set, and returns on its
#   READY=1, as Type=notify does (its sandbox is not applied);
# - $EDITOR is `true`: the quick start's addresses are the bed's (storage 192.0.2.2, compute
#   192.0.2.1);
# - the key the storage block makes is copied into the compute VM's working directory, as the
#   README says to do, with the module beside it.
#
# Acceptance:
# - the build block stages both binaries, their man pages, the unit (pointing at the
#   installed binary) and target.quickstart.toml;
# - the storage block runs to its end: the key, the image, the configuration checked, the
#   target serving (READY=1 from the unit's ExecStart);
# - the compute block runs to its end: the module loaded, the disk mapped with the key,
#   ext4 made and mounted on /mnt;
# - data0 is listed by rdmadiskctl, keyed, on RDMA; a 4 MiB file written there reads back
#   the same after an unmount and a mount;
# - unmap and rmmod work, and the target stops on SIGTERM.
# timeout: 420

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

QS=$TB_DIR/$DK_ID.qs STAGE=$TB_DIR/$DK_ID.qs/root
rm -rf "$QS" && mkdir -p "$QS/bin" "$QS/storage" "$QS/compute" || exit 1
# block NAME: the lines of the README's fenced block after "<!-- quickstart: NAME -->".
block() {
  awk -v m="<!-- quickstart: $1 -->" '
    $0 == m { f = 1; next }
    f == 1 && /^```sh$/ { f = 2; next }
    f == 2 && /^```$/ { exit }
    f == 2 { print }' "$TB_REPO/README.md"
}
# The VMs' shell, as root's on a real host: /usr/local first, the stand-ins before it.
VPATH="$QS/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STORAGE_VM_PID=$QS/target.pid
qs_cleanup() {
  on storage "p=\$(cat $STORAGE_VM_PID 2>/dev/null) && kill \$p 2>/dev/null
for i in \$(seq 50); do kill -0 \$p 2>/dev/null || break; sleep 0.2; done; kill -9 \$p 2>/dev/null
rm -rf /etc/rdmadisk/target.toml /etc/rdmadisk/hosts /srv/rdmadisk/vol0.img /srv/rdmadisk/vol0.img.rdmadisk-id; true" >/dev/null
  on compute "! mountpoint -q /mnt || umount /mnt; rm -f /etc/rdmadisk/host.key; true" >/dev/null
  dk_cleanup
  if [ -f "$QS/files" ]; then
    for r in storage compute; do
      on "$r" "cd / && xargs -d '\n' rm -f <$QS/files; true" >/dev/null
    done
  fi
}

# --- The build block, on the host.
b=$(block build) s=$(block storage) c=$(block compute)
[ -n "$b" ] && [ -n "$s" ] && [ -n "$c" ]
if ! res $? "the README has the three quick-start blocks (build $(wc -l <<<"$b") lines, storage $(wc -l <<<"$s"), compute $(wc -l <<<"$c"))"; then
  return 0 2>/dev/null || exit 0
fi
rc=0
while IFS= read -r line; do
  case $line in
    "make KDIR="*) echo "  [bed] $line: the bed's module instead ($DK_KO)" ;;
    *) echo "  [host] \$ $line"
       (cd "$TB_REPO" && DESTDIR=$STAGE bash -ec "$line") 2>&1 | tail -n 5 | indent "  "
       rc=${PIPESTATUS[0]}; [ "$rc" = 0 ] || break ;;
  esac
done <<<"$b"
unit=$STAGE/lib/systemd/system/rdmadisk-target.service
[ $rc = 0 ] && [ -x "$STAGE/usr/local/bin/rdmadisk-target" ] && [ -x "$STAGE/usr/local/bin/rdmadiskctl" ] &&
  [ -f "$STAGE/usr/local/share/man/man1/rdmadiskctl.1" ] && [ -f "$STAGE/usr/local/share/man/man1/rdmadisk-target.1" ] &&
  grep -q '^ExecStart=/usr/local/bin/rdmadisk-target ' "$unit" &&
  [ -f "$STAGE/usr/local/share/doc/rdmadisk/target.quickstart.toml" ]
if ! res $? "build block: make install-userspace staged $(find "$STAGE" -type f 2>/dev/null | wc -l) files: both binaries in /usr/local/bin, their man pages, the unit running /usr/local/bin/rdmadisk-target, target.quickstart.toml (rc=$rc)"; then
  return 0 2>/dev/null || exit 0
fi
(cd "$STAGE" && find . -type f -o -type l) >"$QS/files"
for r in storage compute; do
  # The stage's top directories, not ".": the VM's / is read-only (only what is under it is an
  # overlay); directories there already keep their own modes and times.
  on "$r" "cd $STAGE && tar -cf - * | tar -C / -xf - --keep-directory-symlink --no-overwrite-dir --no-same-owner" || rc=1
done
res $rc "installed into both VMs' roots from the stage" || { qs_cleanup; return 0 2>/dev/null || exit 0; }

# The systemctl stand-in (the VMs run no systemd): enable --now UNIT runs the installed
# unit's ExecStartPre, then its ExecStart in the background with NOTIFY_SOCKET, and returns
# once it sends READY=1 (Type=notify), at most 120 s.
cat >"$QS/bin/systemctl" <<EOF
#!/bin/bash
[ "\$1 \$2" = "enable --now" ] && [ \$# = 3 ] || { echo "systemctl (test 96's stand-in): only enable --now UNIT" >&2; exit 1; }
u=/lib/systemd/system/\${3%.service}.service
[ -f "\$u" ] || { echo "systemctl: no unit \$u" >&2; exit 1; }
while IFS= read -r pre; do
  echo "systemctl: ExecStartPre=\$pre"; \$pre || exit 1
done < <(sed -n 's/^ExecStartPre=//p' "\$u")
start=\$(sed -n 's/^ExecStart=//p' "\$u"); [ -n "\$start" ] || exit 1
d=\$(sed -n 's/^RuntimeDirectory=//p' "\$u"); [ -z "\$d" ] || mkdir -p "/run/\$d"
sock=/run/rdmadisk-qs-notify.sock; rm -f "\$sock"  # not on 9p: no unix sockets there
python3 - "\$sock" >$QS/notify.out 2>&1 <<'PY' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
s.settimeout(120)
while True:
    m = s.recv(4096).decode()
    print(m.replace("\n", " "), flush=True)
    if "READY=1" in m.split("\n"):
        sys.exit(0)
PY
w=\$!
for i in \$(seq 50); do [ -S "\$sock" ] && break; sleep 0.1; done
echo "systemctl: ExecStart=\$start"
NOTIFY_SOCKET=\$sock setsid \$start >$QS/target.log 2>&1 </dev/null &
echo \$! >$STORAGE_VM_PID
wait \$w
EOF
chmod +x "$QS/bin/systemctl"

# run_block ROLE DIR TEXT: TEXT's lines in ROLE's VM, in DIR, each echoed, stopping at the
# first that fails.
run_block() {
  local f=$QS/$1.sh
  { echo "cd $2 || exit 1"; echo "export PATH=$VPATH EDITOR=true"; echo "set -e"
    while IFS= read -r l; do printf 'echo %q\n%s\n' "\$ $l" "$l"; done <<<"$3"; } >"$f"
  on "$1" "bash $f" 2>&1 | tail -n 25 | indent
  return "${PIPESTATUS[0]}"
}

# --- The storage block, in the storage VM.
run_block storage "$QS/storage" "$s"
rc=$?
ready=$(grep -c 'READY=1' "$QS/notify.out" 2>/dev/null)
[ $rc = 0 ] && [ "${ready:-0}" -ge 1 ] && on storage "kill -0 \$(cat $STORAGE_VM_PID)" >/dev/null
if ! res $? "storage block ran to its end: key made, image, configuration checked, the unit's ExecStart serving (READY=1: ${ready:-0}; rc=$rc)"; then
  tail -n 10 "$QS/target.log" 2>/dev/null | indent; qs_cleanup; return 0 2>/dev/null || exit 0
fi
indent <"$QS/target.log" | grep -i 'listening' | head -n 3

# --- The compute block, in the compute VM: the key and the module beside it.
on storage "cat /etc/rdmadisk/hosts/compute1.key" >"$QS/key" &&
  on compute "umask 077; cp $QS/key $QS/compute/compute1.key && cp $DK_KO $QS/compute/rdmadisk.ko" &&
  rm -f "$QS/key"
on compute "echo 'rdmadisk-tests: $DK_ID begins ($(date +%s%N))' >/dev/kmsg"
run_block compute "$QS/compute" "$c"
rc=$?
list=$(on compute "PATH=$VPATH; rdmadiskctl list --json" 2>&1)
tr=$(on compute "cat /sys/block/rdmadisk0/rdmadisk/active_transport" 2>/dev/null)
[ $rc = 0 ] && on compute "mountpoint -q /mnt && findmnt -n -o SOURCE /mnt | grep -qx /dev/rdmadisk0" >/dev/null &&
  grep -q '"data0"' <<<"$list"
if ! res $? "compute block ran to its end: module loaded, data0 mapped with the key (on ${tr:-?}), ext4 on /mnt (rc=$rc)"; then
  printf '%s\n' "$list" | indent; tail -n 10 "$QS/target.log" | indent; qs_cleanup; return 0 2>/dev/null || exit 0
fi

out=$(on compute "set -e
head -c 4M /dev/urandom >/mnt/qs.bin; a=\$(sha256sum </mnt/qs.bin); umount /mnt
mount /dev/rdmadisk0 /mnt; b=\$(sha256sum </mnt/qs.bin); umount /mnt
[ \"\$a\" = \"\$b\" ] && echo \"same \${a%% *}\"" 2>&1)
res $? "a 4 MiB file on /mnt reads back the same after umount and mount: ${out:0:80}"
n=$(grep -c ': authenticated' "$QS/target.log")
[ "${n:-0}" -ge 1 ]
res $? "the target's log shows data0's connections authenticated with the key: $n"
dk_unmap_rmmod 30 rdmadisk0
res $? "unmap and rmmod"
on storage "p=\$(cat $STORAGE_VM_PID) && kill \$p && for i in \$(seq 100); do kill -0 \$p 2>/dev/null || exit 0; sleep 0.2; done; exit 1" >/dev/null
res $? "the target stops on SIGTERM"
qs_cleanup
