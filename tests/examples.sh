#!/bin/bash
# The example programs, run so that they cannot rot: examples/upcall_echo.c
# as a server and a client on this host, through the stock DAT registry.
#
#   tests/examples.sh            (from the repo root, after `make`)
#
# Environment:
#   B                  build directory holding upcall-echo and dat.conf
#                      (default: build)
#   EXAMPLES_IA        IA name (default: ofi-lo)
#   EXAMPLES_TIMEOUT   seconds each process may run (default: 60); the programs
#                      get -t 10 seconds less, so they fail by themselves first
#   EXAMPLES_WRAP      prefix for both commands, e.g. "valgrind -q --error-exitcode=99"
#   EXAMPLES_PORTS     first and last port to pick from (default: "18600 18699")
#
# Prints TAP: "1..N", then "ok N - upcall-echo ..." or "not ok N - ..." per
# case, with both programs' summary lines as "#" comments; after a failure
# the reasons, the commands and the last lines of both logs.  The last line
# is "# examples: P ok, F not ok, of N, in Ts".  Exit status: 0 if nothing
# failed, 1 otherwise, 2 if it cannot run at all (Bail out!).
#
# Each case: pick a port nobody uses, start the server in the background
# (under `timeout`, in its own process group), wait until it prints that it
# is waiting for a client, run the client; then the server must exit by
# itself within GRACE seconds.  A side passes if it exits 0 and prints its
# summary with every message echoed right, and no sanitizer, valgrind or
# glibc complaint appears in its log.  Anything still running is killed on
# exit.
set -u

B=${B:-build}
IA=${EXAMPLES_IA:-ofi-lo}
LIMIT=${EXAMPLES_TIMEOUT:-60}
WRAP=${EXAMPLES_WRAP:-}
read -r PORT_LO PORT_HI <<<"${EXAMPLES_PORTS:-18600 18699}"
READY_LIMIT=20		# seconds the server has to start listening
GRACE=10		# seconds the server may outlive the client
KILL_AFTER=5
TAIL=15
PROG=$B/upcall-echo

bail() { echo "Bail out! $*"; exit 2; }

# ---- the cases: name, then environment and client arguments ---------------
# (the server takes no size or count: the client's connection request
# carries them)
NAMES=() ENVS=() ARGS=() RUNS=()
add() { NAMES+=("$1"); ENVS+=("$2"); ARGS+=("$3"); RUNS+=("${4:-1}"); }
add "upcall-echo 10000 messages"                      ""                          "-n 10000"
add "upcall-echo 2000 messages, window 1 (ping-pong)" ""                          "-n 2000 -w 1"
add "upcall-echo 10000 messages, window 32, 1 dispatcher thread" \
                                                      "DAPL_OFI_UPCALL_THREADS=1" "-n 10000 -w 32"
add "upcall-echo 300 messages of 1 MiB, window 8"    ""                          "-n 300 -s 1048576 -w 8"
add "upcall-echo 3 messages of 4 bytes"               ""                          "-n 3 -s 4"
# the client on an IA that reports DAT_OFI_EXTENSION (ia_params ext=ofi, for
# programs built before the IB extension): the ops work the same there
add "upcall-echo 1000 messages, client on an ext=ofi IA" ""                       "-n 1000 -P ofi-lo-extofi"
add "upcall-echo 1 message, 5 sessions (a client that leaves at once)" \
                                                      ""                          "-n 1 -w 1" 5

for v in LIMIT PORT_LO PORT_HI; do
	[[ ${!v} =~ ^[0-9]+$ ]] || bail "$v must be a whole number, not '${!v}'"
done
[ "$LIMIT" -ge 15 ] || bail "EXAMPLES_TIMEOUT must be at least 15 seconds"
if [ "$PORT_LO" -gt "$PORT_HI" ] || [ "$PORT_HI" -gt 65535 ]; then bail "bad EXAMPLES_PORTS"; fi
command -v timeout >/dev/null 2>&1 || bail "timeout (coreutils) not found"
[ -x "$PROG" ] || bail "$PROG not found: run make first (or set B)"
[ -r "$B/dat.conf" ] || bail "$B/dat.conf not found: run make first (or set B)"
DAT_OVERRIDE="$(cd "$B" && pwd)/dat.conf"
export DAT_OVERRIDE
grep -qE "^[[:space:]]*${IA}[[:space:]]" "$DAT_OVERRIDE" || bail "IA $IA is not in $DAT_OVERRIDE"
PT=$((LIMIT - 10))	# the programs' own -t

read -ra WRAPW <<<"$WRAP"
logdir=$(mktemp -d)
LIVE=()

