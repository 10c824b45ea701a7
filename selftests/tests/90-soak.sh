# The soak (lib/soak.sh): verified fio on one disk and ext4 with a sha256 manifest of fsynced
# files on another, for SOAK_N cycles (1 here, and two of the kinds, see below; `make soak N=100`
# runs the full one, NIC servicing every cycle and each other kind every SOAK_EVERY-th, see
# lib/soak.sh): rdma link delete/add, link down/up, 1% loss with 5 ms delay,
# target kill -9 and restart, target SIGSTOP past the I/O timeout, corrupted payloads,
# transport flips, and a failback that fails (the target refuses RDMA while TCP works).
# With SOAK_DEATHS=1 (make soak) a permanent target death, killed and frozen, follows.
#
# Acceptance: every episode recovers; every fio round verified with no error; no failed fsync,
# e2fsck clean, every manifest file intact; io_errors=0; kmemleak finds nothing; unmap and
# rmmod succeed; no splat. The per-fault table is printed (and written to $TB_DIR/soak.md).
# timeout: 1800

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
# shellcheck source-path=SCRIPTDIR source=lib/ext4.sh
source "$TB_REPO/selftests/tests/lib/ext4.sh"
# make check's smoke injects two of the kinds once, enough to keep the soak's machinery from
# rotting: NIC servicing (the full soak's main drill) and loss with delay (netem's only test);
# make soak (SOAK_DEATHS=1) runs every kind. The others have their own tests in make check
# (74 link down, 65 and 80 a frozen target, 80 and 83 a killed one, 63 and 81 corruption,
# 71 flips, 77 a failed failback).
[ -n "${SOAK_DEATHS:-}" ] || SOAK_KINDS=${SOAK_KINDS:-"nic netem"}
# The smoke writes some 50 files: keeping 16 makes its writer remove (and first read back and
# check) most of them, as the full soak's does.
[ -n "${SOAK_DEATHS:-}" ] || FS_KEEP=${FS_KEEP:-16}
# shellcheck source-path=SCRIPTDIR source=lib/soak.sh
source "$TB_REPO/selftests/tests/lib/soak.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
N=${SOAK_N:-1}
tr_dmesg_mark

soak_setup
if ! res $? "two disks (d90: verified fio rounds; e90: ext4 with an fsync'd manifest), sampler on"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
t0=$SECONDS
soak_run "$N"
echo "  $N cycle(s) of: $SOAK_KINDS in $((SECONDS - t0)) s"
notrec=$(awk '$5 != "yes"' "$TB_DIR/$DK_ID.windows" | head)
[ -z "$notrec" ]
res $? "every fault episode ($(grep -c . "$TB_DIR/$DK_ID.windows")) recovered within ${SOAK_RECOVER_S} s, back on RDMA (rxe0 re-created for soft-RoCE's QP1 after $(awk '$6 == 1' "$TB_DIR/$DK_ID.windows" | wc -l) of them)${notrec:+; not: $notrec}"
soak_finish
soak_report >"$TB_DIR/soak.md"
sed 's/^/  /' "$TB_DIR/soak.md"
if [ -n "${SOAK_DEATHS:-}" ]; then
  LOSS=15 MARGIN=30
  death killed KILL
  death frozen STOP
fi
tr_splat_check
dk_cleanup
