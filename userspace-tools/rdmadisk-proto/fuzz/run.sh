#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
#
# Fuzz every rdmadisk-proto target for SECONDS each, one after another.
#
#   run.sh SECONDS [TARGET...]
#
# Installs cargo-fuzz into the project's tool cache if it is missing, builds
# with debug assertions (the kernel runs with overflow checks on), runs each
# target with libFuzzer bounded by -max_total_time, prints its execution
# count, and ends with "N passed, N failed". Exits non-zero if any target
# crashed or failed to run; the crashing input is kept under artifacts/.
#
# Only a stable toolchain is available, and cargo-fuzz needs -Z flags, so the
# build runs with RUSTC_BOOTSTRAP=1. AddressSanitizer is used when the
# toolchain ships its runtime (override: RDMADISK_FUZZ_SANITIZER=none).
set -u -o pipefail

secs=${1:-}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
	echo "usage: $0 SECONDS [TARGET...]" >&2
	exit 2
fi
shift

here=$(cd "$(dirname "$0")" && pwd)
cache=${RDMADISK_TOOL_CACHE:-$HOME/.cache/rdmadisk}
export PATH="$cache/bin:$HOME/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1

# A kernel build may share the machine's two cores: build with one job then.
if pgrep -f build-kernel.sh >/dev/null 2>&1; then
	export CARGO_BUILD_JOBS=1
fi

if ! command -v cargo-fuzz >/dev/null 2>&1; then
	echo "installing cargo-fuzz into $cache"
	cargo install --locked cargo-fuzz --root "$cache" || {
		echo "cargo-fuzz install failed"
		echo "0 passed, 1 failed"
		exit 1
	}
fi

san=${RDMADISK_FUZZ_SANITIZER:-}
if [ -z "$san" ]; then
	host=$(rustc -vV | sed -n 's/^host: //p')
	if ls "$(rustc --print sysroot)/lib/rustlib/$host/lib/"librustc-*_rt.asan.a >/dev/null 2>&1; then
		san=address
	else
		san=none
	fi
fi

cd "$here" || exit 1
# Built in the tool cache, so that a fresh clone does not rebuild the fuzzers' dependencies
# (a directory of its own: these builds use other flags than the workspace's).
unset CARGO_TARGET_DIR
flags=(-O -a -s "$san" --target-dir "$cache/fuzz-target")

echo "building fuzz targets (sanitizer: $san)"
if ! cargo fuzz build "${flags[@]}"; then
	echo "fuzz build failed"
	echo "0 passed, 1 failed"
	exit 1
fi

if [ $# -gt 0 ]; then
	targets=("$@")
else
	mapfile -t targets < <(cargo fuzz list)
fi

logs="$here/target/run-logs"
mkdir -p "$logs"
passed=0
failed=0
for t in "${targets[@]}"; do
	mkdir -p "corpus/$t" "seeds/$t"
	log="$logs/$t.log"
	start=$(date +%s)
	# The first corpus directory receives new inputs; seeds/ stays as committed.
	cargo fuzz run "${flags[@]}" "$t" "corpus/$t" "seeds/$t" -- \
		-max_total_time="$secs" -print_final_stats=1 -timeout=10 \
		-rss_limit_mb=2048 >"$log" 2>&1
	rc=$?
	elapsed=$(($(date +%s) - start))
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	if [ "$rc" -eq 0 ] && [ -n "$execs" ]; then
		passed=$((passed + 1))
		printf '%-14s ok    %12s execs in %ss\n' "$t" "$execs" "$elapsed"
	else
		failed=$((failed + 1))
		printf '%-14s FAIL  %12s execs in %ss (rc %s, log %s)\n' "$t" "${execs:-?}" "$elapsed" "$rc" "$log"
		grep -E 'panicked|ERROR|SUMMARY|Test unit written|artifact_prefix' "$log" | head -20
	fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
