# shellcheck shell=bash
# The benchmarks' kernel (sourced by bench/peers.sh and bench/gateways.sh, with HERE set to
# selftests/): BENCH_KERNEL bench (the default: the test kernel without its debug options,
# selftests/kernel/bench.config, with this module built against it) or debug (the test
# kernel). Sets BP_KDIR (the kernel tree) and, on the bench kernel, DK_KO.
export KERNEL_FLAVOR=${BENCH_KERNEL:-bench}
case $KERNEL_FLAVOR in
  debug) why="the test kernel, with lockdep, KFENCE, kmemleak and DEBUG_ATOMIC_SLEEP" ;;
  bench) why="the bench kernel: the test kernel without its debug options (selftests/kernel/bench.config)" ;;
  *) echo "BENCH_KERNEL=$KERNEL_FLAVOR: it is bench or debug" >&2; exit 2 ;;
esac
echo "# [bench] kernel: $why"
BP_KDIR=$("$HERE/kernel/build-kernel.sh") || exit 1
if [ "$KERNEL_FLAVOR" = bench ]; then
  # The module, built against the bench kernel from a copy of its sources (Kbuild builds in
  # the source directory, where the test kernel's build lives).
  modsrc=$HERE/out/module-bench
  rm -rf "$modsrc" && "$HERE/host/dkms-source.sh" "$modsrc" &&
    make -s -C "$BP_KDIR" M="$modsrc" RUSTC=/usr/bin/rustc HOSTRUSTC=/usr/bin/rustc \
      BINDGEN="${RDMADISK_CACHE:-$HOME/.cache/rdmadisk}/bin/bindgen" modules >/dev/null ||
    { echo "# [bench] cannot build rdmadisk.ko against $BP_KDIR" >&2; exit 1; }
  export DK_KO=$modsrc/rdmadisk.ko
fi
export BP_KDIR
