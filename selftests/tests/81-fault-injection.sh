# The module's own fault injection (/sys/kernel/debug/rdmadisk/rdmadiskN/), one fault at a
# time, each under a short verified fio run: corrupted read data and write CRCs, failed MR
# registrations, delayed and dropped responses, QP errors, failed connects (RDMA), then failed
# and cut-short sends and dropped responses on TCP.
#
# Acceptance, for every fault: it fired (its _hits counter rose), the client counted what it
# caused (CRC errors and retries, timeouts, reconnects, connect failures), and fio finished
# with no error and its data verified; io_errors=0 at the end; no kernel splat. Every switch
# is off by default.
# timeout: 1500

# shellcheck source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
# shellcheck source-path=SCRIPTDIR source=lib/transport.sh
source "$TB_REPO/selftests/tests/lib/transport.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi
tr_dmesg_mark

back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load && dk_map_disk d81 vol0
if ! res $? "target; insmod; map name=d81: /dev/${DK_DEV:-?} is live"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dev=$DK_DEV
F=/sys/kernel/debug/rdmadisk/$dev
out=$(on compute "ls $F | wc -l; cat $F/*_every $F/*_percent | sort -u | tr '\n' ' '")
[ "$(head -n1 <<<"$out")" -ge 25 ] && [ "$(tail -n1 <<<"$out")" = "0 " ]
res $? "debugfs: $F has every switch, all off ($(tr '\n' ' ' <<<"$out"))"
tr_set "$dev" transport=rdma io_timeout_ms=3000 loss_timeout_s=300
seed=810

# fault NAME SETTINGS COUNTERS...: sets the switches (file=value ...), runs fio, turns them
# off, and checks that the fault fired, that each counter rose, and that fio was clean.
fault() {
  local name=$1 settings=$2 kv set= unset= before after k bad=
  shift 2
  for kv in $settings; do set+="echo ${kv#*=} >$F/${kv%%=*}; "; unset+="echo 0 >$F/${kv%%=*}; "; done
  before=$(tr_stat "$dev" "$@")
  on compute "$set" >/dev/null
  seed=$((seed + 1))
  dk_fio "$name" "--name=$name --filename=/dev/$dev --rw=randrw --rwmixread=50 --bsrange=4k-64k --iodepth=8 --size=2M --verify=crc32c --do_verify=1 --randseed=$seed" >/dev/null
  local ok=$?
  on compute "$unset" >/dev/null
  hits=$(on compute "cat $F/${name}_hits")
  after=$(tr_stat "$dev" "$@")
  local i=1
  for k in "$@"; do
    n_gt "$(cut -d' ' -f$i <<<"$after")" "$(cut -d' ' -f$i <<<"$before")" || bad+=" $k"
    i=$((i + 1))
  done
  [ $ok = 0 ] && n_gt "$hits" 0 && [ -z "$bad" ]
  res $? "$name ($settings): fired $hits times; $* went from ($before) to ($after); $FIO_SUM${bad:+; did not rise:$bad}"
}

fault corrupt_read "corrupt_read_every=7" crc_read_errors crc_retries
fault corrupt_write_crc "corrupt_write_crc_every=7" crc_write_errors crc_retries
fault fail_mr_reg "fail_mr_reg_every=4" rdma_ios
fault delay_response "delay_response_every=10 delay_ms=300" rdma_ios
fault drop_response "drop_response_every=60" timeouts reconnects
fault qp_error "qp_error_every=80" reconnects
fault fail_connect "fail_connect_every=2 qp_error_every=80" connect_failures reconnects

tr_set "$dev" transport=tcp && tr_wait tcp "$dev" 120 tcp
res $? "transport=tcp: on TCP ($TR_WAIT)"
fault fail_tcp_send "fail_tcp_send_every=40" reconnects tcp_ios
# Frames cut short in queue_rq and finished by the send work: nothing lost or interleaved.
fault short_tcp_send "short_tcp_send_every=3" tcp_ios
fault drop_response "drop_response_every=60" timeouts reconnects

dk_csnap "$dev"
n_eq "$(cstat io_errors)" 0 && [ "$(on compute "cat /sys/block/$dev/rdmadisk/state")" = live ]
res $? "io_errors=$(cstat io_errors), state live after every fault"
dk_unmap_rmmod 30 "$dev"
res $? "unmap normal; rmmod"
tr_splat_check
dk_cleanup
