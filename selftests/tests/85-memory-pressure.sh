# Writeback to the disk under memory pressure, through reconnects (review item 6: the session
# workqueue, the sockets and reconnect allocations must not need the memory that only this
# disk's writeback can free).
#
# The compute VM's memory is filled with unreclaimable pages (a tmpfs, no swap) until about
# 160 MiB are left. Then a buffered write of 48 MiB to the disk (fio, verify headers, fsync at
# the end) has its page cache reclaimed through the disk's own writeback, while the module's
# fault injection forces the connection into the error state twice (qp_error), so the session
# reconnects (new QP, MRs, receive buffers) under that pressure; then the same on TCP
# (fail_tcp_send, new sockets).
#
# Acceptance: the writes finish with no error within the time limit, no task stays in D state,
# the data read back with O_DIRECT (page cache dropped) verifies, the disk reconnected under
# pressure (reconnects +2 per transport), io_errors=0, no kernel splat. This shows the paths
# working under pressure; it cannot prove that no allocation anywhere waits on this disk.
# timeout: 1200

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark
HOG=/mnt/hog85
LEFT_MIB=160

hog_off() { on compute "rm -f $HOG/fill; mountpoint -q $HOG && umount $HOG; true" >/dev/null; }

back=$(dk_backing vol0 64M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d85 vol0
if ! res $? "target; insmod; map name=d85: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
F=/sys/kernel/debug/rdmadisk/$dev
tr_set "$dev" io_timeout_ms=30000 loss_timeout_s=300 >/dev/null

# pressure_round TAG FAULT: 48 MiB buffered and verified writes under pressure, FAULT armed
# (until a reconnect is counted) twice meanwhile.
pressure_round() {
  local tag=$1 fault=$2 r0 r1 out seed=$((85 + ${#1}))
  local job="--name=$tag --filename=/dev/$dev --rw=write --bs=64k --size=48M --offset=8M --verify=crc32c --randseed=$seed"
  r0=$(tr_stat "$dev" reconnects)
  # Buffered: the page cache, not O_DIRECT, is what must be written back to be reclaimed.
  dk_fio_bg "$tag" "$job --direct=0 --do_verify=0 --end_fsync=1"
  for i in 1 2; do
    sleep 4
    on compute "$DK_VM_DEFS
stat_of /sys/block/$dev/rdmadisk/stats reconnects; b=\${V:-0}; n=0
echo 1 >$F/${fault}_every
while [ \$n -lt 300 ]; do
  stat_of /sys/block/$dev/rdmadisk/stats reconnects; [ \"\${V:-0}\" -gt \$b ] && break
  # fio may be done (or between flushes): a direct read each second keeps the fault firing.
  [ \$((n % 10)) = 0 ] && { dd if=/dev/$dev of=/dev/null bs=4k count=1 iflag=direct status=none & }
  n=\$((n + 1)); pause 0.1
done
echo 0 >$F/${fault}_every; wait" >/dev/null
  done
  dk_fio_wait "$tag" 600 >/dev/null
  res $? "[$tag] 48 MiB of buffered writes under memory pressure, $fault forced twice meanwhile: $FIO_SUM"
  r1=$(tr_stat "$dev" reconnects)
  n_le $((r0 + 2)) "$r1"
  res $? "[$tag] the disk reconnected under pressure (reconnects $r0 -> $r1)"
  dk_stuck_tasks | indent "D state after the writes: "
  res "${PIPESTATUS[0]}" "[$tag] no task left in D state after the writes (two looks 5 s apart)"
  # The page cache of the disk dropped, the data read back from the target.
  on compute "sync; echo 3 >/proc/sys/vm/drop_caches" >/dev/null
  dk_fio "v$tag" "$job --direct=1 --verify_only" >/dev/null
  res $? "[$tag] the data read back with O_DIRECT verifies: $FIO_SUM"
}

# The pressure: everything but LEFT_MIB of what is available, in a tmpfs (no swap: it stays).
# It must have taken: the whole file written, and what the kernel then counts available
# within PRESSURE_SLACK_MIB of LEFT_MIB (its estimate is not exact, and moves a little).
PRESSURE_SLACK_MIB=64
out=$(on compute "read -r _ total _ < <(grep MemAvailable /proc/meminfo)
fill=\$(( total / 1024 - $LEFT_MIB ))
[ \$fill -gt 0 ] || { echo \"only \$(( total / 1024 )) MiB available\"; exit 1; }
mkdir -p $HOG && mount -t tmpfs -o size=\${fill}M none $HOG && dd if=/dev/zero of=$HOG/fill bs=1M count=\$fill status=none || exit 1
read -r _ avail _ < <(grep MemAvailable /proc/meminfo)
echo filled=\$fill size=\$(( \$(stat -c %s $HOG/fill) >> 20 )) avail=\$(( avail / 1024 ))
grep -E 'MemAvailable|MemFree|Dirty' /proc/meminfo | tr -s ' ' | tr '\n' ' '")
rc=$?
fill=$(word filled "$out") size=$(word size "$out") avail=$(word avail "$out")
[ $rc = 0 ] && n_gt "$fill" 0 && n_eq "$size" "$fill" && n_le "$avail" $((LEFT_MIB + PRESSURE_SLACK_MIB))
res $? "memory pressure: ${fill:-?} MiB filled (${size:-?} MiB written), ${avail:-?} MiB left available (aim $LEFT_MIB, at most +$PRESSURE_SLACK_MIB): ${out//$'\n'/ }"

pressure_round rdma qp_error
tr_set "$dev" transport=tcp >/dev/null && tr_wait tcp "$dev" 120 tcp >/dev/null
res $? "transport=tcp: on TCP ($TR_WAIT)"
pressure_round tcp fail_tcp_send
hog_off

dk_csnap "$dev"
n_eq "$(cstat io_errors)" 0
res $? "io_errors=$(cstat io_errors) after both rounds"
dk_unmap_rmmod 30 "$dev"
res $? "unmap normal; rmmod"
tr_splat_check
hog_off
dk_cleanup
