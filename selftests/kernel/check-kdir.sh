#!/usr/bin/env bash
# Checks that $1 is a configured and built Rust-enabled kernel tree, with one clear message if not.
kdir=$1
fail() {
  echo "error: KDIR=$kdir $1" >&2
  echo "       Leave KDIR unset to build and use the project's cached test kernel, or point it at" >&2
  echo "       a 6.12 tree built with CONFIG_RUST=y (its rust/ artifacts included)." >&2
  exit 2
}
[ -d "$kdir" ] || fail "does not exist."
[ -f "$kdir/Makefile" ] || fail "is not a kernel tree (no Makefile)."
[ -f "$kdir/.config" ] || fail "is not configured (no .config)."
grep -qx 'CONFIG_RUST=y' "$kdir/.config" || fail "was not configured with CONFIG_RUST=y."
[ -f "$kdir/rust/libkernel.rmeta" ] || fail "has no built Rust support (rust/libkernel.rmeta missing): build it first."
[ -f "$kdir/Module.symvers" ] || fail "has not been built (no Module.symvers)."
exit 0