# In an ASan build (the ASan variant of tests/run.sh runs with
# detect_leaks=1): the constructors of the libraries that libdat2's dlopen
# pulls in allocate memory their dlclose never frees.  The same suppression
# as tests/integ/dat_test.h (which the examples must not carry: they are
# teaching code), given to LeakSanitizer from outside.  Ignored by other
# builds.
printf 'leak:_dl_init\n' >"$logdir/lsan.supp"
export LSAN_OPTIONS="suppressions=$logdir/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# kill_run PID: TERM to the process group of a `timeout` (it makes its own),
# KILL after KILL_AFTER seconds.
kill_run() {
	local pid=$1 k
	alive "$pid" || return 0
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
	for ((k = 0; k < KILL_AFTER * 10; k++)); do
		alive "$pid" || return 0
		sleep 0.1
	done
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
}

cleanup() {
	local p
	for p in "${LIVE[@]}"; do kill_run "$p"; done
	for p in "${LIVE[@]}"; do wait "$p" 2>/dev/null; done
	LIVE=()
	rm -rf "$logdir"
}
trap cleanup EXIT
trap 'echo "Bail out! interrupted"; exit 2' INT TERM HUP

forget() {
	local p keep=()
	for p in "${LIVE[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	LIVE=("${keep[@]}")
}

