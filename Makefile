# dapl-ofi: a DAT 2.0 (uDAPL) provider over libfabric.
# Plain GNU Make + pkg-config.  `make help` lists the targets.

VERSION     := 0.1.0
SONAME      := libdaplofi.so.2
PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
BINDIR      ?= $(PREFIX)/bin
MANDIR      ?= $(PREFIX)/share/man
DATADIR     ?= $(PREFIX)/share
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR     ?=

CC          ?= gcc
B           ?= build
# SAN=asan (AddressSanitizer + UBSan) or SAN=tsan (ThreadSanitizer); SAN=fuzz
# (clang only: ASan + UBSan + libFuzzer's coverage) is make fuzz's variant
SAN         ?=

WARN   := -Wall -Wextra -Wmissing-prototypes -Wshadow -Wformat=2 -Werror
CFLAGS ?= -O2 -g
SAN_FLAGS_asan := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_FLAGS_tsan := -fsanitize=thread -fno-omit-frame-pointer
SAN_FLAGS_fuzz := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
SAN_FLAGS := $(SAN_FLAGS_$(SAN))
# The library's sanitizer runtime comes with the program that loads it: in
# the fuzz variant the fuzz target, which clang links with that runtime
# statically and exports (so the library must leave those symbols undefined).
LIB_UNDEF := $(if $(filter fuzz,$(SAN)),,-Wl,--no-undefined)

FABRIC_CFLAGS := $(shell pkg-config --cflags libfabric 2>/dev/null)
FABRIC_LIBS   := $(shell pkg-config --libs libfabric 2>/dev/null || echo -lfabric)
CMOCKA_CFLAGS := $(shell pkg-config --cflags cmocka 2>/dev/null)
CMOCKA_LIBS   := $(shell pkg-config --libs cmocka 2>/dev/null || echo -lcmocka)

ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(CPPFLAGS) $(WARN) $(CFLAGS) $(SAN_FLAGS) -pthread \
	      -fPIC -Isrc -Iinclude $(FABRIC_CFLAGS) $(EXTRA_CFLAGS)
ALL_LDFLAGS := $(LDFLAGS) $(SAN_FLAGS) -pthread

UTIL_SRCS   := src/util/log.c src/util/param.c src/util/arena.c src/util/ia_params.c
EVENT_SRCS  := src/event/evd_core.c src/event/cno_core.c src/event/upcall.c src/event/time.c
FABRIC_SRCS := src/fabric/fabric.c src/fabric/info.c src/fabric/cq.c src/fabric/mr.c src/fabric/post.c \
	       src/fabric/cq_soft.c src/fabric/fdwalk.c src/fabric/keepalive.c \
	       src/fabric/msg/cm.c src/fabric/msg/post.c src/fabric/msg/liveness.c \
	       src/fabric/msg/halfreq.c src/fabric/msg/atomic.c \
	       src/fabric/rdm/bounce.c src/fabric/rdm/bye.c src/fabric/rdm/ep.c src/fabric/rdm/post.c src/fabric/rdm/rcm.c src/fabric/rdm/wire.c \
	       src/fabric/rdm/liveness.c src/fabric/rdm/shmexit.c src/fabric/rdm/sink.c src/fabric/rdm/srx.c \
	       src/fabric/rdm/ud.c
DAT_SRCS    := src/dat/provider.c src/dat/handle.c src/dat/ia.c \
	       src/dat/pz.c src/dat/lmr.c src/dat/evd.c src/dat/cno.c src/dat/ep.c \
	       src/dat/dto.c src/dat/conn.c src/dat/progress.c src/dat/rmr.c src/dat/srq.c \
	       src/dat/cancel.c src/dat/limits.c src/dat/ib.c src/dat/ud.c
LIB_SRCS    := $(UTIL_SRCS) $(EVENT_SRCS) $(FABRIC_SRCS) $(DAT_SRCS)
CORE_SRCS   := $(UTIL_SRCS) $(EVENT_SRCS)
# the RDM backend's connection manager and its wire format (docs/rdm.md):
# their unit tests and fuzz target link them alone until the backend that
# uses them is built
WIRE_SRCS   := src/fabric/rdm/wire.c src/fabric/rdm/rcm.c src/fabric/keepalive.c

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

