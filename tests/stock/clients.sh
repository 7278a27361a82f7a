#!/bin/bash
# The stock DAT client programs (Debian dapl2-utils: dtest, dtestcm, dtestsrq,
# dtestx)
# against dapl-ofi, as server+client pairs on this host, judged by their
# OUTPUT: they exit 0 even when a test fails (dat-clients.md 3.1).
#
#   tests/stock/clients.sh            (from the repo root, after `make`)
#
# Environment:
#   B                 build directory holding dat.conf (default: build)
#   CLIENTS_REGISTRY  "system": no DAT_OVERRIDE, the registry reads
#                     /etc/dat.conf (an installed package's entries)
#   CLIENTS_CASES     space-separated case names to run (default: all; the
#                     names are listed by CLIENTS_CASES=list)
#   CLIENTS_WRAP      prefix for every stock command, e.g. "valgrind -q" or
#                     "env LD_PRELOAD=/path/libasan.so ASAN_OPTIONS=detect_leaks=0"
#   CLIENTS_EXTRA     one more case, "NAME PROGRAM FLAGS...", run after the
#                     others (or alone: CLIENTS_CASES=NAME)
#   CLIENTS_IA        IA name (default: ofi-lo); CLIENTS_IA_RR the IA with
#                     DAT_IB_RDMA_READ=TRUE for dtest-rr (default: ofi-lo-rr);
#                     CLIENTS_IA_ATOMIC an IA with native atomics for
#                     dtestx-atomics (default: ofi-sock-lo, libfabric sockets)
#   CLIENTS_TIMEOUT   seconds each process may run (default: 60)
#   CLIENTS_READY_TIMEOUT  seconds the server has to become ready (default: 30)
#   CLIENTS_GRACE     seconds one side may outlive the other (default: 20)
#   CLIENTS_PORT_WAIT seconds to wait for ports 15828/45248 to be free (default: 30)
#   CLIENTS_LOGDIR    keep the logs there (default: a temporary directory,
#                     removed on exit)
#
# Prints TAP: "1..N", then "ok N - <case>: <flags>" / "not ok N - ..." per
# case; after a failure, the reasons, the commands and the last lines of both
# logs as "#" comments.  Exit status: 0 if nothing failed, 1 otherwise, 2 if
# it cannot run at all.
#
# Each case: wait until no other run holds the ports (a lock, then 15828 and
# 45248 free), start the server in the background, wait for it to be ready,
# start the client.  Every process runs under `timeout`; once one side has
# exited the other gets CLIENTS_GRACE seconds, then it is killed.  stdout is
# line-buffered with stdbuf, so a killed program's output is not lost.
#
# Judging, per side:
#   every side  fails on a timeout, a kill, a signal, a crash report
#               (sanitizer, valgrind, glibc) and on the program's own
#               ERR/Err/Error/ERROR, "Failed to", "Couldn't", "Could not" lines
#               (provider log lines, "dapl-ofi[pid] ...", are not judged);
#   dtest       needs "DAPL Test Complete. PASSED", fails on "FAILED";
#   dtestcm     needs "ALL <c> CONNECTED on Server!" (server) or "... on
#               Client!" (client), and " DAPL Connection Test Complete.";
#   dtestsrq    needs "ALL <c> CONNECTED on server!" / "client!" and
#               " DAPL <mode> Test Complete." with <mode> from its "Running
#               <mode> test as" line ("RC SRQ", or "RC none SRQ" with -S 0).
#   dtestx      needs "RDMA_WRITE_WITH_IMMEDIATE_DATA test - PASSED" and
#               "IB extension test - immed/atomic test PASSED"; with -p the
#               IA, EP and EVD counter lines, an EP's not all 0; dtestx-atomics,
#               and any case whose dtestx started its atomics ("starting
#               cmp_swap": tcp's and the RDM IAs' are emulated), also
#               "CMP_SWAP test - PASSED" and "FETCH_ADD test - PASSED"; -q runs one
#               process (the open query by IA name), which must list the
#               provider attribute DAT_IB_IMMED_DATA=TRUE.  Its UD modes
#               (-u, -U N, on an RDM IA: the client runs with -c) need
#               "IB extension test - UD test PASSED" and a "Recv RMR
#               message" line per endpoint (4 with -u); its atomics are
#               skipped by dtestx itself on an IA without atomics, which
#               reports no atomic attribute.
# The exit status is shown but not judged (it is 0 for failed tests and 1
# for some setup errors).
set -u

