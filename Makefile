# rdmadisk: top-level targets. See README.md.
#
#   make, make module  build rdmadisk.ko (and, once, the cached test kernel it builds against)
#   make kernel     only the cached test kernel
#   make userspace  the userspace tools (target, test client), cargo build --release
#   make deps       the host packages and tools the rest needs (idempotent)
#   make check      every test: host checks, then the two-VM test bed (.ci/run runs this)
#   make check-host only the host checks: rustfmt of the module sources (with the kernel's
#                   settings, .rustfmt.toml), cargo fmt, clippy and test of userspace-tools, a
#                   bounded fuzz of the protocol decoders; needs no kernel build
#   make check-vm   only the test-bed tests (selftests/run.sh)
#   make demo       boot the test bed, map /dev/rdmadisk0 and run fio on it over RDMA, over TCP
#                   while the NIC is serviced, and over RDMA again
#   make bench      rdmadisk against nvme-rdma, nvme-tcp and RNBD on the same link and RAM disk,
#                   on a bench kernel without the debug options (figures and same-run ratios,
#                   selftests/out/bench/; docs/bench/ is the committed run)
#   make bench-transport  TCP against RDMA figures, and the I/O gap of a NIC servicing cycle
#   make bench-gateways  the I/O gap when a disk's gateway dies and comes back, against nvme
#                   native multipath losing and regaining a port (selftests/out/bench-gateways/;
#                   docs/bench/gateways/ is the committed run)
#   make soak N=100 [EVERY=10]  NIC servicing in each of N cycles and every other fault kind in
#                   every EVERY-th, under verified I/O, then permanent target deaths; the
#                   reliability table (55-69 minutes under TCG for N=100, docs/reliability.md)
#   make clean      the module's build products, the generated bindings, cargo's target dir
#   make dkms-install  the module's sources into /usr/src/rdmadisk-<version>, dkms add and
#                   install (a real host: see README.md, "On real hosts")
#
# KDIR=<tree> builds the module against another Rust-enabled 6.12 tree (a real host's
# /lib/modules/$(uname -r)/build, say), with the rustc and bindgen on PATH, or those named in
# RDMADISK_KMAKEFLAGS; it installs none of the test bed's packages.

SHELL := /bin/bash
CACHE ?= $(HOME)/.cache/rdmadisk
export RDMADISK_CACHE := $(CACHE)
# Cargo's build directory lives in the cache too, so a fresh clone does not rebuild every
# crate (cargo locks it: two builds at once wait for each other).
export CARGO_TARGET_DIR ?= $(CACHE)/cargo-target
ifdef KDIR
KMAKEFLAGS := $(RDMADISK_KMAKEFLAGS)
else
KMAKEFLAGS := RUSTC=/usr/bin/rustc HOSTRUSTC=/usr/bin/rustc BINDGEN=$(CACHE)/bin/bindgen
endif
CARGO_DIR := userspace-tools

.PHONY: all module kernel deps userspace check check-host check-vm demo bench bench-gateways bench-transport soak clean dkms-install

all: module

deps:
	@selftests/host/deps.sh

kernel: deps
	@selftests/kernel/build-kernel.sh >/dev/null

# Resolve the kernel tree: the user's KDIR, or the project's cached build (built if missing).
module: $(if $(KDIR),,deps)
	@kdir="$(KDIR)"; \
	if [ -z "$$kdir" ]; then kdir=$$(selftests/kernel/build-kernel.sh) || exit 1; fi; \
	selftests/kernel/check-kdir.sh "$$kdir" || exit 2; \
	echo "[module] building rdmadisk.ko against $$kdir"; \
	$(MAKE) -C "$$kdir" M=$(CURDIR) $(KMAKEFLAGS) modules

userspace: deps
	@echo "[userspace] cargo build --release"
	@cd $(CARGO_DIR) && cargo build --release --workspace --quiet

check-host: userspace
	@selftests/host-checks.sh

check-vm: module userspace
	@selftests/run.sh

check: deps
	@selftests/check.sh

demo: module userspace
	@selftests/demo.sh

# Benchmarks: figures and same-run ratios, not pass/fail. make bench: rdmadisk against
# nvme-rdma, nvme-tcp and RNBD on the same link and RAM disk (selftests/out/bench/; the committed
# set is in docs/bench/), on the bench kernel: the test kernel without its debug options (built
# once and cached like it, with the module built against it). BENCH_KERNEL=debug runs on the
# test kernel instead. BENCH_REPS, BENCH_SECS, BENCH_SYSTEMS, BENCH_JOBS, BENCH_FLOOR=0,
# BENCH_GAP=0 and BENCH_DIAG=0 narrow it (selftests/bench/peers.sh).
BENCH_KERNEL ?= bench
export BENCH_KERNEL
bench: $(if $(filter debug,$(BENCH_KERNEL)),module) deps userspace
	@selftests/bench/peers.sh

# The I/O gap when the path serving a disk goes and comes back: rdmadisk's two gateways of one
# RBD image against nvme native multipath over two nvmet ports, on the bench kernel (the one
# with nvme multipath). BENCH_REPS, BENCH_GAP_SECS (selftests/bench/gateways.sh).
bench-gateways: $(if $(filter debug,$(BENCH_KERNEL)),module) deps userspace
	@selftests/bench/gateways.sh

# The full soak: N cycles under verified I/O, NIC servicing in each and every other fault kind
# in every EVERY-th (default N/10), then permanent target deaths; writes
# selftests/out/reliability.md. make soak N=100 took 55-69 minutes under TCG (docs/reliability.md).
N ?= 100
EVERY ?=
soak: module userspace
	@selftests/soak.sh $(N) $(EVERY)

# TCP against RDMA (4k randread qd 1/16, same-run ratios) and the longest I/O gap in one NIC
# servicing cycle.
bench-transport: module userspace
	@selftests/bench/tcp-vs-rdma.sh

clean:
	@kdir="$(KDIR)"; [ -n "$$kdir" ] || kdir=$$(ls -d $(CACHE)/linux-* 2>/dev/null | head -1); \
	if [ -n "$$kdir" ] && [ -f "$$kdir/Makefile" ]; then $(MAKE) -C "$$kdir" M=$(CURDIR) clean; fi
	@rm -f rust/bindings_generated.rs
	@cd $(CARGO_DIR) && cargo clean

dkms-install:
	@ver=$$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$$/\1/p' dkms.conf); \
	command -v dkms >/dev/null || { echo "dkms is not installed"; exit 1; }; \
	dkms remove -m rdmadisk -v $$ver --all >/dev/null 2>&1; \
	rm -rf /usr/src/rdmadisk-$$ver && selftests/host/dkms-source.sh /usr/src/rdmadisk-$$ver && \
	dkms add -m rdmadisk -v $$ver && dkms install -m rdmadisk -v $$ver