LIB       := $(B)/$(SONAME)
TOOLS     := $(B)/daplofi-info $(B)/daplofi-demo $(B)/daplofi-perf
# bench/compare's raw-libfabric counterpart of daplofi-perf (not installed)
FIRAW     := $(B)/fi-raw
PAGEWALK  := $(B)/pagewalk
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRCS))
INTEG_SRCS := $(wildcard tests/integ/test_*.c)
INTEG_BINS := $(patsubst tests/integ/%.c,$(B)/tests/%,$(INTEG_SRCS))
DATCONF   := $(B)/dat.conf
# tests/hosts/faults.sh's DAT program, run on the test hosts
FAULTPEER := $(B)/tests/fault_peer
# tests/hosts/soak.sh's DAT program (make soak, and a slice in make check)
SOAK      := $(B)/tests/soak

.PHONY: all lib tools examples tests check check-all soak demo bench bench-smoke install uninstall clean deps help \
	model deb rpm dist fuzz fuzz-build
.DEFAULT_GOAL := all

all: lib tools examples $(FIRAW) $(PAGEWALK) $(DATCONF) $(B)/dapl-ofi.pc

lib: $(LIB)
tools: $(TOOLS)
tests: $(UNIT_BINS) $(INTEG_BINS) $(FAULTPEER) $(SOAK) fabsim-tests

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

# -z nodelete: libdat2 dlcloses the provider at the last dat_ia_close, while
# a thread woken by that close (DAT_ABORT), or one under a signal handler
# that exit()s, may still run on the provider's code.
$(LIB): $(call obj,$(LIB_SRCS)) src/dat/libdaplofi.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/dat/libdaplofi.map \
	      $(LIB_UNDEF) -Wl,-z,nodelete -o $@ $(call obj,$(LIB_SRCS)) $(ALL_LDFLAGS) -ldat2 $(FABRIC_LIBS)
	ln -sf $(SONAME) $(B)/libdaplofi.so

# daplofi-info shares the library's ia_params parser, address resolution and
# fi_getinfo (src/fabric/info.c) to explain a failed open; the open itself
# goes through -ldat2 as any DAT program's.
$(B)/daplofi-info: $(call obj,tools/daplofi-info.c tools/info_selftest.c $(UTIL_SRCS) src/fabric/info.c)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) -ldat2 -ldl $(FABRIC_LIBS)

$(B)/daplofi-demo: $(call obj,tools/daplofi-demo.c)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) -ldat2

# Examples: teaching code (not installed), run by tests/examples.sh; like
# any DAT program they link only -ldat2.
EXAMPLES  := $(B)/upcall-echo
examples: $(EXAMPLES)

$(B)/upcall-echo: $(call obj,examples/upcall_echo.c)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) -ldat2

# The benchmark links only -ldat2, like any DAT program; fi-raw links
# libfabric directly.  Both link the one test engine (tools/perf/perf.c).
$(B)/daplofi-perf: $(call obj,tools/daplofi-perf.c tools/perf/perf.c)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) -ldat2

$(FIRAW): $(call obj,bench/fi-raw.c tools/perf/perf.c)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(FABRIC_LIBS)

$(PAGEWALK): $(call obj,bench/pagewalk.c)
	$(CC) -o $@ $^ $(ALL_LDFLAGS)

# Unit tests link the event core directly (no libfabric, no registry).
$(UNIT_BINS): $(B)/tests/%: $(B)/obj/tests/unit/%.o $(call obj,$(CORE_SRCS) $(WIRE_SRCS))
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(CMOCKA_LIBS)

# Integration tests go through the stock registry: they link -ldat2 only,
# but for test_api_mailbox and test_api_srq_peer, whose hostile peers are
# raw libfabric (the latter speaks the RDM connection manager's wire).
$(INTEG_BINS): $(B)/tests/%: $(B)/obj/tests/integ/%.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) $(CMOCKA_LIBS) -ldat2 $(INTEG_LIBS)
$(B)/tests/test_api_mailbox: INTEG_LIBS = -lfabric
$(B)/tests/test_api_srq_peer: $(call obj,src/fabric/rdm/wire.c)
$(B)/tests/test_api_srq_peer: INTEG_LIBS = -lfabric

