#!/bin/bash
# make check: build with gcc and clang (warnings are errors), build the
# ASan+UBSan and TSan variants, run the tests of each, print one closing
# line "N passed, N failed" and fail if anything failed.  CHECK_LEVEL=all
# (make check-all) runs every combination and fuzzes longer; make check
# leaves out what repeats a covered path (tests/run.sh, `later`).
set -u
export CHECK_LEVEL=${CHECK_LEVEL:-ci}
# libinfinipath (loaded by libfabric) writes a backtrace file into the
# working directory on a crash: the sanitizers and the runners report it
export IPATH_NO_BACKTRACE=1
jobs=$(nproc 2>/dev/null || echo 2)
# each step says when it started, so a slow CI run shows where its time went
step() { printf '== %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
die() { echo "$*" >&2; echo "0 passed, 1 failed"; exit 1; }

step "build (gcc)";          make -s -j"$jobs" all tests >/dev/null || die "gcc build failed"
step "build (clang)";        make -s -j"$jobs" CC=clang B=build/clang all tests >/dev/null || die "clang build failed"
step "build (ASan+UBSan)";   make -s -j"$jobs" B=build/asan SAN=asan all tests >/dev/null || die "ASan build failed"
step "build (TSan)";         make -s -j"$jobs" B=build/tsan SAN=tsan all tests >/dev/null || die "TSan build failed"

# The stock programs listen on fixed ports inside the kernel's ephemeral
# range (dtest/dtestcm/dtestsrq 45248; dapltest's limit test PSPs and RSPs
# at 39710 and 43806 and the 99 ports after each).  A TIME_WAIT socket of an
# earlier run on one of them makes a listen fail with DAT_CONN_QUAL_IN_USE,
# correctly but at random: keep the kernel from handing them out.
reserve=/proc/sys/net/ipv4/ip_local_reserved_ports
if [ -w "$reserve" ] && ! grep -q 39710 "$reserve"; then
	cur=$(cat "$reserve")
	echo "${cur:+$cur,}39710-39809,43806-43905,45248-45348" > "$reserve" &&
		echo "== reserved the stock programs' ports from ephemeral use"
fi

total_pass=0 total_fail=0 total_skip=0
# every failing test's line, repeated at the end: a CI log is often read
# from its tail
export CHECK_FAILURES=$PWD/build/check-failures.txt
: > "$CHECK_FAILURES"
tally() {
	local line
	line=$(tail -n 1 "$1")
	set -- $line
	total_pass=$((total_pass + $2)) total_fail=$((total_fail + $3)) total_skip=$((total_skip + $4))
}
# tap_step NAME LIMIT CMD...: one script that prints TAP, run under a
# timeout into build/NAME.log and counted; its counts are shown, and a
# failure's TAP and "#" lines go to the closing list
tap_step() {
	local name=$1 limit=$2 log=build/$1.log rc p f s; shift 2
	timeout --kill-after=30 "$limit" "$@" > "$log" 2>&1
	rc=$?
	s=$(grep -cE '^ok [0-9]+.*# SKIP' "$log")
	p=$(( $(grep -cE '^ok [0-9]+' "$log") - s ))
	f=$(grep -cE '^not ok [0-9]+' "$log")
	[ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
	total_pass=$((total_pass + p)) total_fail=$((total_fail + f)) total_skip=$((total_skip + s))
	printf '  %s %d passed, %d failed, %d skipped (exit %d), log: %s\n' \
		"$name" "$p" "$f" "$s" "$rc" "$log"
	[ "$f" -eq 0 ] && return
	{
		echo "  $name $f FAILED (exit $rc), log: $log"
		grep -E '^not ok|^#' "$log" | head -40 | sed 's/^/      | /'
	} | tee -a "$CHECK_FAILURES"
}
out=$(mktemp)
step "tests (gcc)";          tests/run.sh plain build all | tee "$out"; tally "$out"
step "tests (ASan+UBSan)";   tests/run.sh asan build/asan all | tee "$out"; tally "$out"
step "tests (TSan: event core, upcall stress, connection events, cancellation)"; tests/run.sh tsan build/tsan unit | tee "$out"; tally "$out"
step "protocol model (spin)"; model/check.sh -j "$jobs" | tee "$out"; tally "$out"
grep -E '^not ok' "$out" | sed 's/^/  model /' >> "$CHECK_FAILURES"
step "stock programs under valgrind"; tests/run.sh valgrind build stock | tee "$out"; tally "$out"
# the benchmark scripts with tiny counts: fail only if a benchmark program
# crashes, hangs or prints nonsense, or bench/plot cannot draw compare's
# tiny sweep when gnuplot is installed (ratios are for make bench, on a
# quiet machine)
step "benchmark smoke (bench/compare, bench/confidence, bench/calls, bench/instr --smoke)"
if make -s bench-smoke > build/bench-smoke.log 2>&1; then
	total_pass=$((total_pass + 1)); echo "  bench-smoke ok"
else
	total_fail=$((total_fail + 1)); tail -n 20 build/bench-smoke.log
	echo "  bench-smoke FAILED, log: build/bench-smoke.log" >> "$CHECK_FAILURES"
fi
# the Debian packages: built (make deb), linted, installed system-wide, the
# stock dtest through /etc/dat.conf with no DAT_OVERRIDE, purged, the file as
# it was (about 40 s, plus installing lintian on a fresh machine); one skip
# when not root
step "Debian packages (tests/package/deb.sh: make deb, lintian, install, dtest via /etc/dat.conf, purge)"
tap_step package-deb 600 tests/package/deb.sh
# the RPM packages: built from the make dist tarball (make rpm, Debian's
# rpmbuild), rpmlint without error, installed and erased in scratch roots
# (rpm --root), /etc/dat.conf there byte for byte as before (about 10 s,
# plus installing rpm and rpmlint on a fresh machine); one skip when not root
step "RPM packages (tests/package/rpm.sh: make rpm, rpmlint, rpm -i/-e in a scratch root)"
tap_step package-rpm 300 tests/package/rpm.sh
# the libFuzzer targets (tests/fuzz/README.md) for 10 s each (check-all:
# 60, make fuzz: 300): clang's build in build/fuzz, then each target from
# its corpus in the tree (about 70 s with the build).  A
# crash, leak or hang fails with the path of its reproducer; without
# clang's fuzzer runtime, or without a network namespace for the targets
# that connect (not root, no user namespaces), they are skipped
fuzz_s=${CHECK_FUZZ_SECONDS:-$([ "$CHECK_LEVEL" = all ] && echo 60 || echo 10)}
step "fuzz targets (tests/fuzz/run.sh: every tests/fuzz/fuzz_*.c, $fuzz_s s each)"
FUZZ_SECONDS=$fuzz_s tap_step fuzz 900 tests/fuzz/run.sh
rm -f "$out"
if [ -s "$CHECK_FAILURES" ] || [ "$total_fail" -ne 0 ]; then
	echo "== what failed (each log is named; the steps above say more)"
	cat "$CHECK_FAILURES"
fi
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