now_ms() {
	local t=${EPOCHREALTIME//[.,]/}
	NOW=$((t / 1000))
}

# port_free PORT: no socket of any state is bound to it (from /proc, no ss).
port_free() {
	local hex
	hex=$(printf ':%04X' "$1")
	! awk -v p="$hex" 'FNR > 1 && substr($2, length($2) - 4) == p { found = 1 }
		END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

pick_port() {
	local i p
	for ((i = 0; i < 50; i++)); do
		p=$((PORT_LO + RANDOM % (PORT_HI - PORT_LO + 1)))
		if port_free "$p"; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# start LOG ENV CMD...: runs CMD in the background under timeout; sets $started.
start() {
	local log=$1 envs=$2
	shift 2
	: >"$log"
	# shellcheck disable=SC2086
	env $envs timeout --kill-after="$KILL_AFTER" "$LIMIT" "${WRAPW[@]}" "$@" \
		>"$log" 2>&1 </dev/null &
	started=$!
	LIVE+=("$started")
}

# side_problems SIDE LOG RC PATTERN: problems of one side, appended to $problems.
side_problems() {
	local side=$1 log=$2 rc=$3 want=$4 p="" lines
	if [ "$rc" = - ]; then
		p+="did not run"$'\n'
	elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		p+="killed by timeout after ${LIMIT}s (EXAMPLES_TIMEOUT)"$'\n'
	elif [ "$rc" -gt 128 ]; then
		p+="killed by signal $((rc - 128)) (SIG$(kill -l $((rc - 128)) 2>/dev/null))"$'\n'
	elif [ "$rc" -ne 0 ]; then
		p+="exit status $rc"$'\n'
	fi
	lines=$(grep -E 'Sanitizer|runtime error:|^==[0-9]+== |terminated with signal|Segmentation fault|stack smashing|double free|free\(\): |malloc\(\): |corrupted (size|double)|Aborted|core dumped' "$log" | head -10)
	[ -n "$lines" ] && p+="$lines"$'\n'
	lines=$(grep -E 'FAILED' "$log" | head -5)
	[ -n "$lines" ] && p+="$lines"$'\n'
	grep -qE "$want" "$log" || p+="no line matching /$want/"$'\n'
	[ -n "$p" ] && problems+="$(printf '%s' "$p" | sed -e '/^$/d' -e "s/^/$side: /")"$'\n'
}

show_log() {
	local side=$1 log=$2 rc=$3 cmd=$4 total
	if [ ! -e "$log" ]; then
		echo "#   ---- $side: not started"
		return
	fi
	total=$(wc -l <"$log")
	echo "#   ---- $side (exit $rc, $total lines, last $TAIL): $cmd"
	tail -n "$TAIL" "$log" | sed -e 's/^/#   | /'
}

# one_run N ENV ARGS: one server+client session; sets $problems, $summary.
one_run() {
	local n=$1 envs=$2 args=$3 slog="$logdir/server.log" clog="$logdir/client.log"
	local srv_rc=- cli_rc=- spid cpid port tries ready t0 count scmd ccmd
	count=$(sed -n 's/.*-n \([0-9]*\).*/\1/p' <<<"$args")
	for ((tries = 0; tries < 5; tries++)); do
		rm -f "$slog" "$clog"
		srv_rc=- cli_rc=- ready=0
		port=$(pick_port) || { problems+="no free port in $PORT_LO..$PORT_HI"$'\n'; return; }
		scmd="$envs $PROG -P $IA -p $port -t $PT"
		# shellcheck disable=SC2086
		start "$slog" "$envs" "$PROG" -P "$IA" -p "$port" -t "$PT"
		spid=$started
		now_ms
		t0=$NOW
		while :; do
			if grep -q 'waiting for a client' "$slog"; then ready=1; break; fi
			alive "$spid" || break
			now_ms
			if [ $((NOW - t0)) -ge $((READY_LIMIT * 1000)) ]; then
				kill_run "$spid"
				break
			fi
			sleep 0.05
		done
		if [ "$ready" -eq 0 ]; then
			wait "$spid"
			srv_rc=$?
			forget "$spid"
			# someone took the port between the check and the listen: again
			grep -qE 'dat_psp_create.*(IN_USE|CONN_QUAL)' "$slog" && continue
			problems+="server: not ready within ${READY_LIMIT}s or exited (status $srv_rc); client not started"$'\n'
			break
		fi
		ccmd="$envs $PROG -c -P $IA -p $port -t $PT $args"
		# shellcheck disable=SC2086
		start "$clog" "$envs" "$PROG" -c -P "$IA" -p "$port" -t "$PT" $args
		cpid=$started
		wait "$cpid"
		cli_rc=$?
		forget "$cpid"
		# the server ends when the client has disconnected
		now_ms
		t0=$NOW
		while alive "$spid"; do
			now_ms
			if [ $((NOW - t0)) -ge $((GRACE * 1000)) ]; then
				problems+="server: still running ${GRACE}s after the client exited; killed"$'\n'
				kill_run "$spid"
				break
			fi
			sleep 0.05
		done
		wait "$spid"
		srv_rc=$?
		forget "$spid"
		break
	done
	side_problems server "$slog" "$srv_rc" \
		"^upcall-echo: server: echoed $count of $count messages"
	[ -e "$clog" ] && side_problems client "$clog" "$cli_rc" \
		"^upcall-echo: $count of $count echoes right"
	summary="$(grep -h '^upcall-echo: ' "$clog" "$slog" 2>/dev/null | grep -v 'waiting for')"
	if [ -n "$problems" ]; then
		[ "${RUNS[$i]}" -gt 1 ] && problems="$(sed -e '/^$/d' -e "s/^/session $n: /" <<<"$problems")"$'\n'
		show_log server "$slog" "$srv_rc" "$scmd" >>"$logdir/shown"
		show_log client "$clog" "$cli_rc" "${ccmd:-}" >>"$logdir/shown"
	fi
}

echo "1..${#NAMES[@]}"
echo "# examples: $PROG, IA $IA, DAT_OVERRIDE=$DAT_OVERRIDE, timeout ${LIMIT}s${WRAP:+, wrapped in: $WRAP}"
now_ms
suite_t0=$NOW
npass=0 nfail=0
for ((i = 0; i < ${#NAMES[@]}; i++)); do
	problems="" summaries="" by_poll=0 by_upcall=0
	: >"$logdir/shown"
	now_ms
	t0=$NOW
	for ((r = 1; r <= RUNS[i]; r++)); do
		one_run "$r" "${ENVS[$i]}" "${ARGS[$i]}" 2>>"$logdir/harness.err"
		summaries=$summary
		case $summary in
		*"seen by the final poll"*) by_poll=$((by_poll + 1)) ;;
		*"seen by the upcall"*) by_upcall=$((by_upcall + 1)) ;;
		esac
		[ -n "$problems" ] && break
	done
	now_ms
	secs=$(awk -v a="$t0" -v b="$NOW" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
	if [ -z "$problems" ]; then
		npass=$((npass + 1))
		echo "ok $((i + 1)) - ${NAMES[$i]}"
	else
		nfail=$((nfail + 1))
		echo "not ok $((i + 1)) - ${NAMES[$i]}"
		printf '%s' "$problems" | sed -e '/^$/d' -e 's/^/#   /'
		cat "$logdir/shown"
	fi
	printf '%s\n' "$summaries" | sed -e '/^$/d' -e 's/^/#   /'
	if [ "${RUNS[$i]}" -gt 1 ]; then
		echo "#   the end of the connection was seen by the server's final poll in $by_poll" \
			"and by its upcall in $by_upcall of $((by_poll + by_upcall)) sessions"
	fi
	echo "#   ${secs}s"
done
grep -vE '^[^ ]*: line [0-9]+: +[0-9]+ [A-Z][a-z]+' "$logdir/harness.err" >&2
now_ms
echo "# examples: $npass ok, $nfail not ok, of ${#NAMES[@]}," \
	"in $(awk -v a="$suite_t0" -v b="$NOW" 'BEGIN { printf "%.1f", (b - a) / 1000 }')s"
[ "$nfail" -eq 0 ]