$(FAULTPEER): $(B)/obj/tests/hosts/fault_peer.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) -ldat2

$(SOAK): $(B)/obj/tests/hosts/soak.o
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(ALL_LDFLAGS) -ldat2

$(B)/obj/tests/%.o: EXTRA_CFLAGS = $(CMOCKA_CFLAGS) -Wno-missing-prototypes
# The cleanup of a cancelled wait (pthread_cleanup_push) as a cleanup
# attribute that the unwinder runs: no setjmp on each sleep, which glibc's
# fallback for code built without exceptions makes.
$(B)/obj/src/event/evd_core.o $(B)/obj/src/event/cno_core.o: EXTRA_CFLAGS = -fexceptions

# libFuzzer targets (tests/fuzz/README.md), built by clang in build/fuzz
# (make fuzz-build; SAN=fuzz): fuzz_params links the parsers directly,
# fuzz_rdm_wire the RDM connection manager's decoder;
# fuzz_api and fuzz_pdata go through the stock registry to the library
# of the same build, whose coverage they export to (-rdynamic).
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_LINK  = $(CC) -fsanitize=fuzzer -o $@ $^ $(ALL_LDFLAGS) -rdynamic
$(B)/obj/tests/fuzz/%.o: EXTRA_CFLAGS = -Wno-missing-prototypes
$(B)/fuzz/fuzz_params: $(call obj,tests/fuzz/fuzz_params.c tools/info_selftest.c src/util/param.c \
			     src/util/ia_params.c)
	@mkdir -p $(dir $@)
	$(FUZZ_LINK) -ldat2 -ldl
$(B)/fuzz/fuzz_rdm_wire: $(call obj,tests/fuzz/fuzz_rdm_wire.c src/fabric/rdm/wire.c)
	@mkdir -p $(dir $@)
	$(FUZZ_LINK)
$(B)/fuzz/fuzz_api $(B)/fuzz/fuzz_pdata: $(B)/fuzz/%: $(B)/obj/tests/fuzz/%.o
	@mkdir -p $(dir $@)
	$(FUZZ_LINK) -ldat2

# The fuzz variant's build (clang), then each target for FUZZ_SECONDS
# (default 300) from its corpus in tests/fuzz/corpus/, new inputs kept
# in build/fuzz/corpus/ (tests/fuzz/run.sh; it skips where clang's fuzzer
# runtime is missing).  make check runs the same for 10 s each, check-all for 60.
FUZZ_SECONDS ?= 300
fuzz-build:
	@$(MAKE) --no-print-directory CC=clang B=build/fuzz SAN=fuzz lib build/fuzz/dat.conf \
		$(patsubst tests/fuzz/%.c,build/fuzz/fuzz/%,$(FUZZ_SRCS))
fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run.sh

# dat.conf for the build tree: entries point at the library just built.
$(DATCONF): Makefile | $(LIB)
	@mkdir -p $(B)
	@{ echo "# dapl-ofi entries for the build tree (generated by make)"; \
	  echo "ofi-lo u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp lo\" \"\""; \
	  echo "ofi-net-lo u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"net lo\" \"\""; \
	  echo "ofi-lo-rr u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp 127.0.0.1 rdma_read=1\" \"\""; \
	  echo "ofi-lo-extofi u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp lo ext=ofi\" \"\""; \
	  echo "ofi-lo-noatomics u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp lo atomics=0\" \"\""; \
	  echo "ofi-sock-lo u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"sockets 127.0.0.1\" \"\""; \
	  echo "ofi-net-rdm-lo u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"net lo ep=rdm\" \"\""; \
	  echo "ofi-rxm-lo u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp;ofi_rxm lo\" \"\""; \
	  echo "ofi-shm u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"shm lo\" \"\""; \
	  echo "ofi-rxd-lo u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"udp;ofi_rxd lo\" \"\""; \
	  echo "# simulated hardware providers: with FI_PROVIDER_PATH=$(abspath $(B))/fabsim (fabsim/)"; \
	  echo "ofi-sim-efa u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"sim_efa lo\" \"\""; \
	  echo "ofi-sim-psm3 u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"sim_psm3 lo\" \"\""; \
	  echo "ofi-sim-opx u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"sim_opx lo\" \"\""; \
	  echo "ofi-sim-cxi u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"sim_cxi lo\" \"\""; \
	  echo "# deliberately broken entries, used by the tests"; \
	  echo "ofi-bad-params u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp\" \"\""; \
	  echo "ofi-bad-prov u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"nosuchprov lo\" \"\""; \
	  echo "ofi-bad-if u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp nosuchif0\" \"\""; \
	  echo "ofi-bad-key u2.0 nonthreadsafe default $(abspath $(LIB)) dapl.2.0 \"tcp lo frobnicate=1\" \"\""; \
	} > $@