B=${B:-build}
IA=${CLIENTS_IA:-ofi-lo}
IA_RR=${CLIENTS_IA_RR:-ofi-lo-rr}
IA_ATOMIC=${CLIENTS_IA_ATOMIC:-ofi-sock-lo}
WRAP=${CLIENTS_WRAP:-}
LIMIT=${CLIENTS_TIMEOUT:-60}
READY_LIMIT=${CLIENTS_READY_TIMEOUT:-30}
GRACE=${CLIENTS_GRACE:-20}
PORT_WAIT=${CLIENTS_PORT_WAIT:-30}
KILL_AFTER=5
HOST=127.0.0.1
SIDE_PORT=15828		# dtest/dtestcm TCP side channel
CONN_PORT=45248		# conn_qual of dtest, dtestcm, dtestsrq
X_PORT=31112		# dtestx's conn_qual (its side channel is SIDE_PORT)
TAIL=20			# log lines shown per side after a failure

bail() { echo "Bail out! $*"; exit 2; }

# dtestcm's -c (connections, default 1000) and -b (burst, default 100): the
# client connects in groups of -b and indexes its h_ep[-c] array up to the
# next multiple of -b, so a -b that does not divide -c writes and connects
# handles past the array's end (the stock program's own bug, dapl2-utils
# 2.1.10: dapl-ofi refuses the garbage handles with DAT_INVALID_HANDLE_EP at
# best, and the overrun may crash dtestcm first).  Such a case is never
# run: the whole script refuses it.  Prints why, or nothing when it is sound.
dtestcm_unsound() {
	local c=1000 b=100 a
	while [ $# -gt 0 ]; do
		a=$1
		shift
		case $a in
		-c) c=${1:-}; shift ;;
		-c*) c=${a#-c} ;;
		-b) b=${1:-}; shift ;;
		-b*) b=${a#-b} ;;
		esac
	done
	if ! [[ $c =~ ^[0-9]+$ && $b =~ ^[0-9]+$ ]]; then
		echo "-c '$c' / -b '$b' are not counts"
	elif [ "$b" -eq 0 ] || [ $((c % b)) -ne 0 ]; then
		echo "-b $b does not divide -c $c: dtestcm would overrun its h_ep[$c] array" \
			"(its own bug); give a -b that divides -c"
	fi
}

