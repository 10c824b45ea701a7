# Module load/unload, 10 times, with the control directory appearing and going each time.
ko=$TB_REPO/rdmadisk.ko
out=$(on compute "
cycle() {
  insmod $ko || return 1
  test -d /sys/class/rdmadisk/ctl || { echo 'no /sys/class/rdmadisk/ctl after load'; return 1; }
  grep -Eqx '[0-9.]+ protocol [0-9]+' /sys/class/rdmadisk/ctl/version ||
    { echo 'unexpected version:' \$(cat /sys/class/rdmadisk/ctl/version); return 1; }
  rmmod rdmadisk || return 1
  test ! -e /sys/class/rdmadisk || { echo '/sys/class/rdmadisk left after unload'; return 1; }
}
n=0
while [ \$n -lt 10 ] && cycle; do n=\$((n + 1)); done
echo cycles=\$n
# Leave the VM as found, whatever happened.
rmmod rdmadisk 2>/dev/null
echo loads=\$(dmesg | grep -c 'rdmadisk: loaded')
")
echo "$out"
if grep -q '^cycles=10$' <<<"$out"; then
  echo "ok - insmod/rmmod 10 times, /sys/class/rdmadisk/ctl created and removed each time"
else
  echo "not ok - insmod/rmmod 10 times"
fi
