#!/bin/bash
# The stock dapltest (Debian dapl2-utils) against dapl-ofi, judged by its
# OUTPUT: dapltest exits 0 even when a case fails (dat-clients.md 3.1, 3.6).
#
#   tests/stock/dapltest.sh            (from the repo root, after `make`)
#
# Environment:
#   B               build directory holding dat.conf (default: build)
#   DAPLTEST_WRAP   prefix for every dapltest command, e.g. "valgrind -q" or
#                   "env LD_PRELOAD=/path/libasan.so ASAN_OPTIONS=detect_leaks=0"
#   DAPLTEST_IA     IA name (default: ofi-lo)
#   DAPLTEST_TIMEOUT  seconds per run (default: 120)
#
# Prints TAP: "1..N", then "ok N - <command>" / "not ok N - <command>" per
# case, with the offending output lines as "#" comments after a failure.
# Exit status: 0 if nothing failed, 1 otherwise, 2 if it cannot run at all.
#
# Judging:
#   every run   fails on a timeout, a signal, a non-zero exit, a crash report
#               ("terminated with signal", sanitizer or valgrind errors);
#   -T L        fails on "can not continue" and needs the "<objects> created:
#               <n>" line with n = -m (the provider's limits are far above it);
#   -T F        fails on "failed in file" (each case prints "Result: PASS"
#               even after a failed assertion) and needs the case's header
#               and "Result:" line.
# Cases that need endpoints, service points or RMRs (stubs today) are
# listed in NEEDS_TRANSPORT below.  Such a case is reported
# "ok ... # SKIP <reason>" only if every failure in its output is a
# DAT_NOT_IMPLEMENTED; any other failure still makes it "not ok".  A case not
# in the list that hits DAT_NOT_IMPLEMENTED is "not ok".
set -u

B=${B:-build}
IA=${DAPLTEST_IA:-ofi-lo}
WRAP=${DAPLTEST_WRAP:-}
LIMIT=${DAPLTEST_TIMEOUT:-120}
MAX=100

if ! command -v dapltest >/dev/null 2>&1; then
	echo "Bail out! dapltest not found (Debian package dapl2-utils)"
	exit 2
fi
if [ ! -r "$B/dat.conf" ]; then
	echo "Bail out! $B/dat.conf not found: run make first (or set B)"
	exit 2
fi
DAT_OVERRIDE="$(cd "$B" && pwd)/dat.conf"
export DAT_OVERRIDE

# case -> why it cannot pass yet (parts of the transport not built)
declare -A NEEDS_TRANSPORT=(
	["F queryinfo case3"]="needs provider-created EPs: PSP query on a DAT_PSP_PROVIDER_FLAG PSP (dat_psp_create)"
	["F queryinfo case9"]="needs the transport: RMR query (dat_rmr_create)"
	["F queryinfo case16"]="needs provider-created EPs: DAT_PSP_PROVIDER_FLAG PSP (dat_psp_create)"
	["F queryinfo case17"]="needs provider-created EPs: DAT_PSP_PROVIDER_FLAG PSP (dat_psp_create)"
)

L_CASES=(limit_ia limit_pz limit_evd limit_cno limit_lmr limit_size_lmr)
HWCONN_CASES=(case0 case1 case2 case3)
PZ_CASES=(case0 case1 case2)
MEM_CASES=(case0 case1 case2 case3 case4)
# case13 and case15 pass the IA *index* to dat_cno_query/dat_evd_query and
# libdat2 segfaults before the provider is reached (dat-clients.md 1.6).
QUERYINFO_CASES=(case0 case1 case2 case3 case4 case5 case6 case7 case8 case9
		 case10 case11 case12 case14 case16 case17)