# ---- the cases: name -> program, IA, flags given to both sides ------------
CASE_ORDER=()
declare -A C_PROG=() C_IA=() C_ARGS=()
add() {
	local name=$1 prog=$2 ia=$3 why
	shift 3
	if [ "$prog" = dtestcm ]; then
		why=$(dtestcm_unsound "$@")
		[ -z "$why" ] || bail "case $name: dtestcm $*: $why"
	fi
	CASE_ORDER+=("$name")
	C_PROG[$name]=$prog C_IA[$name]=$ia C_ARGS[$name]="$*"
}
add dtest-default   dtest    "$IA"    -b 4096 -B 100
add dtest-p         dtest    "$IA"    -b 4096 -B 100 -p
add dtest-c         dtest    "$IA"    -b 4096 -B 100 -c
add dtest-w         dtest    "$IA"    -b 4096 -B 100 -w
add dtest-u         dtest    "$IA"    -b 4096 -B 100 -u
add dtest-rr        dtest    "$IA_RR" -b 4096 -B 100
add dtest-pingpong  dtest    "$IA"    -W -b 64
# the same, 100 round trips instead of 1000 (-B after -W): for valgrind,
# where each side's spin on the target byte holds valgrind's one running
# thread for a whole time slice, so every trip waits for the scheduler
# (3.6 s idle, 45-80 s beside 3 busy processes; one CI run failed it)
add dtest-pingpong-100 dtest   "$IA"    -W -b 64 -B 100
add dtest-datacheck dtest    "$IA"    -D -b 4096
add dtest-allsizes  dtest    "$IA"    -W -a -b 65536
add dtestcm-poll    dtestcm  "$IA"    -c 100 -b 10
add dtestcm-w       dtestcm  "$IA"    -c 100 -b 10 -w
add dtestcm-1000    dtestcm  "$IA"    -c 1000
add dtestsrq-srq    dtestsrq "$IA"    -c 2 -B 4 -t 3 -b 1024
add dtestsrq-srq-c4 dtestsrq "$IA"    -c 4 -B 8 -t 3 -b 1024
# dtestsrq's async EVD holds 8 events: with more than 8 connections the
# server's EP_BROKEN events may outrun it on a loaded machine (overflow)
add dtestsrq-srq-c8 dtestsrq "$IA"    -c 8 -B 10 -t 10 -b 4096
add dtestsrq-nosrq  dtestsrq "$IA"    -c 2 -B 4 -t 3 -b 1024 -S 0
# the IB extension (about 1 s each: dtestx sleeps only in its atomics)
add dtestx-query    dtestx   "$IA"    -q
add dtestx          dtestx   "$IA"
add dtestx-p        dtestx   "$IA"    -p
add dtestx-m        dtestx   "$IA"    -m
add dtestx-b4096    dtestx   "$IA"    -b 4096
# UD endpoints (an RDM IA): 4 resolutions each way on one EP, or 4 EPs
add dtestx-u        dtestx   "$IA"    -u
add dtestx-U4m      dtestx   "$IA"    -U 4 -m
# about 7 s: dtestx sleeps between its atomics
add dtestx-atomics  dtestx   "$IA_ATOMIC"
if [ -n "${CLIENTS_EXTRA:-}" ]; then
	read -ra extra <<<"$CLIENTS_EXTRA"
	[ ${#extra[@]} -ge 2 ] || bail "CLIENTS_EXTRA='$CLIENTS_EXTRA': want NAME PROGRAM FLAGS..."
	[ -z "${C_PROG[${extra[0]}]+x}" ] || bail "CLIENTS_EXTRA: case ${extra[0]} exists already"
	add "${extra[0]}" "${extra[1]}" "$IA" "${extra[@]:2}"
fi

if [ "${CLIENTS_CASES:-}" = list ]; then
	for c in "${CASE_ORDER[@]}"; do
		printf '%-16s %s -P %s %s\n' "$c" "${C_PROG[$c]}" "${C_IA[$c]}" "${C_ARGS[$c]}"
	done
	exit 0
fi

SELECTED=()
if [ -n "${CLIENTS_CASES:-}" ]; then
	read -ra SELECTED <<<"$CLIENTS_CASES"
	for c in "${SELECTED[@]}"; do
		[ -n "${C_PROG[$c]+x}" ] ||
			bail "unknown case '$c' in CLIENTS_CASES; known: ${CASE_ORDER[*]}"
	done
else
	SELECTED=("${CASE_ORDER[@]}")
fi
for v in LIMIT READY_LIMIT GRACE PORT_WAIT; do
	[[ ${!v} =~ ^[0-9]+$ ]] || bail "$v must be a whole number of seconds, not '${!v}'"
done
command -v timeout >/dev/null 2>&1 || bail "timeout (coreutils) not found"
for c in "${SELECTED[@]}"; do
	command -v "${C_PROG[$c]}" >/dev/null 2>&1 ||
		bail "${C_PROG[$c]} not found (Debian package dapl2-utils)"
done
# CONF: the file the registry reads.  CLIENTS_REGISTRY=system: /etc/dat.conf,
# as an installed provider is found, with no DAT_OVERRIDE at all.
if [ "${CLIENTS_REGISTRY:-}" = system ]; then
	unset DAT_OVERRIDE
	CONF=/etc/dat.conf
	[ -r "$CONF" ] || bail "$CONF not found"
else
	[ -r "$B/dat.conf" ] || bail "$B/dat.conf not found: run make first (or set B)"
	DAT_OVERRIDE="$(cd "$B" && pwd)/dat.conf"
	export DAT_OVERRIDE
	CONF=$DAT_OVERRIDE
fi

# ---- the command prefix: timeout, the wrap, stdbuf -----------------------
# stdbuf works by LD_PRELOAD, so it goes after a leading "env VAR=..." (which
# may set LD_PRELOAD itself) but before any program of the wrap (valgrind
# runs the program it is given; it must not be stdbuf).
read -ra WRAPW <<<"$WRAP"
i=0
if [ "${#WRAPW[@]}" -gt 0 ] && [ "${WRAPW[0]}" = env ]; then
	i=1
	while [ "$i" -lt "${#WRAPW[@]}" ]; do
		case ${WRAPW[$i]} in
		-u | -C | --unset | --chdir) i=$((i + 2)) ;;
		-* | *=*) i=$((i + 1)) ;;
		*) break ;;
		esac
	done
fi
PREFIX=(timeout --kill-after="$KILL_AFTER" "$LIMIT" "${WRAPW[@]:0:$i}")
command -v stdbuf >/dev/null 2>&1 && PREFIX+=(stdbuf -oL)
PREFIX+=("${WRAPW[@]:$i}")

if [ -n "${CLIENTS_LOGDIR:-}" ]; then
	mkdir -p "$CLIENTS_LOGDIR" || bail "cannot create $CLIENTS_LOGDIR"
	logdir=$CLIENTS_LOGDIR keep=1
else
	logdir=$(mktemp -d) keep=0
