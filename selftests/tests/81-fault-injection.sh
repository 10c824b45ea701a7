# The module's own fault injection (/sys/kernel/debug/rdmadisk/rdmadiskN/), one fault at a
# time, each under a short verified fio run: corrupted read data and write CRCs, failed DMA
# mappings of a request's pages (fail_mr_reg), delayed and dropped responses, QP errors, failed connects (RDMA), then failed
# and cut-short sends and dropped responses on TCP.
#
# Acceptance, for every fault: it fired (its _hits counter rose), the client counted what it
# caused (CRC errors and retries, timeouts, reconnects, connect failures), and fio finished
# with no error and its data verified; no kernel splat. Every switch is off by default.
#
# And a mapping that keeps failing (fail_mr_reg_percent=100, loss_timeout_s=8) under one direct
# read: blk-mq tries it again every few ms, but the read fails (EIO) once older than
# loss_timeout_s, within loss_timeout_s + 6 s, with at most one warning per 5 s and a line
# saying why it failed; it is the run's only I/O error.
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
# off, and checks that the fault fired, that each counter rose, and that fio was clean. A
# fault whose effect no counter of its own shows has a function check_NAME, called with
# "before" and then with "after HITS": it checks that effect (status) and says what it saw
# (CHECK_TEXT).
fault() {
  local name=$1 settings=$2 kv set= unset= before after k bad= ck= ck_ok=0
  shift 2
  for kv in $settings; do set+="echo ${kv#*=} >$F/${kv%%=*}; "; unset+="echo 0 >$F/${kv%%=*}; "; done
  before=$(tr_stat "$dev" "$@")
  CHECK_TEXT=
  declare -F "check_$name" >/dev/null && ck=check_$name
  [ -z "$ck" ] || $ck before
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
  [ -z "$ck" ] || { $ck after "$hits"; ck_ok=$?; }
  [ $ok = 0 ] && n_gt "$hits" 0 && [ -z "$bad" ] && [ $ck_ok = 0 ]
  res $? "$name ($settings): fired $hits times; $* went from ($before) to ($after)${CHECK_TEXT:+; $CHECK_TEXT}; $FIO_SUM${bad:+; did not rise:$bad}"
}

# served: "IOS RECONNECTS TARGET" now: the client's requests completed on the transport in
# use (rdma_ios or tcp_ios, $1), its reconnects, and the reads and writes the target executed.
served() {
  local c
  c=$(tr_stat "$dev" "$1" reconnects)
  dk_tsnap
  echo "$c $(tsum reads writes)"
}
# served_once BEFORE AFTER: every request the client completed reached the target once and
# nothing else did (a request given back and reissued must not be executed twice, nor lost),
# with no reconnect (a connection reset would say the fault broke the connection).
served_once() {
  local c0 r0 t0 c1 r1 t1
  read -r c0 r0 t0 <<<"$1"; read -r c1 r1 t1 <<<"$2"
  CHECK_TEXT="requests completed +$((${c1:-0} - ${c0:-0})), executed by the target +$((${t1:-0} - ${t0:-0})), reconnects +$((${r1:-0} - ${r0:-0}))"
  n_gt "$c1" "$c0" && n_eq $((c1 - c0)) $((t1 - t0)) && n_eq "$r1" "$r0"
}
# A refused registration sends the request back to blk-mq, which issues it again.
check_fail_mr_reg() {
  case $1 in before) S0=$(served rdma_ios) ;; after) served_once "$S0" "$(served rdma_ios)" ;; esac
}
# A frame cut short in queue_rq is finished by the send work: nothing lost, nothing
# interleaved (the target would have reset the connection, or the client its reply).
check_short_tcp_send() {
  case $1 in before) S0=$(served tcp_ios) ;; after) served_once "$S0" "$(served tcp_ios)" ;; esac
}
# slow: requests over RDMA whose response came 2^18 us (262 ms) or more after their last send
# (the telemetry's wire_us buckets 18 and up)
slow() {
  on compute "cat /sys/block/$dev/rdmadisk/telemetry_rdma_read /sys/block/$dev/rdmadisk/telemetry_rdma_write" |
    sed -n 's/^wire_us=//p' | tr ' ' '\n' | awk -F: '$1 >= 18 { n += $2 } END { print n + 0 }'
}
# Each delayed response (delay_ms=300) ends its request 300 ms or more after its send.
check_delay_response() {
  case $1 in
    before) SLOW0=$(slow) ;;
    after)
      local s1; s1=$(slow)
      CHECK_TEXT="requests answered 262 ms or more after their send: ${SLOW0:-?} -> ${s1:-?}"
      is_num "$SLOW0" && is_num "$2" && n_le $((SLOW0 + $2)) "$s1" ;;
  esac
}

