# The module's ib_client sees the compute side's RDMA device removed and added again.
ko=$TB_REPO/rdmadisk.ko
ctl=/sys/class/rdmadisk/ctl
nic=$(cat "$TB_DIR/compute.nic")

check() { # check DESCRIPTION SCRIPT
  local desc=$1 out
  if out=$(on compute "$2" 2>&1); then echo "ok - $desc"; else echo "not ok - $desc"; printf '%s\n' "$out"; fi
}

check "ib_client add: rxe0 listed in $ctl/ib_devices at load" "
insmod $ko && grep -qx rxe0 $ctl/ib_devices && dmesg | grep -q 'rdmadisk: RDMA device rxe0 added'"
check "ib_client remove: 'rdma link delete rxe0' returns and rxe0 leaves ib_devices" "
timeout 30 rdma link delete rxe0 && ! grep -q rxe0 $ctl/ib_devices && dmesg | grep -q 'rdmadisk: RDMA device rxe0 removed'"
check "ib_client add: 'rdma link add rxe0' brings it back" "
rdma link add rxe0 type rxe netdev $nic && grep -qx rxe0 $ctl/ib_devices && test \$(dmesg | grep -c 'rdmadisk: RDMA device rxe0 added') -ge 2"
check "rmmod with an RDMA device present" "rmmod rdmadisk && ! test -e $ctl"
on compute "rmmod rdmadisk 2>/dev/null; true" >/dev/null   # leave the VM as found