# Programs include dapl-ofi's headers (which need only <dat2/udat.h>) and
# link only -ldat2: libfabric is the provider's business, not theirs, so no
# Requires.private (pkgconf would want libfabric.pc for --cflags too).
$(B)/dapl-ofi.pc: Makefile
	@mkdir -p $(B)
	@printf '%s\n' "prefix=$(PREFIX)" "libdir=$(LIBDIR)" "includedir=$(INCLUDEDIR)" "" \
	  "Name: dapl-ofi" "Description: DAT 2.0 (uDAPL) provider over libfabric" \
	  "Version: $(VERSION)" "Libs: -ldat2" "Cflags: -I\$${includedir}" > $@

deps:
	@scripts/deps.sh

check: deps
	@scripts/check.sh

# Every fabric x sanitizer combination, longer fuzzing (before a release;
# about 40 minutes): what make check leaves out is listed in its output
# with "-- make check-all", and why in the README.
check-all: deps
	@CHECK_LEVEL=all scripts/check.sh

# The soak across the two test hosts (tests/hosts/soak.sh, root): 256
# connections moving verified sends, RDMA writes and reads for
# SOAK_SECONDS on each fabric of SOAK_FABRICS in turn while the network
# loses, flaps and partitions under them (SOAK_SEED repeats a run's
# faults).  Each run is appended to SOAK_LEDGER; tests/hosts/soak-hours
# sums it for bench/RESULTS.md.  make check runs a slice.
SOAK_SECONDS ?= 300
SOAK_FABRICS ?= ofi-host ofi-host-net ofi-host-rxm ofi-host-rdm
SOAK_LEDGER  ?= bench/soak-ledger.tsv
soak: all $(SOAK)
	@rc=0; for ia in $(SOAK_FABRICS); do \
		B=$(B) SOAK_SECONDS=$(SOAK_SECONDS) SOAK_IA=$$ia SOAK_LEDGER=$(SOAK_LEDGER) \
			tests/hosts/soak.sh || rc=1; \
	done; tests/hosts/soak-hours $(SOAK_LEDGER); exit $$rc

# The Promela model of the upcall protocol, every configuration (model/README.md).
model: ; @model/check.sh

# The event core (daplofi-demo, well under a second), then data: a
# daplofi-perf server and client on 127.0.0.1, fi-raw beside it, and their
# picture in $(B)/demo (bench/demo, about 5 s; the picture needs gnuplot).
demo: deps
	@$(MAKE) --no-print-directory all
	@DAT_OVERRIDE=$(abspath $(DATCONF)) $(B)/daplofi-demo -P ofi-lo
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/demo $(B)

