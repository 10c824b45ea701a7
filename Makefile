# rdmadisk: top-level targets. See README.md.
#
#   make, make module  build rdmadisk.ko (and, once, the cached test kernel it builds against)
#   make kernel     only the cached test kernel
#   make userspace  the userspace tools (target, rdmadiskctl, test client), cargo build --release;
#                   installs only their build dependencies (selftests/host/build-deps.sh)
#   make deps       the host packages and tools the rest needs, the test bed's too (idempotent)
#   make build-deps only what building needs (the module's rustc and bindgen too), no test bed
#   make install    rdmadiskctl and rdmadisk-target (release builds), their completions and man
#                   pages, the udev rules, the systemd units, the example configs, and the
#                   module through DKMS; DESTDIR=, PREFIX= (default /usr/local) and the *DIR
#                   variables below place them; with DESTDIR, the module's DKMS source tree is
#                   staged instead of built. make install-userspace leaves the module out.
#   make uninstall  removes what make install put in place (and the module from DKMS)
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

.PHONY: all module kernel deps build-deps userspace install install-userspace install-module uninstall check check-host check-vm demo bench bench-gateways bench-transport soak clean dkms-install

all: module

deps:
	@selftests/host/deps.sh

build-deps:
	@selftests/host/build-deps.sh all

kernel: deps
	@selftests/kernel/build-kernel.sh >/dev/null

# Resolve the kernel tree: the user's KDIR, or the project's cached build (built if missing).
module: $(if $(KDIR),,deps)
	@kdir="$(KDIR)"; \
	if [ -z "$$kdir" ]; then kdir=$$(selftests/kernel/build-kernel.sh) || exit 1; fi; \
	selftests/kernel/check-kdir.sh "$$kdir" || exit 2; \
	echo "[module] building rdmadisk.ko against $$kdir"; \
	$(MAKE) -C "$$kdir" M=$(CURDIR) $(KMAKEFLAGS) modules

userspace:
	@selftests/host/build-deps.sh userspace
	@echo "[userspace] cargo build --release"
	@cd $(CARGO_DIR) && cargo build --release --workspace --quiet

check-host: deps userspace
	@selftests/host-checks.sh

check-vm: deps module userspace
	@selftests/run.sh

check: deps
	@selftests/check.sh

demo: deps module userspace
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
soak: deps module userspace
	@selftests/soak.sh $(N) $(EVERY)

# TCP against RDMA (4k randread qd 1/16, same-run ratios) and the longest I/O gap in one NIC
# servicing cycle.
bench-transport: deps module userspace
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

