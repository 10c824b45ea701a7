# shellcheck shell=bash disable=SC2034 # FIO_*, DK_DEV, DK_CS, DK_TS are for the tests that source this
# Helpers shared by every test of the block device (15-dkms.sh and 59-95), lib/transport.sh,
# lib/soak.sh, selftests/demo.sh, the benchmarks (selftests/bench/) and run.sh's clean-up after
# a killed test: the userspace target on the storage VM, mapping /dev/rdmadiskN on the compute
# VM, both sides' counters, and fio with its results parsed.
#
# This file lives in tests/lib/ because selftests/run.sh runs every tests/*.sh as a test; it
# is sourced, never run:  source "$TB_REPO/selftests/tests/lib/disk.sh"
#
# State files go to $TB_DIR (shared with both VMs, same path inside), named after the test:
#   $TB_DIR/<test>.target.{log,stats,pid}   the target's output, counters and pid
#   $TB_DIR/<test>.fio-<tag>.{out,log,rc}   fio's normal+JSON output, stderr, exit status
# The target's backing files are sparse files on the storage VM's tmpfs (/run/rdmadisk-tests).

DK_ID=${TB_TEST:-disk}
DK_UT=$TB_REPO/userspace-tools
DK_TARGET=$CARGO_TARGET_DIR/release/rdmadisk-target
DK_CLIENT=$CARGO_TARGET_DIR/release/rdmadisk-testclient
# The module to load: the one built in the clone, unless the caller built another (make bench
# builds one against its bench kernel).
DK_KO=${DK_KO:-$TB_REPO/rdmadisk.ko}
DK_CTL=/sys/class/rdmadisk/ctl
DK_S=$TB_STORAGE_ADDR
DK_PORT=7700
DK_TCP_PORT=7701
DK_BACKDIR=/run/rdmadisk-tests
DK_TLOG=$TB_DIR/$DK_ID.target.log
# The target's stats file (rewritten every second); make bench puts it on the storage VM's
# tmpfs, where writing it costs no 9p round trips.
DK_STATS=${DK_STATS:-$TB_DIR/$DK_ID.target.stats}
DK_TPID=$TB_DIR/$DK_ID.target.pid
DK_TS=   # last target counters snapshot (dk_tsnap)
DK_CS=   # last client counters snapshot (dk_csnap)
DK_MOUNTS=   # mount points dk_cleanup unmounts

res() { # res STATUS DESCRIPTION: one TAP line, ending in the seconds since the test began; returns STATUS
  if [ "$1" = 0 ]; then echo "ok - $2 [${SECONDS}s]"; else echo "not ok - $2 [${SECONDS}s]"; fi
  return "$1"
}
indent() { sed "s/^/  ${1:-}/"; }

# Numbers. A missing counter is empty and must never compare equal to another missing one.
is_num() { [[ ${1:-} =~ ^[0-9]+$ ]]; }
n_eq() { is_num "${1:-}" && is_num "${2:-}" && [ "$1" -eq "$2" ]; }
n_gt() { is_num "${1:-}" && is_num "${2:-}" && [ "$1" -gt "$2" ]; }
n_le() { is_num "${1:-}" && is_num "${2:-}" && [ "$1" -le "$2" ]; }
kv() { # kv KEY TEXT: the value of a "KEY=VALUE" line in TEXT
  sed -n "s/^$1=//p" <<<"$2" | head -n1
}
word() { # word KEY TEXT: the value of a "KEY=VALUE" word anywhere in TEXT
  sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$2" | head -n1
}

