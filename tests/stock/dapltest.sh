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
# A case that hits DAT_NOT_IMPLEMENTED is "not ok": every call dapltest
# makes is implemented.  NEEDS_TRANSPORT below is empty; a case listed there
# would be reported "ok ... # SKIP <reason>" only if every failure in its
# output were a DAT_NOT_IMPLEMENTED (any other failure still "not ok") - for
# a feature not built yet, should one ever be needed again.
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

# case -> why it cannot pass yet (parts of the provider not built).  Empty:
# queryinfo case3, case16 and case17 (DAT_PSP_PROVIDER_FLAG) pass since
# dapl-ofi creates EPs for such PSPs.
declare -A NEEDS_TRANSPORT=()

L_CASES=(limit_ia limit_pz limit_evd limit_cno limit_lmr limit_size_lmr limit_ep limit_psp
	 limit_rsp limit_rpost)
HWCONN_CASES=(case0 case1 case2 case3)
PZ_CASES=(case0 case1 case2)
MEM_CASES=(case0 case1 case2 case3 case4)
ENDPOINT_CASES=(case0 case1 case2)
CONNMGT_CASES=(case0 case1)
# case13 and case15 pass the IA *index* to dat_cno_query/dat_evd_query and
# libdat2 segfaults before the provider is reached (dat-clients.md 1.6).
QUERYINFO_CASES=(case0 case1 case2 case3 case4 case5 case6 case7 case8 case9
		 case10 case11 case12 case14 case16 case17)

# Client/server runs against one "dapltest -T S" (regress.sh-style mixes):
# "name|arguments after -T X -s 127.0.0.1 -D IA".  The last one, Q, stops it.
SERVER_CASES=(
	"T SR 256/1 x2 threads x2 EPs, RR, RW|-T T -i 100 -t 2 -w 2 client SR 256 1 server SR 256 1 client RR 4096 2 client RW 4096 4 server RW 4096 3"
	"T validate, 4 segments|-T T -i 100 -V client SR 1024 4 server SR 1024 4 client RR 8192 2 server RW 2048 4"
	"T polling|-T T -i 1000 -P client SR 1024 server SR 1024 client RW 4096"
	"T RSP|-T T -i 100 -r client SR 1024 server SR 1024"
	"P RW|-T P -i 100 RW 4096 2"
	"P RR|-T P -i 100 RR 4096"
	"Q|-T Q"
)

total=$(( ${#L_CASES[@]} + ${#HWCONN_CASES[@]} + ${#PZ_CASES[@]} + ${#MEM_CASES[@]} +
	  ${#QUERYINFO_CASES[@]} + ${#ENDPOINT_CASES[@]} + ${#CONNMGT_CASES[@]} +
	  ${#SERVER_CASES[@]} ))
n=0 npass=0 nfail=0 nskip=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a crashing program's droppings (dapltest writes a .btr backtrace file
# into its working directory) land here, not in the source tree
cd "$tmp" || exit 2
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
	limit_ep) want='EPs created' ;;
	limit_psp) want='PSPs created' ;;
	limit_rsp) want='RSPs created' ;;
	*) want='' ;;
	esac
	local stop
	stop=$(grep -E 'can not continue|fails:|error:' "$log")
	# limit_rpost posts until the receive queue is full: a full queue is
	# how it is meant to end (dat-clients.md 3.6), any other failure is not
	[ "$t" = limit_rpost ] &&
		stop=$(printf '%s\n' "$stop" | grep -vE 'dat_ep_post_recv fails: DAT_(INSUFFICIENT_RESOURCES|QUEUE_FULL)')
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
	elif [ "$t" = limit_rpost ]; then
		grep -qE 'recv buffers posted per EP: [1-9]' "$log" ||
			problems+="no 'recv buffers posted per EP: N' line"$'\n'
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

# The server cases: one "dapltest -T S" serves every client run, judged by
# the client's output (dat-clients.md 3.1: "Total WQE" for T, the "raw:"
# line for P, no error lines), and the server must exit after Q.
judge_server_cases() {
	local slog=$tmp/server.out serr=$tmp/server.err spid i entry name args ready=0
	# shellcheck disable=SC2086
	timeout --kill-after=10 $((LIMIT * 4)) $WRAP dapltest -T S -D "$IA" >"$slog" 2>"$serr" </dev/null &
	spid=$!
	for i in $(seq 100); do
		grep -q 'Service Point Ready' "$slog" 2>/dev/null && { ready=1; break; }
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	for entry in "${SERVER_CASES[@]}"; do
		name="dapltest ${entry#*|}"
		args=${entry#*|}
		cmd_args="${args%% -i *} -s 127.0.0.1 -D $IA${args#"${args%% -i *}"}"
		problems=""
		if [ "$ready" -ne 1 ]; then
			rc=0
			: >"$log"; : >"$err"
			problems="the dapltest server never printed 'Service Point Ready'"$'\n'
			report "$name" "S ${entry%%|*}" fail
			continue
		fi
		# dapltest wants its options before the operations
		# shellcheck disable=SC2086
		run ${args%% -i *} -s 127.0.0.1 -D "$IA" ${args#"${args%% -i *}"}
		common_problems
		problems+=$(grep -E -i 'Test Error|FAIL|error:|Cannot connect|no operations' "$log" | head -10)
		[ -n "$problems" ] && problems+=$'\n'
		case $args in
		"-T T"*) grep -q 'Total WQE' "$log" || problems+="no 'Total WQE' statistics"$'\n' ;;
		"-T P"*) grep -q '^raw:' "$log" || problems+="no 'raw:' result line"$'\n' ;;
		esac
		if [ -n "$problems" ]; then
			report "$name" "S ${entry%%|*}" fail
		else
			report "$name" "S ${entry%%|*}" pass
		fi
	done
	for i in $(seq 50); do
		kill -0 "$spid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$spid" 2>/dev/null; then
		echo "# the dapltest server did not exit after -T Q; killed"
		# spid is timeout's: the server itself first, or it keeps its
		# port (62000) and fails every later run of the same job
		pkill -9 -P "$spid" 2>/dev/null
		kill -9 "$spid" 2>/dev/null
		nfail=$((nfail + 1))
	fi
	wait "$spid" 2>/dev/null
	if grep -qE 'terminated with signal|Sanitizer|runtime error:|^==[0-9]+== ' "$slog" "$serr"; then
		echo "# the dapltest server crashed or a sanitizer spoke:"
		grep -E 'terminated with signal|Sanitizer|runtime error:|^==[0-9]+== ' "$slog" "$serr" |
			head -10 | sed 's/^/#   /'
		nfail=$((nfail + 1))
	fi
}

echo "1..$total"
echo "# dapltest against IA $IA, DAT_OVERRIDE=$DAT_OVERRIDE${WRAP:+, wrapped in: $WRAP}"
for t in "${L_CASES[@]}"; do judge_limit "$t"; done
for c in "${HWCONN_CASES[@]}"; do judge_fft hwconn "$c"; done
for c in "${PZ_CASES[@]}"; do judge_fft pz "$c"; done
for c in "${MEM_CASES[@]}"; do judge_fft mem "$c"; done
for c in "${QUERYINFO_CASES[@]}"; do judge_fft queryinfo "$c"; done
for c in "${ENDPOINT_CASES[@]}"; do judge_fft endpoint "$c"; done
for c in "${CONNMGT_CASES[@]}"; do judge_fft connmgt "$c"; done
judge_server_cases
echo "# dapltest: $((npass + nskip)) ok ($nskip skipped), $nfail not ok, of $n"
[ "$nfail" -eq 0 ]
