# Credit flow control: the target grants only 4 request credits per connection
# (--credits 4); fio asks for 32 requests in flight. The driver must never send a request
# without a credit (it would hit a missing receive: both sides connect with rnr_retry_count 0,
# so that is a connection error, not a silent retry). It waits instead (BLK_STS_RESOURCE).
#
# Acceptance: fio randrw with crc32c verify completes with no error; the client's
# max_outstanding is at most 4 and credit_waits is above 0.

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

back=$(dk_backing vol0 64M)
dk_target_start --credits 4 --export "vol0=$back" >/dev/null &&
  dk_load && dk_map_disk d62 vol0
if ! res $? "target with --credits 4; insmod; map name=d62: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV

dk_fio qd32 "--name=qd32 --filename=/dev/$dev --rw=randrw --bsrange=4k-128k --verify=crc32c --do_verify=1 --size=8M --iodepth=32 --randseed=62"
res $? "fio randrw 8 MiB, 4-128 KiB blocks, iodepth 32, crc32c-verified: $FIO_SUM"

dk_csnap "$dev"
dk_tsnap
dk_show client "$DK_CS"
n_gt "$(cstat max_outstanding)" 0 && n_le "$(cstat max_outstanding)" 4
res $? "client: max_outstanding=$(cstat max_outstanding), never above the 4 credits"
n_gt "$(cstat credit_waits)" 0
res $? "client: credit_waits=$(cstat credit_waits) > 0 (requests waited for a credit)"
bad=
for k in io_errors timeouts; do n_eq "$(cstat $k)" 0 || bad+=" $k=$(cstat $k)"; done
for k in resets rdma_errors bound_violations; do n_eq "$(tstat $k)" 0 || bad+=" target:$k=$(tstat $k)"; done
[ -z "$bad" ]
res $? "no I/O error or timeout; target: no reset, RDMA error or refused request${bad:+ (got$bad)}"
# A request sent without a credit meets no receive (rnr_retry 0): its Send fails with an RNR
# error and resets the connection. No reset at all is allowed (lib/disk.sh, dk_resets_ok).
dk_resets_ok d62
res $? "no connection reset (an RNR error would be one): $DK_RESETS"
echo "  target: requests=$(tstat requests) reads=$(tstat reads) writes=$(tstat writes) credit_waits=$(tstat credit_waits) rdma_connections=$(tstat rdma_connections)"

dk_unmap_rmmod 10 "$dev"
res $? "unmap normal; rmmod rdmadisk"
dk_cleanup