fault corrupt_read "corrupt_read_every=7" crc_read_errors crc_retries
fault corrupt_write_crc "corrupt_write_crc_every=7" crc_write_errors crc_retries
fault fail_mr_reg "fail_mr_reg_every=4" rdma_ios
fault delay_response "delay_response_every=10 delay_ms=300" rdma_ios
fault drop_response "drop_response_every=60" timeouts reconnects
fault qp_error "qp_error_every=80" reconnects
fault fail_connect "fail_connect_every=2 qp_error_every=80" connect_failures reconnects

# A request whose pages can never be mapped.
MAPLOSS=8
tr_set "$dev" loss_timeout_s=$MAPLOSS >/dev/null
tr_dmesg_mark
ie0=$(tr_stat "$dev" io_errors)
on compute "echo 100 >$F/fail_mr_reg_percent" >/dev/null
out=$(dk_timed mapfail 60 "t0=\$(date +%s%N); dd if=/dev/$dev of=/dev/null bs=4k count=1 skip=100 iflag=direct 2>&1; echo dd=\$? ms=\$(( (\$(date +%s%N) - t0) / 1000000 ))")
on compute "echo 0 >$F/fail_mr_reg_percent" >/dev/null
printf '%s\n' "$out" | indent
ms=$(sed -n 's/.*dd=[1-9][0-9]* ms=\([0-9]*\)/\1/p' <<<"$out")
log=$(tr_kmsg_since)
warns=$(grep -c "mapping a request's pages for the device failed" <<<"$log")
why=$(grep -c 'could not be mapped for the device for .* (loss_timeout_s): failing it' <<<"$log")
grep "mapping a request's pages\|could not be mapped" <<<"$log" | tail -n 3 | indent
ie1=$(tr_stat "$dev" io_errors)
is_num "$ms" && (( ms <= (MAPLOSS + 6) * 1000 )) && n_gt "$warns" 0 && (( warns <= MAPLOSS / 5 + 2 )) &&
  n_eq "$why" 1 && n_eq "$ie1" $((${ie0:-x} + 1))
res $? "fail_mr_reg_percent=100: a direct read failed after ${ms:-?} ms (want EIO within loss_timeout_s $MAPLOSS + 6 s); $warns warning lines (at most one per 5 s), $why saying why; io_errors ${ie0:-?} -> ${ie1:-?}"
tr_set "$dev" loss_timeout_s=300 >/dev/null

tr_set "$dev" transport=tcp && tr_wait tcp "$dev" 120 tcp
res $? "transport=tcp: on TCP ($TR_WAIT)"
fault fail_tcp_send "fail_tcp_send_every=40" reconnects tcp_ios
# Frames cut short in queue_rq and finished by the send work: nothing lost or interleaved.
fault short_tcp_send "short_tcp_send_every=3" tcp_ios
fault drop_response "drop_response_every=60" timeouts reconnects

dk_csnap "$dev"
n_eq "$(cstat io_errors)" 1 && [ "$(on compute "cat /sys/block/$dev/rdmadisk/state")" = live ]
res $? "io_errors=$(cstat io_errors) (the unmappable read's), state live after every fault"
dk_unmap_rmmod 30 "$dev"
res $? "unmap normal; rmmod"
tr_splat_check
dk_cleanup
