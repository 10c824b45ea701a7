# shellcheck shell=bash
# Several rdmadisk-target gateways of one RBD image on the storage VM, for test 89 and
# bench/gateways.sh (make bench-gateways). Gateway N listens on ports 7700+10N (RDMA) and
# 7701+10N (TCP), with its own log, pid and stats files.
# Sourced after lib/disk.sh and lib/transport.sh.

gw() { # gw N FUNCTION ARGS...: a lib/disk.sh target function, for gateway N
  local n=$1
  shift
  DK_PORT=$((7700 + 10 * n)) DK_TCP_PORT=$((7701 + 10 * n)) DK_TLOG=$TB_DIR/$DK_ID.gw$n.log \
    DK_TPID=$TB_DIR/$DK_ID.gw$n.pid DK_STATS=$TB_DIR/$DK_ID.gw$n.stats "$@"
}

gw_sig() { on storage "kill -$2 \$(cat $TB_DIR/$DK_ID.gw$1.pid)" >/dev/null; } # gw_sig N SIGNAL

# gw_targets N: the map line's target= list for gateways 0..N-1
gw_targets() {
  local n s=
  for ((n = 0; n < $1; n++)); do s+="${s:+,}$DK_S:$((7700 + 10 * n)):$((7701 + 10 * n))"; done
  echo "target=$s"
}

# gw_wait DEV PATH SECONDS: until active_path reads PATH and the disk is live; prints "ms=N"
gw_wait() {
  on compute "$DK_VM_DEFS
now_us; t0=\$us
while :; do
  a=; s=; read -r a _ 2>/dev/null </sys/block/$1/rdmadisk/active_path; read -r s 2>/dev/null </sys/block/$1/rdmadisk/state
  now_us; ms=\$(( (us - t0) / 1000 ))
  [ \"\$a\" = $2 ] && [ \"\$s\" = live ] && { echo ms=\$ms; exit 0; }
  [ \$ms -ge $(($3 * 1000)) ] && { echo ms=\$ms active_path=\$a state=\$s; exit 1; }
  pause 0.2
done"
}