# ---------------------------------------------------------------- install
# The binaries go under PREFIX; the units and udev rules where systemd and udev look for a
# package's (not under PREFIX), with the units' /usr/bin/ paths rewritten to BINDIR.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/rdmadisk
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/vendor-completions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
UNITDIR ?= /lib/systemd/system
UDEVDIR ?= /lib/udev/rules.d
SYSCONFDIR ?= /etc
BINS := rdmadiskctl rdmadisk-target
UNITS := $(wildcard userspace-tools/systemd/*.service) userspace-tools/rdmadisk-target/rdmadisk-target.service
UDEV_RULES := $(wildcard userspace-tools/udev/*.rules)
DOCS := userspace-tools/rdmadiskctl/disks.conf.example userspace-tools/rdmadisk-target/rdmadisk-target.example.toml \
	userspace-tools/rdmadisk-target/target.quickstart.toml
MODVER = $(shell sed -n 's/^PACKAGE_VERSION="\(.*\)"$$/\1/p' dkms.conf)

install: install-userspace install-module

# Completions and man pages come from each binary's own command line (clap_complete and
# clap_mangen: `completions SHELL`, `man --dir DIR`); a binary without those commands gets none.
install-userspace:
	@cd $(CARGO_DIR) && cargo build --release --quiet $(addprefix -p ,$(BINS))
	@set -e; d="$(DESTDIR)"; gen=$$(mktemp -d); trap 'rm -rf "$$gen"' EXIT; \
	install -d "$$d$(BINDIR)" "$$d$(MANDIR)/man1" "$$d$(BASHCOMPDIR)" "$$d$(ZSHCOMPDIR)" \
	  "$$d$(FISHCOMPDIR)" "$$d$(UNITDIR)" "$$d$(UDEVDIR)" "$$d$(DOCDIR)" "$$d$(SYSCONFDIR)/rdmadisk"; \
	for b in $(BINS); do \
	  install -m 0755 "$(CARGO_TARGET_DIR)/release/$$b" "$$d$(BINDIR)/$$b"; \
	  if "$(CARGO_TARGET_DIR)/release/$$b" completions bash >"$$gen/$$b.bash" 2>/dev/null; then \
	    install -m 0644 "$$gen/$$b.bash" "$$d$(BASHCOMPDIR)/$$b"; \
	    "$(CARGO_TARGET_DIR)/release/$$b" completions zsh >"$$gen/_$$b"; \
	    install -m 0644 "$$gen/_$$b" "$$d$(ZSHCOMPDIR)/_$$b"; \
	    "$(CARGO_TARGET_DIR)/release/$$b" completions fish >"$$gen/$$b.fish"; \
	    install -m 0644 "$$gen/$$b.fish" "$$d$(FISHCOMPDIR)/$$b.fish"; \
	  else echo "[install] $$b has no completions command: no completions for it"; fi; \
	  mkdir -p "$$gen/man-$$b"; \
	  if "$(CARGO_TARGET_DIR)/release/$$b" man --dir "$$gen/man-$$b" 2>/dev/null; then \
	    install -m 0644 "$$gen/man-$$b"/*.1 "$$d$(MANDIR)/man1/"; \
	  else echo "[install] $$b has no man command: no man page for it"; fi; \
	done; \
	for u in $(UNITS); do \
	  sed 's|/usr/bin/|$(BINDIR)/|g' "$$u" >"$$gen/$${u##*/}"; \
	  install -m 0644 "$$gen/$${u##*/}" "$$d$(UNITDIR)/$${u##*/}"; \
	done; \
	for r in $(UDEV_RULES); do install -m 0644 "$$r" "$$d$(UDEVDIR)/"; done; \
	install -m 0644 $(DOCS) "$$d$(DOCDIR)/"; \
	echo "[install] $(BINS) in $$d$(BINDIR); units in $$d$(UNITDIR); udev rules ($(words $(UDEV_RULES))) in $$d$(UDEVDIR); examples in $$d$(DOCDIR)"; \
	if [ -z "$$d" ]; then \
	  command -v systemctl >/dev/null && systemctl daemon-reload 2>/dev/null || true; \
	  command -v udevadm >/dev/null && udevadm control --reload 2>/dev/null || true; \
	fi

# The module through DKMS (rebuilt for every new kernel): the source tree in
# /usr/src/rdmadisk-<version>, then dkms add and install (make dkms-install). Under DESTDIR only
# the source tree is staged, as a -dkms package ships it; its installer runs dkms add.
install-module:
	@if [ -n "$(DESTDIR)" ]; then \
	  rm -rf "$(DESTDIR)/usr/src/rdmadisk-$(MODVER)" && \
	  selftests/host/dkms-source.sh "$(DESTDIR)/usr/src/rdmadisk-$(MODVER)" && \
	  echo "[install] module source for DKMS in $(DESTDIR)/usr/src/rdmadisk-$(MODVER)"; \
	else $(MAKE) --no-print-directory dkms-install; fi

uninstall:
	@d="$(DESTDIR)"; \
	for b in $(BINS); do \
	  rm -f "$$d$(BINDIR)/$$b" "$$d$(BASHCOMPDIR)/$$b" "$$d$(ZSHCOMPDIR)/_$$b" "$$d$(FISHCOMPDIR)/$$b.fish" \
	    "$$d$(MANDIR)/man1/$$b.1" "$$d$(MANDIR)/man1/$$b"-*.1; \
	done; \
	for u in $(UNITS); do rm -f "$$d$(UNITDIR)/$${u##*/}"; done; \
	for r in $(UDEV_RULES); do rm -f "$$d$(UDEVDIR)/$${r##*/}"; done; \
	if [ -z "$$d" ] && command -v dkms >/dev/null; then dkms remove -m rdmadisk -v $(MODVER) --all >/dev/null 2>&1 || true; fi; \
	rm -rf "$$d$(DOCDIR)" "$$d/usr/src/rdmadisk-$(MODVER)"; \
	echo "[uninstall] done ($(SYSCONFDIR)/rdmadisk is left as it is)"
