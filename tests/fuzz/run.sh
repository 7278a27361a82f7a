#!/bin/bash
# Build the libFuzzer targets (make fuzz-build: clang, ASan+UBSan, build/fuzz)
# and run each for FUZZ_SECONDS (make fuzz: 300; make check: 20) from its
# corpus, printing one TAP line per target and a last line "RESULT p f s".
#
#   tests/fuzz/run.sh [target ...]        (default: every tests/fuzz/fuzz_*.c)
#
# Seeds are read from tests/fuzz/corpus/<target>/ (in the tree, never
# written); what a run finds goes to build/fuzz/corpus/<target>/, a crash
# to build/fuzz/artifacts/<target>-crash-*, its log to build/fuzz/<target>.log.
# fuzz_api and fuzz_pdata connect to ports their input chooses, so they run
# in a network namespace of their own (unshare -n as root, unshare -rn
# without): where neither is possible they are skipped, as every target is
# where clang's libFuzzer runtime (libclang-rt-14-dev) is missing.
set -u
cd "$(dirname "$0")/../.."
secs=${FUZZ_SECONDS:-300}
B=build/fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	for f in tests/fuzz/fuzz_*.c; do
		t=${f##*/}
		targets+=("${t%.c}")
	done
fi
n=0 pass=0 fail=0 skip=0
tap() {	# tap ok|not|skip TEXT
	n=$((n + 1))
	case $1 in
	ok) pass=$((pass + 1)); echo "ok $n - $2" ;;
	skip) skip=$((skip + 1)); echo "ok $n - $2" ;;
	*) fail=$((fail + 1)); echo "not ok $n - $2" ;;
	esac
}
skip_all() {
	for t in "${targets[@]}"; do
		tap skip "$t # SKIP $1"
	done
	echo "RESULT $pass $fail $skip"
	exit 0
}

# clang and its libFuzzer runtime: a program that links -fsanitize=fuzzer
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }' > "$probe/p.c"
if ! command -v clang >/dev/null; then
	skip_all "no clang (apt-get install clang libclang-rt-14-dev)"
elif ! clang -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" 2>/dev/null; then
	skip_all "clang cannot link -fsanitize=fuzzer: libclang-rt-14-dev is missing"
fi
if ! make -s --no-print-directory fuzz-build > "$probe/build.log" 2>&1; then
	cat "$probe/build.log" >&2
	for t in "${targets[@]}"; do
		tap not "$t: make fuzz-build failed"
	done
	echo "RESULT $pass $fail $skip"
	exit 1
fi

# A network namespace with its loopback up, for the targets that connect.
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
	netns=(unshare -n)
elif unshare -rn true 2>/dev/null; then
	netns=(unshare -rn)
else
	netns=()
fi

mkdir -p "$B/corpus" "$B/artifacts"
for t in "${targets[@]}"; do
	bin=$B/fuzz/$t log=$B/$t.log seeds=tests/fuzz/corpus/$t
	opts=(-max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1
	      -artifact_prefix="$B/artifacts/$t-")
	wrap=()
	case $t in
	fuzz_params)
		opts+=(-max_len=1024) ;;
	*)
		if [ ${#netns[@]} -eq 0 ]; then
			tap skip "$t # SKIP needs its own network namespace (root, or unprivileged user namespaces)"
			continue
		fi
		# its connects and listeners in a namespace of its own (its
		# loopback up); leaks are checked once, at exit: LeakSanitizer's
		# check after an input can crash beside the library's threads
		wrap=("${netns[@]}" sh -c 'ip link set lo up 2>/dev/null || ifconfig lo up; exec "$@"' sh)
		opts+=(-max_len=512 -detect_leaks=0) ;;
	esac
	mkdir -p "$B/corpus/$t"
	rm -f "$B/artifacts/$t-"*
	start=$(date +%s)
	# a hang past the timeout is a failure too (libFuzzer's own -timeout
	# is per input)
	env DAT_OVERRIDE="$PWD/$B/dat.conf" DAPL_OFI_LOG_LEVEL=none IPATH_NO_BACKTRACE=1 \
		ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		timeout --kill-after=10 $((secs + 120)) "${wrap[@]}" "$bin" "${opts[@]}" \
		"$B/corpus/$t" "$seeds" > "$log" 2>&1
	rc=$?
	took=$(( $(date +%s) - start ))
	runs=$(grep -aoE '^stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$')
	if [ "$rc" -eq 0 ]; then
		tap ok "$t: ${runs:-?} inputs in ${took} s, no crash, leak or hang"
		continue
	fi
	crash=$(ls "$B/artifacts/$t-"* 2>/dev/null | head -n 1)
	tap not "$t: exit $rc after ${took} s (log: $log)"
	grep -E 'ERROR: |runtime error|SUMMARY|fuzz_[a-z]+: |watchdog|deadly|timeout' "$log" |
		head -n 12 | sed 's/^/#   /'
	if [ -n "$crash" ]; then
		echo "#   reproducer: $crash"
		echo "#   reproduce:  DAT_OVERRIDE=\$PWD/$B/dat.conf $bin $crash"
		echo "#   (keep it: cp $crash tests/fuzz/corpus/$t/ once fixed)"
	fi
done
echo "RESULT $pass $fail $skip"
[ "$fail" -eq 0 ]