fi
# the programs run in the log directory: what a crash drops (a .btr
# backtrace file) stays out of the source tree
logdir=$(cd "$logdir" && pwd) && cd "$logdir" || bail "cannot enter $logdir"

# dtestx's own race: its server creates its PSP only after the side-channel
# exchange that releases the client, whose dat_ep_connect then finds no
# listener about 1 run in 2 here (PEER_REJECTED, "unexpected event, !conn
# established: 0x4002"); on InfiniBand the CM's own round trips hide it.
# The dtestx client runs with a preloaded dat_ep_connect that waits 300 ms
# and then calls libdat2's: dtestx itself is unchanged.
XSHIM=""
xshim_build() {
	[ -n "$XSHIM" ] && return 0
	command -v cc >/dev/null 2>&1 || return 1
	cat >"$logdir/connect_delay.c" <<'EOC'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
#include <dat2/udat.h>

typedef DAT_RETURN (*connect_fn)(DAT_EP_HANDLE, DAT_IA_ADDRESS_PTR, DAT_CONN_QUAL,
				 DAT_TIMEOUT, DAT_COUNT, const DAT_PVOID, DAT_QOS,
				 DAT_CONNECT_FLAGS);

DAT_RETURN dat_ep_connect(DAT_EP_HANDLE ep, DAT_IA_ADDRESS_PTR addr, DAT_CONN_QUAL qual,
			  DAT_TIMEOUT timeout, DAT_COUNT plen, const DAT_PVOID pdata,
			  DAT_QOS qos, DAT_CONNECT_FLAGS flags)
{
	struct timespec ts = { 0, 300000000L };
	connect_fn real = (connect_fn)dlsym(RTLD_NEXT, "dat_ep_connect");

	nanosleep(&ts, NULL);
	return real ? real(ep, addr, qual, timeout, plen, pdata, qos, flags) :
		      DAT_INTERNAL_ERROR;
}
EOC
	cc -shared -fPIC -o "$logdir/connect_delay.so" "$logdir/connect_delay.c" -ldl \
		>"$logdir/connect_delay.err" 2>&1 || return 1
	XSHIM=$logdir/connect_delay.so
}

# ---- process bookkeeping ------------------------------------------------
LIVE=()			# pids of the `timeout` processes still running
spid="" cpid=""

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# kill_run PID: TERM to the process group of a `timeout` (it makes its own
# group, holding the program and any wrapper), KILL after KILL_AFTER seconds.
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
	[ "$keep" -eq 1 ] || rm -rf "$logdir"
}
trap cleanup EXIT
trap 'echo "Bail out! interrupted"; exit 2' INT TERM HUP