# dapl-ofi against raw libfabric (fi_pingpong, fi-raw), 5 alternating runs
# each, medians and ratios (a few minutes), and a size sweep drawn as
# latency and bandwidth curves (about a minute; PNG and SVG in
# $(B)/bench/plots, drawn by gnuplot, which deps installs as root), then
# the polling latencies whose targets sit inside that noise, each from 21
# alternating pairs with a 95 % interval, against fi-raw and against its
# threaded form (the floor) (bench/confidence, about 5 minutes), then what
# the DAT path adds per message in instructions and system calls, which the
# host's noise does not move (bench/instr, callgrind, about 1 minute); the
# report also goes to $(B)/bench-report.md.  bench-smoke: the same with
# tiny counts (seconds), failing only if a program crashes, hangs or prints
# nonsense, or bench/plot cannot draw (when gnuplot is installed).
bench: deps
	@$(MAKE) --no-print-directory all
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/compare -B $(B) -o $(B)/bench-report.md \
		-p $(B)/bench/plots
	@echo; echo "bench/confidence: 8 figures x 21 pairs, about 5 minutes ..."
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/confidence -B $(B) > $(B)/bench-confidence.md; \
	rc=$$?; { echo; echo "## Polling latency, settled by alternating pairs (bench/confidence)"; \
	echo; cat $(B)/bench-confidence.md; } | tee -a $(B)/bench-report.md; exit $$rc
	@echo; echo "bench/instr: instructions and system calls per message, callgrind, about 1 minute ..."
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/instr -B $(B) --set > $(B)/bench-instr.md; \
	rc=$$?; { echo; echo "## Per message, in instructions and system calls (bench/instr)"; \
	echo; cat $(B)/bench-instr.md; } | tee -a $(B)/bench-report.md; exit $$rc
	@echo; echo "Report: $(B)/bench-report.md"; \
	if [ -s $(B)/bench/plots/latency.png ]; then \
		echo "Plots: $(B)/bench/plots/latency.png $(B)/bench/plots/bandwidth.png (and .svg;" \
		     "redraw: bench/plot $(B)/bench/plots/sweep.csv)"; \
	else echo "Plots: none (gnuplot-nox is not installed; then: bench/plot $(B)/bench/plots/sweep.csv)"; fi