total=$(( ${#L_CASES[@]} + ${#HWCONN_CASES[@]} + ${#PZ_CASES[@]} + ${#MEM_CASES[@]} +
	  ${#QUERYINFO_CASES[@]} ))
n=0 npass=0 nfail=0 nskip=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=$tmp/out	# dapltest's own report (stdout)
err=$tmp/err	# provider log, sanitizer and valgrind reports (stderr)

# run ARGS...: dapltest under the wrap and the timeout.  stdout and stderr
# are kept apart so the provider's log cannot split dapltest's lines.
run() {
	# shellcheck disable=SC2086  # WRAP is a command prefix: split on purpose
	timeout --kill-after=10 "$LIMIT" $WRAP dapltest "$@" >"$log" 2>"$err" </dev/null
	rc=$?
}

# Problems common to every run, one per line, into $problems.
common_problems() {
	problems=""
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		problems+="timed out after ${LIMIT}s"$'\n'
	elif [ "$rc" -gt 128 ]; then
		problems+="killed by signal $((rc - 128))"$'\n'
	elif [ "$rc" -ne 0 ]; then
		problems+="exit status $rc"$'\n'
	fi
	local crash
	crash=$(cat "$log" "$err" |
		grep -E 'terminated with signal|Segmentation fault|Sanitizer|runtime error:|^==[0-9]+== ' |
		head -20)
	[ -n "$crash" ] && problems+="$crash"$'\n'
}

# report NAME KEY VERDICT [REASON]   VERDICT: pass | fail | skip
report() {
	local name=$1 key=$2 verdict=$3 reason=${4:-}
	n=$((n + 1))
	case $verdict in
	pass)
		npass=$((npass + 1))
		if [ -n "${NEEDS_TRANSPORT[$key]+x}" ]; then
			echo "ok $n - $name # listed in NEEDS_TRANSPORT but passes now: drop it from the list"
		else
			echo "ok $n - $name"
		fi
		;;
	skip)
		nskip=$((nskip + 1))
		echo "ok $n - $name # SKIP $reason"
		;;
	*)
		nfail=$((nfail + 1))
		echo "not ok $n - $name"
		printf '%s' "$problems" | sed -e '/^$/d' -e 's/^/#   /'
		echo "#   ---- stdout of: ${WRAP:+$WRAP }dapltest $cmd_args"
		sed -e 's/^/#   | /' "$log" | head -60
		if [ -s "$err" ]; then
			echo "#   ---- stderr"
			sed -e 's/^/#   ! /' "$err" | head -30
		fi
		;;
	esac
}

# Stubs the provider named in its log (only at log level warn and above).
stubs_named() {
	grep -oE 'dat_[a-z_]+ is not implemented' "$err" | sed 's/ is not implemented//' |
		sort -u | paste -sd, -
}

# A failed DT_assert_dat prints "<expr> failed in file F, line N" and then
# "Error = <n>, <DAT code>".  Sets $real (failures other than
# DAT_NOT_IMPLEMENTED, one per line) and $notimpl (their count).
classify_fft_failures() {
	real=$(awk '/failed in file/ { f = $0; nx = ""; getline nx;
		if (nx !~ /DAT_NOT_IMPLEMENTED/) print f " :: " nx }' "$log")
	[ -n "$real" ] && real+=$'\n'
	notimpl=$(awk '/failed in file/ { nx = ""; getline nx; if (nx ~ /DAT_NOT_IMPLEMENTED/) c++ }
		END { print c + 0 }' "$log")
}

judge_limit() {
	local t=$1 key="L $1" name="dapltest -T L -D $IA -m $MAX $1" want count
	cmd_args="-T L -D $IA -m $MAX $t"
	run -T L -D "$IA" -m "$MAX" "$t"
	common_problems
	case $t in
	limit_ia) want='IAs opened' ;;
	limit_pz) want='PZs created' ;;
	limit_cno) want='CNOs created' ;;
	limit_evd) want='EVDs created' ;;
	limit_lmr) want='LMRs created' ;;
	*) want='' ;;
	esac
	local stop
	stop=$(grep -E 'can not continue|fails:|error:' "$log")
	if [ -n "$stop" ] && [ -z "$problems" ] && [ -n "${NEEDS_TRANSPORT[$key]+x}" ] &&
	   ! grep -E 'fails:|error:' "$log" | grep -qv 'DAT_NOT_IMPLEMENTED'; then
		local s
		s=$(stubs_named)
		report "$name" "$key" skip "${NEEDS_TRANSPORT[$key]}${s:+ [stubs reached: $s]}"
		return
	fi
	[ -n "$stop" ] && problems+="$stop"$'\n'
	if [ -n "$want" ]; then
		count=$(sed -n "s/.*LimitTest: $want: \([0-9]*\).*/\1/p" "$log" | tail -1)
		if [ -z "$count" ]; then
			problems+="no 'LimitTest: $want: N' line"$'\n'
		elif [ "$count" -ne "$MAX" ]; then
			problems+="only $count of -m $MAX: the provider reports higher limits"$'\n'
		fi
	elif ! grep -qE 'Largest LMR was|LMR of 0x[0-9a-f]+ bytes OK' "$log"; then
		problems+="no 'Largest LMR' / 'LMR of ... OK' line"$'\n'
	fi
	if [ -n "$problems" ]; then
		report "$name" "$key" fail
	else
		report "$name" "$key" pass
	fi
}

judge_fft() {
	local feature=$1 c=$2 key="F $1 $2" name="dapltest -T F -D $IA -f $1 $2"
	local num=${c#case}
	cmd_args="-T F -D $IA -f $feature $c"
	run -T F -D "$IA" -f "$feature" "$c"
	common_problems
	if ! grep -qE "Function feature: .*case: *$num *\$" "$log"; then
		problems+="case header 'Function feature: ... case: $num' missing: the case did not run"$'\n'
	fi
	if ! grep -q '^Result: ' "$log"; then
		problems+="no 'Result:' line: the case did not finish"$'\n'
	fi
	classify_fft_failures
	if [ -z "$problems" ] && [ -z "$real" ] && [ "$notimpl" -gt 0 ] &&
	   [ -n "${NEEDS_TRANSPORT[$key]+x}" ]; then
		local s
		s=$(stubs_named)
		report "$name" "$key" skip "${NEEDS_TRANSPORT[$key]}${s:+ [stubs reached: $s]}"
		return
	fi
	[ -n "$real" ] && problems+="$real"
	if [ "$notimpl" -gt 0 ]; then
		problems+="$notimpl assertion(s) failed with DAT_NOT_IMPLEMENTED in a case that should not need the transport:"$'\n'
		problems+="$(grep -F -A1 'failed in file' "$log")"$'\n'
	fi
	if [ -n "$problems" ]; then
		report "$name" "$key" fail
	elif grep -q '^Result: UNSUPP' "$log"; then
		report "$name" "$key" skip "dapltest reports UNSUPP for it (the CR query is exercised by -f connmgt)"
	else
		report "$name" "$key" pass
	fi
}

echo "1..$total"
echo "# dapltest against IA $IA, DAT_OVERRIDE=$DAT_OVERRIDE${WRAP:+, wrapped in: $WRAP}"
for t in "${L_CASES[@]}"; do judge_limit "$t"; done
for c in "${HWCONN_CASES[@]}"; do judge_fft hwconn "$c"; done
for c in "${PZ_CASES[@]}"; do judge_fft pz "$c"; done
for c in "${MEM_CASES[@]}"; do judge_fft mem "$c"; done
for c in "${QUERYINFO_CASES[@]}"; do judge_fft queryinfo "$c"; done
echo "# dapltest: $((npass + nskip)) ok ($nskip skipped), $nfail not ok, of $n"
[ "$nfail" -eq 0 ]