now_ms() {
	local t=${EPOCHREALTIME//[.,]/}
	NOW=$((t / 1000))
}

# ---- ports (from /proc/net/tcp*, no ss needed) --------------------------
# port_sockets PORT [listen]: sockets bound to local PORT, in any state but
# TIME_WAIT/CLOSE (those do not stop a bind), or only LISTEN ones.
port_sockets() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" -v only="${2:-}" '
		FNR > 1 && substr($2, length($2) - 4) == p {
			if (only == "listen" ? $4 == "0A" : ($4 != "06" && $4 != "07"))
				print FILENAME ": " $2 " -> " $3 " state " $4
		}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# listening PORT GROUP: a process of the process group GROUP (a `timeout` and
# what it runs) listens on PORT.  Someone else's dtest on this host may
# listen there too: its listener must not make our server look ready.
listening() {
	local hex inodes socks inode p
	command -v pgrep >/dev/null 2>&1 || { [ -n "$(port_sockets "$1" listen)" ]; return; }
	hex=$(printf '%04X' "$1")
	inodes=$(awk -v p=":$hex" 'FNR > 1 && $4 == "0A" &&
		substr($2, length($2) - 4) == p { print $10 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null)
	[ -n "$inodes" ] || return 1
	socks=$(for p in $(pgrep -g "$2"); do
		find "/proc/$p/fd" -lname 'socket:*' -printf '%l\n' 2>/dev/null
	done)
	while read -r inode; do
		grep -qxF "socket:[$inode]" <<<"$socks" && return 0
	done <<<"$inodes"
	return 1
}

# wait_ports_free: sets $busy to a description if they stay busy.
wait_ports_free() {
	local deadline s
	busy=""
	now_ms
	deadline=$((NOW + PORT_WAIT * 1000))
	while :; do
		s=$(port_sockets "$SIDE_PORT"; port_sockets "$CONN_PORT"; port_sockets "$X_PORT")
		[ -z "$s" ] && return 0
		now_ms
		if [ "$NOW" -ge "$deadline" ]; then
			busy="ports $SIDE_PORT/$CONN_PORT still in use after ${PORT_WAIT}s:"$'\n'"$s"
			command -v ss >/dev/null 2>&1 &&
				busy+=$'\n'"$(ss -tanp "( sport = :$SIDE_PORT or sport = :$CONN_PORT )" 2>/dev/null)"
			return 1
		fi
		sleep 0.2
	done
}

# One run at a time per host (fixed ports): a lock around each pair.
LOCKFILE=${TMPDIR:-/tmp}/dapl-ofi-stock-clients.lock
locked=0
take_lock() {
	locked=0
	command -v flock >/dev/null 2>&1 || return 0
	{ exec 9>>"$LOCKFILE"; } 2>/dev/null || return 0
	if flock -w $((LIMIT + KILL_AFTER + GRACE + PORT_WAIT)) 9; then
		locked=1
	else
		busy="another run held $LOCKFILE for too long"
		return 1
	fi
}
drop_lock() { [ "$locked" -eq 1 ] && flock -u 9; exec 9>&-; locked=0; }

# start LOG CMD...: runs CMD under PREFIX in the background; sets $started.
start() {
	local log=$1
	shift
	: >"$log"	# exists before the background redirection runs
	"${PREFIX[@]}" "$@" >"$log" 2>&1 </dev/null 9>&- &
	started=$!
	LIVE+=("$started")
}

forget() {
	local p keepl=()
	for p in "${LIVE[@]}"; do [ "$p" = "$1" ] || keepl+=("$p"); done
	LIVE=("${keepl[@]}")
}

# ready PROG LOG PID: is the server (run by the `timeout` PID) ready?
#   dtest    prints "Server is waiting for client connection" and listens on
#            the side channel (its client does not retry it);
#   dtestcm  listens on the side channel (after creating its PSP);
#   dtestsrq has no side channel: "ready on port" (-v), or a listener on the
#            conn_qual port once its PSP exists.
ready() {
	case $1 in
	dtest) grep -q 'Server is waiting for client connection' "$2" && listening "$SIDE_PORT" "$3" ;;
	dtestcm) listening "$SIDE_PORT" "$3" ;;
	dtestsrq) grep -q 'ready on port' "$2" || listening "$CONN_PORT" "$3" ;;
	dtestx) grep -q 'waiting to snd addr' "$2" && listening "$SIDE_PORT" "$3" ;;
	esac
}