bench-smoke: all
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/compare -B $(B) --smoke
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/confidence -B $(B) --smoke
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/calls -B $(B) --smoke
	@DAT_OVERRIDE=$(abspath $(DATCONF)) bench/instr -B $(B) --smoke -- -t send_bw -S 64k

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(PKGCONFIGDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man7 $(DESTDIR)$(DATADIR)/dapl-ofi \
		$(DESTDIR)$(INCLUDEDIR)/dat2
	install -m 755 $(LIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libdaplofi.so
	install -m 755 $(B)/daplofi-info $(B)/daplofi-demo $(B)/daplofi-perf $(DESTDIR)$(BINDIR)/
	install -m 644 $(B)/dapl-ofi.pc $(DESTDIR)$(PKGCONFIGDIR)/dapl-ofi.pc
	install -m 644 $(wildcard include/dat2/*.h) $(DESTDIR)$(INCLUDEDIR)/dat2/
	$(if $(wildcard man/*.1),install -m 644 $(wildcard man/*.1) $(DESTDIR)$(MANDIR)/man1/)
	$(if $(wildcard man/*.3),install -m 644 $(wildcard man/*.3) $(DESTDIR)$(MANDIR)/man3/)
	$(if $(wildcard man/*.7),install -m 644 $(wildcard man/*.7) $(DESTDIR)$(MANDIR)/man7/)
	printf '%s\n' "# dapl-ofi entries: append to /etc/dat.conf, or name this file in DAT_OVERRIDE" \
	  "ofi-lo u2.0 nonthreadsafe default $(SONAME) dapl.2.0 \"tcp lo\" \"\"" \
	  "ofi-lo-rr u2.0 nonthreadsafe default $(SONAME) dapl.2.0 \"tcp 127.0.0.1 rdma_read=1\" \"\"" \
	  "# for programs built to look for extension_supported == DAT_OFI_EXTENSION" \
	  "ofi-lo-extofi u2.0 nonthreadsafe default $(SONAME) dapl.2.0 \"tcp lo ext=ofi\" \"\"" \
	  "# ofi-eth0 u2.0 nonthreadsafe default $(SONAME) dapl.2.0 \"tcp eth0\" \"\"" \
	  > $(DESTDIR)$(DATADIR)/dapl-ofi/dat.conf

# Debian packages (debian/), built from a copy of the tree in build/deb/src so
# that the tree stays clean: the .debs, .changes and .buildinfo land in
# build/deb/.
deb:
	@scripts/deps.sh deb
	rm -rf build/deb && mkdir -p build/deb/src
	tar -cf - --exclude=./build --exclude=./.git . | tar -C build/deb/src -xf -
	cd build/deb/src && dpkg-buildpackage -b -us -uc -Jauto
	@ls build/deb/*.deb build/deb/*.changes

# The source tarball, dapl-ofi-$(VERSION)/ inside: the files git tracks
# (as they are in the working tree), or, outside a git checkout, every file
# but build/; owner, order and dates fixed, so that the same tree gives the
# same tarball.  rpmbuild -ta builds from it (make rpm).
DIST := build/dapl-ofi-$(VERSION).tar.gz
dist:
	@mkdir -p build
	@{ git ls-files 2>/dev/null || find . -path ./build -prune -o -path ./.git -prune -o \
	       -type f -print | sed 's,^\./,,'; } | while IFS= read -r f; do \
		[ -f "$$f" ] && printf '%s\n' "$$f"; done | LC_ALL=C sort | \
	  tar -cf - --no-recursion -T - --transform 's,^,dapl-ofi-$(VERSION)/,' \
	      --owner=0 --group=0 --numeric-owner \
	      --mtime=@$$(git log -1 --format=%ct 2>/dev/null || echo 0) | gzip -n9 > $(DIST)
	@echo $(DIST)

# RPM packages (rpm/dapl-ofi.spec) built by rpmbuild from the tarball, as on
# a RHEL machine (rpmbuild -ta): on Debian, with --nodeps (the build
# dependencies are Debian's packages, not RPMs).  The RPMs and the source
# RPM land in build/rpm/RPMS and build/rpm/SRPMS.  RPM_PACKAGER is the
# Packager tag (who built them: a site sets its own).
RPM_PACKAGER ?= dapl-ofi developers <dapl-ofi@example.org>
rpm: dist
	@scripts/deps.sh rpm
	rm -rf build/rpm && mkdir -p build/rpm
	rpmbuild -ta --nodeps --define "_topdir $(abspath build/rpm)" \
		--define "packager $(RPM_PACKAGER)" $(DIST)
	@ls build/rpm/RPMS/*/*.rpm build/rpm/SRPMS/*.rpm

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libdaplofi.so \
	      $(DESTDIR)$(BINDIR)/daplofi-info $(DESTDIR)$(BINDIR)/daplofi-demo \
	      $(DESTDIR)$(BINDIR)/daplofi-perf $(DESTDIR)$(PKGCONFIGDIR)/dapl-ofi.pc \
	      $(DESTDIR)$(DATADIR)/dapl-ofi/dat.conf $(DESTDIR)$(INCLUDEDIR)/dat2/dapl_ofi.h \
	      $(DESTDIR)$(INCLUDEDIR)/dat2/dat_ofi_extensions.h \
	      $(addprefix $(DESTDIR)$(MANDIR)/man3/,$(notdir $(wildcard man/*.3))) \
	      $(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(wildcard man/*.1))) \
	      $(addprefix $(DESTDIR)$(MANDIR)/man7/,$(notdir $(wildcard man/*.7)))
	-rmdir $(DESTDIR)$(DATADIR)/dapl-ofi

clean:
	rm -rf build

help:
	@echo "make            build $(SONAME), tools and $(DATCONF) in $(B)/"
	@echo "make check      install missing packages, build (gcc, clang, ASan+UBSan, TSan), run the tests (CI's set)"
	@echo "make check-all  the same with every fabric x sanitizer combination and longer fuzzing (before a release)"
	@echo "make soak       256 connections across two test hosts under random faults, SOAK_SECONDS=$(SOAK_SECONDS) on each fabric (root)"
	@echo "make demo       install missing packages, build, run the demo through the stock registry"
	@echo "make bench      dapl-ofi against raw libfabric: 5 alternating runs, medians, ratios, targets"
	@echo "make bench-smoke  the same in seconds, tiny counts: fails only if a program misbehaves"
	@echo "make model      check the Promela model of the upcall protocol with spin"
	@echo "make fuzz       the libFuzzer targets (clang, ASan+UBSan, build/fuzz), FUZZ_SECONDS=300 each"
	@echo "make install    PREFIX=$(PREFIX) DESTDIR=..."
	@echo "make deb        Debian packages libdaplofi2, libdaplofi-dev, daplofi-utils in build/deb/"
	@echo "make dist       the source tarball build/dapl-ofi-$(VERSION).tar.gz"
	@echo "make rpm        RPM packages dapl-ofi, dapl-ofi-devel, dapl-ofi-utils in build/rpm/"
	@echo "make clean"

# the simulated hardware providers (fabsim/README.md) and their rule tests
include fabsim/fabsim.mk

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
