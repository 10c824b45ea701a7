# Module load/unload, 20 times, with the control directory appearing and going each time.
ko=$TB_REPO/rdmadisk.ko
out=$(on compute "
set -e
for i in \$(seq 20); do
  insmod $ko
  test -d /sys/class/rdmadisk/ctl || { echo 'no /sys/class/rdmadisk/ctl after load' \$i; exit 1; }
  grep -Eqx "[0-9.]+ protocol [0-9]+" /sys/class/rdmadisk/ctl/version
  rmmod rdmadisk
  test ! -e /sys/class/rdmadisk || { echo '/sys/class/rdmadisk left after unload' \$i; exit 1; }
done
echo cycles=\$i
dmesg | grep -c 'rdmadisk: loaded'
")
rc=$?
echo "$out"
if [ $rc -eq 0 ] && grep -q '^cycles=20$' <<<"$out"; then
  echo "ok - insmod/rmmod 20 times, /sys/class/rdmadisk/ctl created and removed each time"
else
  echo "not ok - insmod/rmmod 20 times"
fi