# ---- judging ------------------------------------------------------------
# side_problems SIDE PROG LOG RC KILLED EXPECT_N MODE MS: problems of one
# side (which ran MS milliseconds), one per line, appended to $problems.
side_problems() {
	local side=$1 prog=$2 log=$3 rc=$4 killed=$5 cn=$6 mode=$7 ms=$8 p="" lines Side
	Side=${side^}
	if [ -n "$killed" ]; then
		p+="killed by the harness: $killed"$'\n'
	elif [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$ms" -ge $((LIMIT * 1000)) ]; }; then
		p+="timed out after ${LIMIT}s (CLIENTS_TIMEOUT), killed by timeout"$'\n'
	elif [ "$rc" -gt 128 ] && [ "$rc" -le 192 ]; then
		p+="killed by signal $((rc - 128)) (SIG$(kill -l $((rc - 128)) 2>/dev/null))"$'\n'
	fi
	lines=$(grep -E 'terminated with signal|Segmentation fault|Sanitizer|runtime error:|^==[0-9]+== |stack smashing|double free|free\(\): |malloc\(\): |corrupted (size|double)|Aborted|core dumped' "$log" |
		head -10)
	[ -n "$lines" ] && p+="$lines"$'\n'
	lines=$(grep -v '^dapl-ofi\[' "$log" |
		grep -E '(^|[^[:alnum:]_])(ERR|ERROR|Err|Error)([^[:alnum:]_]|$)|Failed to|Couldn.t|Could not|No valid data|invalid EP' |
		head -10)
	[ -n "$lines" ] && p+="$lines"$'\n'
	case $prog in
	dtest)
		lines=$(grep 'FAILED' "$log" | head -5)
		[ -n "$lines" ] && p+="$lines"$'\n'
		grep -q 'DAPL Test Complete\. PASSED' "$log" ||
			p+="no 'DAPL Test Complete. PASSED' line"$'\n'
		;;
	dtestcm)
		grep -q "ALL $cn CONNECTED on $Side!" "$log" ||
			p+="no 'ALL $cn CONNECTED on $Side!' line"$'\n'
		grep -q ' DAPL Connection Test Complete\.' "$log" ||
			p+="no ' DAPL Connection Test Complete.' line"$'\n'
		;;
	dtestx)
		if [ "$mode" = u ]; then
			grep -q 'IB extension test - UD test PASSED' "$log" ||
				p+="no 'IB extension test - UD test PASSED' line"$'\n'
			[ "$(grep -c '^Recv RMR message' "$log")" -eq "$cn" ] ||
				p+="not $cn 'Recv RMR message' lines"$'\n'
		elif [ "$mode" = q ]; then
			grep -q 'Open_Query: Provider Specific Attribute.* DAT_IB_IMMED_DATA=TRUE' "$log" ||
				p+="no 'DAT_IB_IMMED_DATA=TRUE' attribute in the open query"$'\n'
			[ "$rc" -eq 0 ] || p+="exit status $rc"$'\n'
		else
			grep -q 'RDMA_WRITE_WITH_IMMEDIATE_DATA test - PASSED' "$log" ||
				p+="no 'RDMA_WRITE_WITH_IMMEDIATE_DATA test - PASSED' line"$'\n'
			grep -q 'IB extension test - immed/atomic test PASSED' "$log" ||
				p+="no 'IB extension test - immed/atomic test PASSED' line"$'\n'
		fi
		# every IA with atomics runs them (dtestx skips them on one
		# without): started, they must pass
		if [ "$mode" = a ] || grep -q 'starting cmp_swap' "$log"; then
			grep -q 'CMP_SWAP test - PASSED' "$log" ||
				p+="no 'CMP_SWAP test - PASSED' line"$'\n'
			grep -q 'FETCH_ADD test - PASSED' "$log" ||
				p+="no 'FETCH_ADD test - PASSED' line"$'\n'
		fi
		if [ "$mode" = p ]; then
			grep -q '^ IA Cntrs:' "$log" || p+="no ' IA Cntrs:' line"$'\n'
			grep -qE '^ EP\[0\] Cntrs:.* [1-9]' "$log" ||
				p+="no ' EP[0] Cntrs:' line with a counter that is not 0"$'\n'
			grep -qE '^ DTO_EVD Cntrs:.* [1-9]' "$log" ||
				p+="no ' DTO_EVD Cntrs:' line with a counter that is not 0"$'\n'
		fi
		;;
	dtestsrq)
		local m
		m=$(sed -n 's/^ *Running \(.*\) test as .*/\1/p' "$log" | head -1)
		[ -n "$m" ] || m=$mode
		grep -qiE "ALL $cn CONNECTED on $side!" "$log" ||
			p+="no 'ALL $cn CONNECTED on $side!' line"$'\n'
		grep -qF " DAPL $m Test Complete." "$log" ||
			p+="no ' DAPL $m Test Complete.' line"$'\n'
		;;
	esac
	[ -n "$p" ] && problems+="$(printf '%s' "$p" | sed -e '/^$/d' -e "s/^/$side: /")"$'\n'
}

# show_log SIDE LOG RC SECS CMD: the tail of one side's log as comments.
show_log() {
	local side=$1 log=$2 rc=$3 secs=$4 cmd=$5 total
	if [ ! -e "$log" ]; then
		echo "#   ---- $side: not started"
		return
	fi
	total=$(wc -l <"$log")
	if [ "$total" -le "$TAIL" ]; then total="all $total lines"; else total="last $TAIL of $total lines"; fi
	echo "#   ---- $side (exit $rc, ran ${secs}s, $total): $cmd"
	tail -n "$TAIL" "$log" | sed -e 's/^/#   | /'
}

# ---- one case -----------------------------------------------------------
n=0 npass=0 nfail=0