# DK_VM_DEFS: shell functions for VM-side snippets that start no program. Under TCG with the
# debug kernel one fork and exec costs the VM 0.2-1 s (a `cat` 0.8 s, `awk` 1 s), so a poll loop
# of grep and sleep polls every few seconds, a setup step of a few `cat`s takes seconds, and
# both take CPU from the code under test.
#   pause SECS        sleeps (reads the agent's FIFO, which nobody writes); status 0
#   now_us            sets us, microseconds
#   show FILE         prints FILE (status 1, no text, if it cannot be read)
#   has FILE TEXT     status 0 if a line of FILE contains TEXT
#   ios_sum FILE      sets S: rdma_ios + tcp_ios of a stats file (empty if it has neither)
#   stat_of FILE KEY  sets V: KEY's value in a stats file (empty if absent)
# shellcheck disable=SC2016 # expanded in the VM
DK_VM_DEFS='if [ -p /run/agent-tick ] && exec 8<>/run/agent-tick; then pause() { read -rt "$1" -u 8 _; return 0; }; else pause() { sleep "$1"; }; fi
now_us() { us=${EPOCHREALTIME/[.,]/}; }
show() { local l; while IFS= read -r l || [ -n "$l" ]; do printf "%s\n" "$l"; done 2>/dev/null <"$1"; }
has() { local l; while IFS= read -r l || [ -n "$l" ]; do [[ $l == *"$2"* ]] && return 0; done 2>/dev/null <"$1"; return 1; }
ios_sum() { S=; while IFS== read -r k x || [ -n "$k" ]; do case $k in rdma_ios|tcp_ios) S=$((${S:-0} + x)) ;; esac; done 2>/dev/null <"$1"; }
stat_of() { V=; while IFS== read -r k x || [ -n "$k" ]; do [ "$k" = "$2" ] && V=$x; done 2>/dev/null <"$1"; }'

# ---------------------------------------------------------------- the target (storage VM)

# dk_build: builds the target and the test client (a no-op when they are current or run.sh
# built them); reports a failure itself.
dk_build() {
  [ -n "${DK_BUILT:-}" ] && return 0
  if ! (cd "$DK_UT" && nice -n 10 cargo build -q --release -p rdmadisk-target -p rdmadisk-testclient) >&2; then
    echo "not ok - build the userspace target and test client"
    return 1
  fi
}

dk_backing() { # dk_backing NAME [SIZE]: a fresh sparse backing file on the storage VM; prints its path
  local f=$DK_BACKDIR/$DK_ID-$1.img
  on storage "mkdir -p $DK_BACKDIR && rm -f $f $f.rdmadisk-id && truncate -s ${2:-64M} $f && echo $f"
}

# _dk_tstop: a storage-side function tstop: SIGCONT (in case a test stopped the target),
# SIGTERM, and a wait; status 0 if it exited cleanly (or was not running).
_dk_tstop() {
  printf '%s' "$DK_VM_DEFS
tstop() {
  [ -s $DK_TPID ] || return 0
  read -r p <$DK_TPID; rm -f $DK_TPID
  kill -0 \$p 2>/dev/null || return 0
  kill -CONT \$p; kill -TERM \$p
  for ((i = 0; i < 100; i++)); do kill -0 \$p 2>/dev/null || return 0; pause 0.2; done
  echo 'target did not exit on SIGTERM; killing it'; kill -KILL \$p; return 1
}"
}

dk_target_start() { # dk_target_start ARGS...: (re)starts the target with ARGS (--export ... etc.)
  local up='rdma listening'
  [[ " $* " == *" --no-rdma "* ]] && up='tcp listening'
  on storage "$(_dk_tstop)
tstop >/dev/null
rm -f $DK_STATS $DK_TLOG
setsid $DK_TARGET --listen $DK_S --rdma-port $DK_PORT --tcp-port $DK_TCP_PORT --allow $TB_COMPUTE_ADDR \
  --stats-file $DK_STATS $* >$DK_TLOG 2>&1 </dev/null &
echo \$! >$DK_TPID
for ((i = 0; i < 100; i++)); do has $DK_TLOG '$up' && exit 0; pause 0.2; done
show $DK_TLOG; exit 1"
}

dk_target_stop() { # SIGCONT (in case a test stopped it), SIGTERM, wait; status 0 if it exited cleanly
  on storage "$(_dk_tstop)
tstop"
}

tsum() { # tsum KEY...: the sum of target counters (empty if one is missing)
  local t=0 k v
  for k; do v=$(tstat "$k"); is_num "$v" || return 0; t=$((t + v)); done
  echo "$t"
}

