# Loads a module that hits WARN_ON in the compute VM (used only by splat-selftest.sh).
if on compute "insmod $TB_REPO/selftests/harness/warn/rdmadisk_warn_test.ko && rmmod rdmadisk_warn_test"; then
  echo "ok - loaded a module that hits WARN_ON"
else
  echo "not ok - could not load the WARN_ON module"
fi
