# shellcheck shell=bash
# An ext4 filesystem on a mapped disk with a steady fsync'd write load and a sha256 manifest of
# every file whose fsync succeeded: what a user's filesystem does through a fault. Sourced after
# lib/disk.sh:  source "$TB_REPO/selftests/tests/lib/ext4.sh"
#
#   fs_start TAG DEV        mkfs.ext4 /dev/DEV, mount it on /mnt/TAG, start the writer
#   fs_stop TAG             stop the writer; prints its summary; status 0 if no write failed
#   fs_check TAG DEV        unmount, e2fsck -fn, mount again, check every manifest entry
#
# The writer loops: a file of 16-256 KiB of random data, written and fsynced (dd conv=fsync),
# then its name and sha256 appended to the manifest; a failed dd is logged as FAIL. It keeps
# the newest FS_KEEP files (default 128, about 17 MiB), so that a long soak never fills the
# volume: the file before them is read back first, with direct I/O (past the page cache, from
# the disk), and its sha256 checked against the manifest (VER, or MISMATCH, in the log), then
# removed, and a DEL line in the manifest says so. fs_check reads the rest back at the end: every
# file whose fsync succeeded is read and checked once. Files:
# $TB_DIR/$DK_ID.fs-TAG.{manifest,log,stop,done}.

fs_start() {
  local tag=$1 dev=$2 b=$TB_DIR/$DK_ID.fs-$1
  on compute "rm -f $b.manifest $b.log $b.stop $b.done
mkdir -p /mnt/$tag && mkfs.ext4 -q -F /dev/$dev && mount /dev/$dev /mnt/$tag" || return 1
  DK_MOUNTS+=" /mnt/$tag"
  printf '%s\n' "n=0
while [ ! -e $b.stop ]; do
  n=\$((n + 1)); f=/mnt/$tag/f\$n
  kb=\$(( (RANDOM % 16 + 1) * 16 ))
  if [ \$n -gt ${FS_KEEP:-128} ]; then
    old=f\$((n - ${FS_KEEP:-128}))
    want=\$(grep \" \$old\$\" $b.manifest | tail -n 1 | cut -d' ' -f1)
    if [ -n \"\$want\" ]; then
      got=\$(dd if=/mnt/$tag/\$old iflag=direct bs=16k status=none | sha256sum | cut -d' ' -f1)
      if [ \"\$got\" = \"\$want\" ]; then echo \"VER \$old\" >>$b.log; else echo \"MISMATCH \$old\" >>$b.log; fi
    fi
    rm -f /mnt/$tag/\$old && echo \"DEL \$old\" >>$b.manifest
  fi
  if dd if=/dev/urandom of=\$f bs=1k count=\$kb conv=fsync status=none 2>>$b.log; then
    echo \"\$(sha256sum \$f | cut -d' ' -f1) f\$n\" >>$b.manifest
  else
    echo \"FAIL f\$n \$(date +%s)\" >>$b.log
  fi
done
echo \$n >$b.done" >"$b.sh"
  on compute "setsid bash $b.sh </dev/null >/dev/null 2>&1 & echo \$! >$b.pid"
}

fs_stop() {
  local b=$TB_DIR/$DK_ID.fs-$1 t0=$SECONDS files fails
  touch "$b.stop"
  while [ ! -e "$b.done" ] && (( SECONDS - t0 < ${2:-300} )); do sleep 0.2; done
  files=$(grep -vc '^DEL ' "$b.manifest" 2>/dev/null); fails=$(grep -c '^FAIL' "$b.log" 2>/dev/null)
  FS_VER=$(grep -c '^VER ' "$b.log" 2>/dev/null); FS_BAD=$(grep -c '^MISMATCH ' "$b.log" 2>/dev/null)
  dels=$(grep -c '^DEL ' "$b.manifest" 2>/dev/null)
  FS_SUM="ext4: ${files:-0} files written and fsynced, ${fails:-0} failed writes; ${dels:-0} removed, ${FS_VER:-0} of them read back (direct I/O) and checked first, ${FS_BAD:-0} mismatched$([ -e "$b.done" ] || echo ', writer still running')"
  # With no failed write, every removed file was in the manifest and read back first.
  [ -e "$b.done" ] && [ "${fails:-0}" = 0 ] && [ "${FS_BAD:-0}" = 0 ] && [ "${files:-0}" -gt 0 ] &&
    [ "${FS_VER:-0}" = "${dels:-0}" ]
}

fs_check() {
  local tag=$1 dev=$2 b=$TB_DIR/$DK_ID.fs-$1 out
  out=$(on compute "umount /mnt/$tag && e2fsck -fn /dev/$dev >$b.fsck 2>&1; echo fsck=\$?
mount /dev/$dev /mnt/$tag && cd /mnt/$tag && awk '\$1 == \"DEL\" { delete h[\$2]; next } { h[\$2] = \$1 } END { for (f in h) print h[f] \"  \" f }' $b.manifest >$b.left
echo left=\$(wc -l <$b.left); sha256sum -c --quiet $b.left 2>&1 | head -n 5; echo sums=\${PIPESTATUS[0]}")
  FS_CHECK=$(tr '\n' ' ' <<<"$out")
  grep -q '^fsck=0$' <<<"$out" && grep -q '^sums=0$' <<<"$out"
}