dk_tsnap() { # the target's counters now: SIGUSR1 rewrites --stats-file; snapshot into DK_TS
  DK_TS=$(on storage "$DK_VM_DEFS
{ read -r p <$DK_TPID && kill -USR1 \$p && pause 1; } >/dev/null 2>&1; cat $DK_STATS 2>/dev/null")
}
tstat() { kv "$1" "$DK_TS"; }

# ---------------------------------------------------------------- the disk (compute VM)

# dk_load: insmod; status 0 if ctl/map_device is there (else says why, indented). The first call
# of a test also writes a mark to the compute VM's kernel log, DK_KMSG_MARK, from which
# dk_resets_ok counts: the log holds earlier tests' lines, and earlier runs' of the same test.
dk_load() {
  local mark=
  if [ -z "${DK_KMSG_MARK:-}" ]; then
    DK_KMSG_MARK="rdmadisk-tests: $DK_ID begins ($(date +%s%N))"
    mark="echo '$DK_KMSG_MARK' >/dev/kmsg"
  fi
  on compute "$mark
insmod $DK_KO || exit 1
test -e $DK_CTL/map_device || { echo \"loaded, but there is no $DK_CTL/map_device (ctl has: \$(ls $DK_CTL | tr '\n' ' '))\"; exit 1; }" 2>&1 | indent
  return "${PIPESTATUS[0]}"
}

# dk_map_cmd OPTIONS: a compute-side snippet that writes OPTIONS to map_device and prints
# "rc=N secs=N err=TEXT", then "--- dmesg" and the kernel lines it caused.
dk_map_cmd() {
  printf '%s' "
n=\$(dmesg | wc -l); t0=\$EPOCHSECONDS
out=\$( (echo '$1' >$DK_CTL/map_device) 2>&1 ); rc=\$?
echo \"rc=\$rc secs=\$((EPOCHSECONDS - t0)) err=\$out\"
echo '--- dmesg'; dmesg | tail -n +\$((n + 1)) | grep -i rdmadisk"
}

# dk_map OPTIONS [SECONDS]: maps in the background of the compute VM (dk_timed, default limit
# 60 s) and prints dk_map_cmd's output then dk_timed's "rc=" line; status 0 if the write succeeded.
dk_map() {
  local out
  out=$(dk_timed map "${2:-60}" "$(dk_map_cmd "$1")")
  printf '%s\n' "$out"
  [ "$(grep -m1 '^rc=' <<<"$out" | cut -d' ' -f1)" = rc=0 ]
}

dk_dev_of() { # dk_dev_of NAME: the block device (rdmadiskN) mapped under NAME, from ctl/devices
  on compute "while read -r d n _; do [ \"\$n\" = '$1' ] && echo \$d; done 2>/dev/null <$DK_CTL/devices; true"
}

# dk_map_disk NAME EXPORT [MORE-OPTIONS]: maps (at addr=$DK_S, or DK_TARGETS if set, e.g.
# "target=A:P:T,B:P:T"), checks /dev/<dev> and state "live", sets
# io_timeout_ms to DK_IO_TIMEOUT_MS, and sets DK_DEV; prints the map output indented on failure.
# Status 0 if the disk is usable.
# Soft-RoCE under TCG moves 1-3 MB/s, so 2 jobs x 16 requests of up to 1 MiB queue at the target
# for longer than the driver's 30 s default timeout; a timeout resets the connection, which the
# tests that count exact wire traffic must not see. Tests of the timeout set their own value.
DK_IO_TIMEOUT_MS=${DK_IO_TIMEOUT_MS:-120000}
dk_map_disk() {
  local out
  DK_DEV=
  if ! out=$(dk_map "name=$1 ${DK_TARGETS:-addr=$DK_S} export=$2${3:+ $3}"); then
    printf '%s\n' "$out" | indent
    return 1
  fi
  # One VM command: find the device, check it, set its I/O timeout.
  out=$(on compute "d=; while read -r x n _; do [ \"\$n\" = '$1' ] && d=\$x; done 2>/dev/null <$DK_CTL/devices
[ -n \"\$d\" ] || { echo '  no line for $1 in $DK_CTL/devices'; exit 1; }
echo dev=\$d
s=; test -b /dev/\$d && read -r s </sys/block/\$d/rdmadisk/state
[ \"\$s\" = live ] || { echo \"  /dev/\$d missing or not live\"; exit 1; }
echo $DK_IO_TIMEOUT_MS >/sys/block/\$d/rdmadisk/io_timeout_ms ||
  { echo '  setting io_timeout_ms=$DK_IO_TIMEOUT_MS failed'; exit 1; }")
  local rc=$?
  DK_DEV=$(sed -n 's/^dev=//p' <<<"$out")
  grep -v '^dev=' <<<"$out"
  return $rc
}

dk_unmap() { # dk_unmap DEV normal|force: status of the write; prints its error text
  on compute "echo $2 >/sys/block/$1/rdmadisk/unmap"
}

dk_gone() { # dk_gone DEV [SECONDS]: waits until /sys/block/DEV and /dev/DEV are gone
  on compute "$DK_VM_DEFS
for ((i = 0; i < $((${2:-30} * 5)); i++)); do [ ! -e /sys/block/$1 ] && [ ! -e /dev/$1 ] && exit 0; pause 0.2; done; exit 1"
}

# dk_unmap_rmmod SECONDS DEV...: in one command, unmaps each DEV normally and waits up to SECONDS
# for it to leave /sys/block and /dev, then unloads the module. Status 0 if all of it succeeded
# (else it says which step failed).
dk_unmap_rmmod() {
  local secs=$1 d s=
  shift
  for d; do s+="echo normal >/sys/block/$d/rdmadisk/unmap || { echo 'unmap of $d failed'; exit 1; }
for ((i = 0; i < $((secs * 5)); i++)); do [ ! -e /sys/block/$d ] && [ ! -e /dev/$d ] && break; pause 0.2; done
[ ! -e /sys/block/$d ] && [ ! -e /dev/$d ] || { echo '$d still there $secs s after its unmap'; exit 1; }
"; done
  on compute "$DK_VM_DEFS
${s}rmmod rdmadisk"
}

# dk_timed TAG SECONDS SCRIPT: runs SCRIPT in the compute VM in the background, so a write that
# blocks in the kernel cannot wedge the VM's command queue, and waits up to SECONDS for it.
# Prints its output, then "rc=N secs=N" (rc=timeout if it is still running). Status 0 if rc=0.
dk_timed() {
  local b=$TB_DIR/$DK_ID.cmd-$1 t0=$SECONDS rc
  rm -f "$b.rc" "$b.rc.tmp" "$b.out" "$b.pid"
  printf '%s\n' "$3" >"$b.sh"
  on compute "setsid bash -c 'bash $b.sh >$b.out 2>&1; echo \$? >$b.rc.tmp; mv $b.rc.tmp $b.rc' </dev/null >/dev/null 2>&1 & echo \$! >$b.pid"
  while [ ! -e "$b.rc" ] && (( SECONDS - t0 < $2 )); do sleep 0.1; done
  cat "$b.out" 2>/dev/null
  rc=$(cat "$b.rc" 2>/dev/null)
  if [ -z "$rc" ]; then
    rc=timeout
    # Stop it, so it cannot act on what later steps set up (it may be stuck in the kernel,
    # and then this only stops what it would do next).
    on compute "kill -KILL -- -\$(cat $b.pid) 2>/dev/null; true" >/dev/null
  fi
  echo "rc=$rc secs=$((SECONDS - t0))"
  [ "$rc" = 0 ]
}

dk_csnap() { # dk_csnap DEV: the disk's counters into DK_CS (empty when the file is missing)
  DK_CS=$(on compute "$DK_VM_DEFS
show /sys/block/$1/rdmadisk/stats" 2>/dev/null)
}
cstat() { kv "$1" "$DK_CS"; }

dk_show() { # dk_show LABEL TEXT: key=value lines as indented, wrapped diagnostics
  tr '\n' ' ' <<<"$2" | fold -s -w 110 | sed "s/^/  $1: /"; echo
}

# A healthy link sees no connection reset, and tests 60 and 62 allow none. The resets these
# tests used to see (in 9 of 21 runs of test 60) were soft-RoCE's, not the driver's: when the
# client's QP retransmitted a request (a datagram of the link lost on the host), rxe's
# requester ran again the REG_MRs queued behind it, which had run already; the MR of each was
# valid, not free, so the REG_MR failed ("rxe_reg_fast_mr: ... not free" with rxe's debug
# messages on) and the QP went to the error state, its error status lost to the flush of
# every work request. The test bed's kernel carries the fix
# (selftests/kernel/patches/0004-rxe-retry-does-not-repeat-local-operations.patch).
# dk_resets_ok NAME: status 0 when the disk NAME reset no connection: no "resetting the
# connection" line of its queues and no work request completed with an error in the compute
# VM's kernel log since the test's dk_load (DK_KMSG_MARK), and reconnects=0 and requeued=0.
# The log is read first, always: a reset the counters do not show fails too. Uses DK_CS
# (dk_csnap first); sets DK_RESETS, a text for the TAP line. On a reset it prints what each
# side logged around it, and every soft-RoCE counter that is not 0 on each side.
dk_resets_ok() {
  local name=$1 counts resets= flushed= failed= send_err
  counts=$(on compute "dmesg | awk -v mark='${DK_KMSG_MARK:-}' '
    mark != \"\" && index(\$0, mark) { n = 0; f = 0; e = 0 }
    /$name: queue [0-9]* \\((RDMA|TCP), set [0-9]*\\): .*resetting the connection/ {
      n++; if (/: (a (Send|Receive) failed or was flushed|a (REG_MR|LOCAL_INV) failed); resetting/) f++ }
    /$name: queue [0-9]*: (Send of slot [0-9]* failed:|a Receive failed:|(REG_MR|LOCAL_INV) of slot [0-9]* failed \\(status)/ { e++ }
    END { print n + 0, f + 0, e + 0 }'")
  read -r resets flushed failed <<<"$counts"
  send_err=$(on compute "rdma statistic show link rxe0/1 2>/dev/null" | sed -n 's/.* send_err \([0-9]*\).*/\1/p')
  DK_RESETS="reconnects=$(cstat reconnects) requeued=$(cstat requeued); resets logged ${resets:-?} (begun by a flush ${flushed:-?}), completions with an error ${failed:-?}; rxe0 send_err=${send_err:-?}"
  n_eq "${resets:-x}" 0 && n_eq "${failed:-x}" 0 && n_eq "$(cstat reconnects)" 0 && n_eq "$(cstat requeued)" 0 &&
    return 0
  on compute "dmesg | grep -E '$name: queue [0-9]*|rxe' | tail -n 12" | indent "compute: "
  on storage "grep -vE 'rdma listening|tcp listening|^[a-z_0-9]+=[0-9]+$' $DK_TLOG 2>/dev/null | tail -n 12" | indent "target log: "
  for vm in compute storage; do
    on $vm "rdma statistic show link rxe0/1 2>/dev/null" | tr ' ' '\n' |
      awk 'p { if ($1 != "0") printf "%s=%s ", k, $1; p = 0; next } /^[a-z_]+$/ && $1 != "link" { k = $1; p = 1 }
        END { print "" }' | indent "$vm rxe0: "
  done
  return 1
}

# dk_stuck_tasks: prints the compute VM's tasks in D state at two looks 5 s apart (kernel
# workers too: a stuck session or I/O work would be one; a worker passes through D briefly all
# the time, and jbd2 and rcu ones are left out). Status 0 if there is none, 1 if there is one,
# 2 if the tasks could not be listed (ps failed): not looking is no proof of none.
dk_stuck_tasks() {
  on compute "d() { set -o pipefail; ps -eo pid=,stat=,comm=,wchan:32= | awk '\$2 ~ /^D/ && \$3 !~ /^(jbd2|rcu)/'; }
a=\$(d) || exit 2; sleep 5; b=\$(d) || exit 2
stuck=\$(printf '%s\\n' \"\$b\" | while read -r p rest; do [ -n \"\$p\" ] && printf '%s\\n' \"\$a\" | grep -q \"^ *\$p \" && echo \"\$p \$rest\"; done)
[ -z \"\$stuck\" ] || { echo \"\$stuck\"; exit 1; }"
}

# ---------------------------------------------------------------- what landed on the storage VM
# fio's verify and the tests' checksums read the data back through the same driver that wrote
# it, so a consistent offset bug (writes and reads both going to the same wrong place) would
# pass them. These compare the backing file on the storage VM with what the device was given.

# dk_check_backing DEV BACKFILE OFFSET_MIB LEN_MIB: writes LEN_MIB MiB of a pattern made on the
# host from a fixed seed (the test's name and the range) through /dev/DEV at OFFSET_MIB MiB
# (O_DIRECT, then fsync), reads the range back through the device (O_DIRECT), and reads the
# same range of BACKFILE on the storage VM. The device I/O runs in the background with a time
# limit (dk_timed) of 120 s + 120 s per MiB (rxe under TCG on a loaded host has been seen at
# 100 KiB/s). Sets DK_BACKING (a short text for TAP lines). Status 0 if the three sha256
# sums are the same: the data is in the backing file at the offset it was written to.
dk_check_backing() {
  local dev=$1 back=$2 off=$3 len=$4 pat seed want got_dev got_back out
  pat=$TB_DIR/$DK_ID.pattern-$off-$len.bin
  seed=$(printf '%s' "$DK_ID:$off:$len" | cksum | cut -d' ' -f1)
  python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(int(sys.argv[1])).randbytes(int(sys.argv[2])))' \
    "$seed" $((len << 20)) >"$pat"
  want=$(sha256sum <"$pat" | cut -c1-64)
  out=$(dk_timed "backing-$off" $((120 + 120 * len)) "test -b /dev/$dev || { echo 'not a block device: /dev/$dev'; exit 1; }
dd if=$pat of=/dev/$dev bs=1M seek=$off count=$len oflag=direct conv=notrunc,fsync status=none || exit 1
echo DEVSUM \$(dd if=/dev/$dev bs=1M skip=$off count=$len iflag=direct status=none | sha256sum)")
  got_dev=$(sed -n 's/^DEVSUM \([0-9a-f]*\).*/\1/p' <<<"$out")
  got_back=$(on storage "dd if=$back bs=1M skip=$off count=$len status=none | sha256sum" | cut -c1-64)
  rm -f "$pat"
  DK_BACKING="$len MiB of a seeded pattern at $off MiB: sha256 ${want:0:12}, read back through /dev/$dev ${got_dev:0:12}, in the backing file ${got_back:0:12}"
  [ ${#want} = 64 ] && [ "$got_dev" = "$want" ] && [ "$got_back" = "$want" ] && return 0
  printf '%s\n' "$out" | indent
  return 1
}

# dk_check_image DEV BACKFILE: the whole of /dev/DEV, read with O_DIRECT, against the whole
# backing file on the storage VM (sha256). Sets DK_BACKING. Status 0 if they are the same.
dk_check_image() {
  local dev=$1 back=$2 out got_dev got_back
  out=$(dk_timed "image" 900 "test -b /dev/$dev || { echo 'not a block device: /dev/$dev'; exit 1; }
echo DEVSUM \$(dd if=/dev/$dev bs=1M iflag=direct status=none | sha256sum) \$(blockdev --getsize64 /dev/$dev)")
  got_dev=$(sed -n 's/^DEVSUM \([0-9a-f]*\).*/\1/p' <<<"$out")
  got_back=$(on storage "sha256sum <$back" | cut -c1-64)
  DK_BACKING="the whole device ($(sed -n 's/^DEVSUM [0-9a-f]* - \([0-9]*\)$/\1/p' <<<"$out") bytes): sha256 through /dev/$dev ${got_dev:0:12}, of the backing file ${got_back:0:12}"
  [ ${#got_dev} = 64 ] && [ "$got_dev" = "$got_back" ] && return 0
  printf '%s\n' "$out" | indent
  return 1
}

# ---------------------------------------------------------------- fio (compute VM)
# Every run adds --ioengine=libaio --direct=1, no verify state files, and writes fio's normal
# and JSON output to one file; dk_fio_result parses it on the host. fio is given only block
# devices: --allow_file_create=0, and each --filename is checked to be a block device in the VM
# first (else fio is not run and its status reads "nodev"), so a disk that failed to map cannot
# turn into a regular file in /dev that fio fills and verifies with no driver involved.

DK_FIO_BASE="--ioengine=libaio --direct=1 --allow_file_create=0 --verify_state_save=0 --output-format=normal,json"

# dk_fio_devcheck RCFILE LOGFILE FIO-ARGS: a compute-side snippet that exits 1, with "nodev" in
# RCFILE and the reason in LOGFILE, unless every --filename in FIO-ARGS is a block device
dk_fio_devcheck() {
  local rcf=$1 logf=$2 a s="" w
  read -ra w <<<"$3"
  for a in "${w[@]}"; do
    case $a in --filename=*)
      s+="[ -b '${a#--filename=}' ] || { echo 'fio not run: ${a#--filename=} is not a block device' >$logf; echo nodev >$rcf; exit 1; }
" ;;
    esac
  done
  printf '%s' "$s"
}

dk_fio() { # dk_fio TAG FIO-ARGS: runs fio in the foreground; then dk_fio_result TAG
  local tag=$1 b=$TB_DIR/$DK_ID.fio-$1; shift
  on compute "rm -f $b.out $b.log $b.rc
$(dk_fio_devcheck "$b.rc" "$b.log" "$*")
timeout ${DK_FIO_TIMEOUT:-600} fio $DK_FIO_BASE --output=$b.out $* >$b.log 2>&1; echo \$? >$b.rc" >/dev/null
  dk_fio_result "$tag"
}

dk_fio_bg() { # dk_fio_bg TAG FIO-ARGS: starts fio in the background (its own process group)
  local b=$TB_DIR/$DK_ID.fio-$1; shift
  on compute "rm -f $b.out $b.log $b.rc $b.rc.tmp $b.pid
$(dk_fio_devcheck "$b.rc" "$b.log" "$*")
setsid bash -c 'timeout ${DK_FIO_TIMEOUT:-600} fio $DK_FIO_BASE --output=$b.out $* >$b.log 2>&1; echo \$? >$b.rc.tmp; mv $b.rc.tmp $b.rc' </dev/null >/dev/null 2>&1 &
echo \$! >$b.pid"
}

dk_fio_running() { [ ! -e "$TB_DIR/$DK_ID.fio-$1.rc" ]; }

dk_fio_wait() { # dk_fio_wait TAG SECONDS: waits for a background fio (kills it after SECONDS); then dk_fio_result
  local b=$TB_DIR/$DK_ID.fio-$1 t0=$SECONDS
  while [ ! -e "$b.rc" ] && (( SECONDS - t0 < $2 )); do sleep 0.2; done
  if [ ! -e "$b.rc" ]; then
    echo "  fio $1 still running after $2 s: killing it"
    dk_fio_kill "$1"
  fi
  dk_fio_result "$1"
}

dk_fio_kill() { # dk_fio_kill TAG: ends a background fio's process group (started by dk_fio_bg)
  local b=$TB_DIR/$DK_ID.fio-$1
  [ -s "$b.pid" ] && [ ! -e "$b.rc" ] || return 0
  on compute "$DK_VM_DEFS
read -r p <$b.pid; kill -TERM -- -\$p 2>/dev/null; for ((i = 0; i < 50; i++)); do kill -0 -- -\$p 2>/dev/null || exit 0; pause 0.2; done; kill -KILL -- -\$p 2>/dev/null; true" >/dev/null
  [ -e "$b.rc" ] || echo killed >"$b.rc"
}

# dk_fio_parse FILE: fio's per-job and group summary lines (indented), then one line
# "FIO jobs=N errors=N errnos=E,E write_kib=N read_kib=N write_kibps=N read_kibps=N", where
# errors counts the jobs whose JSON "error" or normal-output "err=" is non-zero (-1: no output).
dk_fio_parse() {
  python3 - "$1" <<'PY'
import json, re, sys
try:
    text = open(sys.argv[1], errors="replace").read()
except OSError as e:
    print(f"  (no fio output: {e})")
    text = ""
jobs, rest = [], text
m = re.search(r"^\{$", text, re.M)
if m:
    try:
        d, end = json.JSONDecoder().raw_decode(text, m.start())
        jobs = d.get("jobs", [])
        rest = text[:m.start()] + text[end:]
    except ValueError as e:
        print(f"  (fio JSON unreadable: {e})")
shown = re.compile(r"err=|^\s+(read|write|trim): IOPS=|^\s+(READ|WRITE|TRIM): bw=|^(fio|verify)[: ]")
# (fio warns that jobs may overwrite each other's blocks even when offset_increment keeps them apart)
lines = [l for l in rest.splitlines() if shown.search(l) and "multiple writers may overwrite" not in l]
for l in lines[:40]:
    print("  " + l.strip())
text_errs = [int(x) for x in re.findall(r"err=\s*(\d+)", rest)]
json_errs = [int(j.get("error", 0)) for j in jobs]
errors = max(sum(1 for e in json_errs if e), sum(1 for e in text_errs if e)) if jobs else -1
tot = lambda d, k: sum(int(j.get(d, {}).get(k, 0)) for j in jobs)
print(f"FIO jobs={len(jobs)} errors={errors} errnos={','.join(map(str, json_errs)) or '-'}"
      f" write_kib={tot('write', 'io_kbytes')} read_kib={tot('read', 'io_kbytes')}"
      f" write_kibps={tot('write', 'bw')} read_kibps={tot('read', 'bw')}")
PY
}

# dk_fio_result TAG: prints the summary and fio's stderr (indented) and sets FIO_RC, FIO_ERRS,
# FIO_WKIB, FIO_RKIB and FIO_SUM (a short text for TAP lines). Status 0 if fio exited 0 with
# no job error.
dk_fio_result() {
  local b=$TB_DIR/$DK_ID.fio-$1 parsed line
  FIO_RC=$(cat "$b.rc" 2>/dev/null); FIO_RC=${FIO_RC:-none}
  parsed=$(dk_fio_parse "$b.out")
  grep -v '^FIO ' <<<"$parsed"
  [ -s "$b.log" ] && grep -v '^$' "$b.log" | head -n 10 | indent "stderr: "
  line=$(grep '^FIO ' <<<"$parsed" | tail -n1)
  FIO_ERRS=$(word errors "$line")
  FIO_WKIB=$(word write_kib "$line")
  FIO_RKIB=$(word read_kib "$line")
  FIO_SUM="fio exit $FIO_RC, $(word jobs "$line") jobs, job errors $FIO_ERRS (errnos $(word errnos "$line")), wrote $((${FIO_WKIB:-0} / 1024)) MiB at $(word write_kibps "$line") KiB/s, read $((${FIO_RKIB:-0} / 1024)) MiB at $(word read_kibps "$line") KiB/s"
  [ "$FIO_RC" = 0 ] && [ "$FIO_ERRS" = 0 ]
}

# ---------------------------------------------------------------- leaving the VMs as found

# dk_cleanup: ends this test's background fio runs, unmounts $DK_MOUNTS, force-unmaps every
# disk, unloads the module, stops the target, removes its backing files.
dk_cleanup() {
  local p m
  for p in "$TB_DIR/$DK_ID".fio-*.pid; do
    [ -e "$p" ] || continue
    p=${p##*.fio-}; dk_fio_kill "${p%.pid}"
  done
  # Filesystem writers (lib/ext4.sh) first, so that their mounts can go; a mount that stays
  # busy is detached, so the module is not pinned for the next test.
  for p in "$TB_DIR/$DK_ID".fs-*.pid; do
    [ -e "$p" ] && on compute "kill -KILL -- -\$(cat $p) 2>/dev/null; true" >/dev/null
  done
  for m in $DK_MOUNTS; do on compute "! mountpoint -q $m || umount $m || umount -l $m" >/dev/null; done
  # Mounts of this driver's disks that a killed test's shell no longer knows of (after_timeout
  # runs in a new one): they would pin the module for the next tests.
  on compute "while read -r src mnt _; do case \$src in /dev/rdmadisk*) umount \$mnt 2>/dev/null || umount -l \$mnt ;; esac; done </proc/mounts; true" >/dev/null
  dk_timed cleanup 120 "
L=(); [ -r $DK_CTL/devices ] && mapfile -t L <$DK_CTL/devices
for l in \"\${L[@]}\"; do echo force >/sys/block/\${l%% *}/rdmadisk/unmap; done
if [ -d /sys/module/rdmadisk ]; then rmmod rdmadisk; fi
true" >/dev/null || echo "  cleanup: force unmap / rmmod did not finish in 120 s"
  on storage "$(_dk_tstop)
tstop; rm -f $DK_BACKDIR/$DK_ID-*.img $DK_BACKDIR/$DK_ID-*.img.rdmadisk-id; true" >/dev/null
}
