#!/usr/bin/env bash
# dkms-source.sh DEST: copies what the module is built from (Kbuild, dkms.conf, include/, rust/,
# src/, and the shared protocol files that src/proto.rs includes by path) into DEST, a DKMS
# source directory such as /usr/src/rdmadisk-<version>. Used by `make dkms-install` and by
# tests/15-dkms.sh.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:?usage: dkms-source.sh DEST}
mkdir -p "$dest"
cd "$top"
# The tracked files only (no build products), from the work tree as it is.
git ls-files -z Kbuild dkms.conf include rust src userspace-tools/rdmadisk-proto/src |
  xargs -0 cp --parents -t "$dest"
