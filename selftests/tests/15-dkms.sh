# DKMS: the module built by `dkms build` from dkms.conf, against the test kernel's tree, as a
# user's host would build it for each kernel it boots.
#
# The sources go into a DKMS source directory the way `make dkms-install` puts them
# (selftests/host/dkms-source.sh); `dkms build` runs with its own DKMS tree under the test's
# directory (nothing of the host's /var/lib/dkms is touched), the test kernel's tree as the
# kernel source, and the rustc and bindgen of `make module` first on PATH.
#
# Acceptance: the build succeeds, with no warning in DKMS's make log; the module it built
# loads in the compute VM and reports dkms.conf's version; a disk mapped with it takes 1 MiB of
# crc32c-verified writes; unmap and rmmod work.

# shellcheck shell=bash source-path=SCRIPTDIR source=lib/disk.sh disable=SC2317 # "return || exit": sourced by run.sh
source "$TB_REPO/selftests/tests/lib/disk.sh"
if ! dk_build; then return 0 2>/dev/null || exit 0; fi

ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$TB_REPO/dkms.conf")
kdir=$("$TB_REPO/selftests/kernel/build-kernel.sh" 2>/dev/null)
kver=$(make -s -C "$kdir" kernelrelease 2>/dev/null)
T=$TB_DIR/dkms
rm -rf "$T" && mkdir -p "$T/src" "$T/tree"
t0=$SECONDS
"$TB_REPO/selftests/host/dkms-source.sh" "$T/src/rdmadisk-$ver" &&
  PATH=${RDMADISK_CACHE:-$HOME/.cache/rdmadisk}/bin:/usr/bin:$PATH \
    dkms build -m rdmadisk -v "$ver" -k "$kver" --kernelsourcedir "$kdir" \
    --dkmstree "$T/tree" --sourcetree "$T/src" >"$T/dkms.out" 2>&1
rc=$?
log=$T/tree/rdmadisk/$ver/$kver/$(uname -m)/log/make.log
ko=$T/tree/rdmadisk/$ver/$kver/$(uname -m)/module/rdmadisk.ko
[ $rc = 0 ] && [ -f "$ko" ] && ! grep -q warning "$log"
if ! res $? "dkms build -m rdmadisk -v $ver -k $kver against the test kernel tree: $((SECONDS - t0)) s, no warning in its make log"; then
  tail -n 20 "$T/dkms.out" "$log" 2>/dev/null | indent
  return 0 2>/dev/null || exit 0
fi

DK_KO=$ko
back=$(dk_backing vol0 16M)
dk_target_start --export "vol0=$back" >/dev/null && dk_load &&
  [ "$(on compute "cat $DK_CTL/version")" = "$ver protocol $(sed -n 's/^pub const VERSION: u16 = \([0-9]*\);$/\1/p' "$TB_REPO/userspace-tools/rdmadisk-proto/src/wire.rs")" ] &&
  dk_map_disk d15 vol0
if ! res $? "the DKMS-built module loads, reports version $ver, and maps /dev/${DK_DEV:-?}"; then
  dk_cleanup; return 0 2>/dev/null || exit 0
fi
dk_fio w "--name=w --filename=/dev/$DK_DEV --rw=randwrite --bs=4k --size=1M --iodepth=4 --verify=crc32c --do_verify=1"
res $? "1 MiB of crc32c-verified 4 KiB writes through it: $FIO_SUM"
dk_unmap_rmmod 30 "$DK_DEV"
res $? "unmap and rmmod"
dk_cleanup