run_case() {
	local name=$1 prog=${C_PROG[$1]} ia=${C_IA[$1]} args srv cli
	local slog="$logdir/$name.server.log" clog="$logdir/$name.client.log"
	local srv_rc=- cli_rc=- skill="" ckill="" isready=0 t0 ts tr sdone="" cdone=""
	local ssecs=- csecs=- sms=0 cms=0 cn mode
	read -ra args <<<"${C_ARGS[$name]}"
	n=$((n + 1))
	problems=""
	rm -f "$slog" "$clog"

	if ! grep -qE "^[[:space:]]*${ia}[[:space:]]" "$CONF"; then
		nfail=$((nfail + 1))
		echo "not ok $n - $name: $prog -P $ia ${C_ARGS[$name]}"
		echo "#   IA $ia is not in $CONF: nothing was run"
		return
	fi
	srv=("$prog" -P "$ia" -s "${args[@]}")
	[ "$prog" = dtestsrq ] && srv+=(-v)	# prints "ready on port"
	cli=("$prog" -P "$ia" -h "$HOST" "${args[@]}")
	if [ "$prog" = dtestx ] && xshim_build; then
		# appended: a sanitizer runtime of the wrap must stay first
		# shellcheck disable=SC2016
		cli=(sh -c 'LD_PRELOAD="${LD_PRELOAD:+$LD_PRELOAD }$0" exec "$@"' "$XSHIM" "${cli[@]}")
	fi
	cn=$(sed -n 's/.*-c \([0-9]*\).*/\1/p' <<<"${C_ARGS[$name]}")
	[ -n "$cn" ] || cn=1
	mode="RC SRQ"
	[[ " ${C_ARGS[$name]} " == *" -S 0 "* ]] && mode="RC none SRQ"
	if [ "$prog" = dtestx ]; then
		mode=""
		[[ " ${C_ARGS[$name]} " == *" -p "* ]] && mode=p
		[[ " ${C_ARGS[$name]} " == *" -q "* ]] && mode=q
		[ "$name" = dtestx-atomics ] && mode=a
		if [[ " ${C_ARGS[$name]} " == *" -u "* || " ${C_ARGS[$name]} " == *" -U "* ]]; then
			# UD: both sides resolve and send; -h alone does not
			# make a client then
			mode=u
			cli+=(-c)
			cn=$(sed -n 's/.*-U \([0-9]*\).*/\1/p' <<<"${C_ARGS[$name]}")
			[ -n "$cn" ] || cn=4
		fi
	fi

	now_ms
	t0=$NOW
	if [ "$mode" = q ]; then
		# one process, no peer: the open query by IA name
		srv=("$prog" -P "$ia" "${args[@]}")
		start "$slog" "${srv[@]}"
		spid=$started
		wait "$spid"
		srv_rc=$?
		forget "$spid"
		now_ms
		sms=$((NOW - t0))
		ssecs=$(awk -v a="$sms" 'BEGIN { printf "%.1f", a / 1000 }')
		side_problems server "$prog" "$slog" "$srv_rc" "" 1 q "$sms"
	elif ! take_lock || ! wait_ports_free; then
		problems+="$busy"$'\n'
		drop_lock
	else
		start "$slog" "${srv[@]}"
		spid=$started
		now_ms
		ts=$NOW
		# wait for the server to be ready, to die, or to run out of time
		while :; do
			if ready "$prog" "$slog" "$spid"; then
				isready=1
				break
			fi
			if ! alive "$spid"; then
				problems+="server: exited before it was ready; client not started"$'\n'
				break
			fi
			now_ms
			if [ $((NOW - ts)) -ge $((READY_LIMIT * 1000)) ]; then
				skill="not ready after ${READY_LIMIT}s (CLIENTS_READY_TIMEOUT)"
				problems+="server: never became ready; client not started"$'\n'
				kill_run "$spid"
				break
			fi
			sleep 0.1
		done
		now_ms
		tr=$NOW
		if [ "$isready" -eq 1 ]; then
			start "$clog" "${cli[@]}"
			cpid=$started
			# both run; once one has exited the other gets GRACE seconds
			while alive "$spid" || alive "$cpid"; do
				now_ms
				if ! alive "$spid" && [ -z "$sdone" ]; then sdone=$NOW; fi
				if ! alive "$cpid" && [ -z "$cdone" ]; then cdone=$NOW; fi
				if [ -n "$sdone" ] && alive "$cpid" &&
				   [ $((NOW - sdone)) -ge $((GRACE * 1000)) ]; then
					ckill="still running ${GRACE}s after the server exited (CLIENTS_GRACE)"
					kill_run "$cpid"
				fi
				if [ -n "$cdone" ] && alive "$spid" &&
				   [ $((NOW - cdone)) -ge $((GRACE * 1000)) ]; then
					skill="still running ${GRACE}s after the client exited (CLIENTS_GRACE)"
					kill_run "$spid"
				fi
				sleep 0.1
			done
			wait "$cpid"
			cli_rc=$?
			forget "$cpid"
			now_ms
			cms=$(( ${cdone:-$NOW} - tr ))
			csecs=$(awk -v a="$cms" 'BEGIN { printf "%.1f", a / 1000 }')
		fi
		wait "$spid"
		srv_rc=$?
		forget "$spid"
		now_ms
		sms=$(( ${sdone:-$NOW} - ts ))
		ssecs=$(awk -v a="$sms" 'BEGIN { printf "%.1f", a / 1000 }')
		drop_lock
		side_problems server "$prog" "$slog" "$srv_rc" "$skill" "$cn" "$mode" "$sms"
		if [ -e "$clog" ]; then
			side_problems client "$prog" "$clog" "$cli_rc" "$ckill" "$cn" "$mode" "$cms"
		fi
	fi
	now_ms
	local secs
	secs=$(awk -v a="$t0" -v b="$NOW" 'BEGIN { printf "%.1f", (b - a) / 1000 }')

	if [ -z "$problems" ]; then
		npass=$((npass + 1))
		echo "ok $n - $name: $prog -P $ia ${C_ARGS[$name]}"
		echo "#   ${secs}s"
		return
	fi
	# dtest -D checks an RDMA write by its last byte, then reads the first:
	# its own race (tests/run.sh says why), about 1 run in 20 on an idle
	# machine and far more often beside other load.  That failure, and only
	# that one (the server's "... expected 0x..." data mismatch, or the
	# client's "Tx data from server wrong" when the server echoed a
	# half-landed buffer), is run again, up to three runs in all; each
	# failed run's logs stay as *.race<N>.log.
	local runs=${RACE_RUNS:-1}
	if [ "$name" = dtest-datacheck ] && [ "$runs" -lt 3 ] &&
	   cat "$slog" "$clog" 2>/dev/null |
	   grep -qE 'expected 0x[0-9a-f]+|Tx data from server wrong'; then
		echo "#   $name: dtest's own -D race (a data check before the write had fully landed), run $runs of at most 3; running it again"
		mv -f "$slog" "${slog%.log}.race$runs.log" 2>/dev/null
		mv -f "$clog" "${clog%.log}.race$runs.log" 2>/dev/null
		n=$((n - 1))
		RACE_RUNS=$((runs + 1)) run_case "$name"
		return
	fi
	nfail=$((nfail + 1))
	echo "not ok $n - $name: $prog -P $ia ${C_ARGS[$name]}"
	printf '%s' "$problems" | sed -e '/^$/d' -e 's/^/#   /'
	local stubs
	stubs=$(cat "$slog" "$clog" 2>/dev/null | grep -oE 'dat_[a-z_]+ is not implemented' |
		sed 's/ is not implemented//' | sort -u | paste -sd, -)
	if [ -n "$stubs" ]; then
		echo "#   stubs reached (DAT_NOT_IMPLEMENTED): $stubs"
	elif cat "$slog" "$clog" 2>/dev/null | grep -q DAT_NOT_IMPLEMENTED; then
		echo "#   DAT_NOT_IMPLEMENTED returned"
	fi
	echo "#   case took ${secs}s"
	show_log server "$slog" "$srv_rc" "$ssecs" "${PREFIX[*]} ${srv[*]}"
	show_log client "$clog" "$cli_rc" "$csecs" "${PREFIX[*]} ${cli[*]}"
}

echo "1..${#SELECTED[@]}"
echo "# stock clients: ${DAT_OVERRIDE:+DAT_OVERRIDE=}$CONF, timeout ${LIMIT}s${WRAP:+, wrapped in: $WRAP}${CLIENTS_LOGDIR:+, logs in $CLIENTS_LOGDIR}"
now_ms
suite_t0=$NOW
# bash reports a background job killed by a signal ("line N: PID Segmentation
# fault ...") on its own stderr; the TAP comments already say it, so only the
# rest of the harness's stderr is passed on.
# dtest -D spins on memory and calls nothing while the peer's RDMA write
# lands, and takes the write's last byte as proof that the whole buffer did
# (see tests/run.sh).  With dapl-ofi's default progress lease (the progress
# thread stays off a CQ for 50 us after its consumer's last call) that race
# showed in about 1 run in 2 here ("Tx data from server wrong"); with
# DAPL_OFI_PROGRESS_LEASE_US=0, the setting dapl-ofi(7) gives for a target
# that only spins on memory, in 0 runs of 18.  So this case runs with 0
# unless the caller chose a lease.
for c in "${SELECTED[@]}"; do
	if [ "$c" = dtest-datacheck ]; then
		DAPL_OFI_PROGRESS_LEASE_US=${DAPL_OFI_PROGRESS_LEASE_US:-0} \
			run_case "$c" 2>"$logdir/harness.err"
	else
		run_case "$c" 2>"$logdir/harness.err"
	fi
	grep -vE '^[^ ]*: line [0-9]+: +[0-9]+ [A-Z][a-z]+' "$logdir/harness.err" >&2
done
now_ms
echo "# clients: $npass ok, $nfail not ok, of $n," \
	"in $(awk -v a="$suite_t0" -v b="$NOW" 'BEGIN { printf "%.1f", (b - a) / 1000 }')s"
[ "$nfail" -eq 0 ]
