#!/bin/bash
# A real third-party DAT consumer over dapl-ofi: ParaStation pscom 6.0.0's
# DAPL plugin (pscom4dapl), driven by pscom's own ping-pong, pscom_pp.
#
#   tests/apps/pscom.sh            (from the repo root, after `make`)
#
# Eager messages are RDMA writes into a ring in the peer, which polls the
# ring's tail in memory and, while it finds nothing, dequeues its EVD
# (psdapl_recvlook: so it drives the provider itself, unlike dtest -W);
# messages at or above PSP_DAPL_RENDEZVOUS are registered (dat_lmr_create)
# and pulled by the receiver with an RDMA read.  Every case runs a pscom_pp server and client
# on 127.0.0.1 through the stock DAT registry ($B/dat.conf, libfabric tcp).
#
# Environment:
#   B                 dapl-ofi build directory with dat.conf (default: build);
#                     pscom is built in $B/apps/pscom
#   CHECK_SHARED      where apps/pscom/ (tarball, dat2.patch, fixes.patch) is
#                     (default: ../shared beside the repository); missing: the
#                     test is skipped, or fails with CHECK_APPS_REQUIRED=1
#                     (.ci/run sets it: CI has them)
#   PSCOM_TIMEOUT     seconds each client may run (default: 90)
#   PSCOM_PORTS       first and last TCP port for pscom_pp (default: "18700 18799")
#
# Prints TAP: "ok 1 pscom build", then one line per case, each with the
# reasons of a failure and the tails of both logs as "#" comments.  Logs of
# the last run: $B/apps/pscom/logs/.  Exit 0 if nothing failed.
#
# pscom is built from the upstream tarball with the DAT 2.0 port and the
# fixes of its plugin (see CHECK_SHARED/apps/pscom/README.md), only the
# targets pscom_pp and pscom4dapl, and again only when those inputs or the
# recipe below change (a stamp of their checksums).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
B=${B:-build}
SHARED=${CHECK_SHARED:-$REPO/../shared}
IN=$SHARED/apps/pscom
LIMIT=${PSCOM_TIMEOUT:-90}
read -r PORT_LO PORT_HI <<<"${PSCOM_PORTS:-18700 18799}"
READY_LIMIT=20		# seconds the server has to start listening
GRACE=10		# seconds the server may outlive its client
TAIL=12

bail() { echo "Bail out! $*"; exit 2; }

PLAN=24		# the build, then one line per run_case below
if [ ! -d "$IN" ]; then
	echo "1..1"
	if [ "${CHECK_APPS_REQUIRED:-0}" = 1 ]; then
		echo "not ok 1 pscom: no pscom sources in $IN (CHECK_SHARED), and CHECK_APPS_REQUIRED=1"
		exit 1
	fi
	echo "ok 1 pscom # SKIP no pscom sources in $IN (set CHECK_SHARED)"
	exit 0
fi
echo "1..$PLAN"
for v in LIMIT PORT_LO PORT_HI; do
	[[ ${!v} =~ ^[0-9]+$ ]] || bail "$v must be a whole number, not '${!v}'"
done
[ "$LIMIT" -ge 10 ] || bail "PSCOM_TIMEOUT must be at least 10 seconds"
[ -r "$B/dat.conf" ] || bail "$B/dat.conf not found: run make first (or set B)"
B=$(cd "$B" && pwd)
W=$B/apps/pscom
mkdir -p "$W/logs" || bail "cannot create $W"

now_ms() { local t=${EPOCHREALTIME//[.,]/}; NOW=$((t / 1000)); }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }
now_ms
T_ALL=$NOW

# ---- build -------------------------------------------------------------------
TARBALL=$IN/pscom-6.0.0-1.tar.gz
SRC=$W/pscom-6.0.0-1
OBJ=$W/build
PP=$OBJ/bin/pscom_pp
PLUGIN=$OBJ/lib/pscom4dapl/libpscom4dapl.so
# Only the DAPL plugin: every other plugin, popt tools and pscom's own unit
# tests off, so that a connection can only be dapl or pscom's built-in tcp.
CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DDAPL_ENABLED=ON -DUTEST_ENABLED=OFF \
-DPOPT_ENABLED=OFF -DOPENIB_ENABLED=OFF -DOFED_ENABLED=OFF -DUCP_ENABLED=OFF \
-DPSM2_ENABLED=OFF -DPORTALS4_ENABLED=OFF -DEXTOLL_ENABLED=OFF -DCUDA_ENABLED=OFF \
-DRRCOMM_PRECON_ENABLED=OFF"

# build_pscom: extract, patch, configure, build; the reason on failure.
build_pscom() {
	local log=$W/logs/build.log
	rm -rf "$SRC" "$OBJ" "$W/stamp"
	: >"$log"
	command -v cmake >/dev/null || { why="cmake not found (scripts/deps.sh installs it)"; return 1; }
	command -v patch >/dev/null || { why="patch not found (scripts/deps.sh installs it)"; return 1; }
	if ! tar -xzf "$TARBALL" -C "$W" >>"$log" 2>&1 || [ ! -d "$SRC" ]; then
		why="cannot extract $TARBALL into $SRC"
		return 1
	fi
	local p
	for p in dat2 fixes; do
		patch -d "$SRC" -p1 --forward <"$IN/$p.patch" >>"$log" 2>&1 ||
			{ why="$p.patch does not apply"; return 1; }
	done
	# its version scripts read VERSION, else they guess from the folder
	echo "pscom-6.0.0-1" >"$SRC/VERSION"
	# shellcheck disable=SC2086
	(cd "$W" && cmake -S "$SRC" -B "$OBJ" $CMAKE_FLAGS) >>"$log" 2>&1 ||
		{ why="cmake configure failed"; return 1; }
	grep -q '^DAPL_ENABLED:BOOL=ON$' "$OBJ/CMakeCache.txt" ||
		{ why="DAPL_ENABLED is not ON (dat2/udat.h or libdat2 not found)"; return 1; }
	cmake --build "$OBJ" -j "$(nproc 2>/dev/null || echo 2)" --target pscom_pp pscom4dapl \
		>>"$log" 2>&1 || { why="build failed"; return 1; }
	if [ ! -x "$PP" ] || [ ! -f "$PLUGIN" ]; then
		why="no $PP or $PLUGIN after the build"
		return 1
	fi
	echo "$stamp" >"$W/stamp"
}

fail_build() {
	echo "not ok 1 pscom build: $why"
	echo "#   log: $W/logs/build.log"
	tail -n 20 "$W/logs/build.log" 2>/dev/null | sed 's/^/#   | /'
	exit 1
}
for f in "$TARBALL" "$IN/dat2.patch" "$IN/fixes.patch"; do
	[ -r "$f" ] || { why="$f not found"; fail_build; }
done
# the inputs and the recipe (this script's build part is its flags)
stamp=$(cat "$TARBALL" "$IN/dat2.patch" "$IN/fixes.patch" | sha256sum | cut -c1-16)
stamp="$stamp $(echo "$CMAKE_FLAGS" | sha256sum | cut -c1-16)"
now_ms
t0=$NOW
if [ -x "$PP" ] && [ -f "$PLUGIN" ] && [ "$(cat "$W/stamp" 2>/dev/null)" = "$stamp" ]; then
	how="reused"
else
	why=""
	build_pscom || fail_build
	how="built"
fi
now_ms
echo "ok 1 pscom build ($how in $(secs "$t0" "$NOW")s: $W)"

# ---- running one case ----------------------------------------------------------
DATCONF=$B/dat.conf
LIVE=()

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
# SIGKILL only: libfabric loads libinfinipath (psm), whose SIGTERM handler
# calls exit() and can deadlock in pscom's atexit cleanup.  A process killed
# on libfabric shm leaves its regions in /dev/shm (<pid>:<uid>:<n>).
kill_wait() {
	if alive "$1" && kill -KILL "$1" 2>/dev/null; then
		wait "$1" 2>/dev/null
		rm -f /dev/shm/"$1":*
	fi
	wait "$1" 2>/dev/null
}
cleanup() {
	local p
	for p in "${LIVE[@]}"; do kill_wait "$p"; done
	LIVE=()
}
trap cleanup EXIT
trap 'echo "Bail out! interrupted"; exit 2' INT TERM HUP

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
		port_free "$p" && { echo "$p"; return 0; }
	done
	return 1
}

# sizes MIN MAX: the message sizes pscom_pp's client loop visits (its own
# arithmetic: +1 below 2, then times sqrt(2), rounded).
sizes() {
	awk -v lo="$1" -v hi="$2" 'BEGIN {
		for (ms = lo; int(ms + 0.5) <= hi; ms = ms < 2 ? ms + 1 : ms * 1.4142135623730950488)
			print int(ms + 0.5) }'
}

SIZE_RE='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+( ok)?$'
CRASH_RE='Segmentation fault|Aborted|core dumped|Assertion|stack smashing|double free|free\(\): |malloc\(\): |corrupted (size|double)|Sanitizer|runtime error:'

# check CHECK: one assertion on the logs $srv and $cli; appends to $why.
check() {
	local c=$1 p st r exp got bad
	case $c in
	dapl | tcp)
		grep -qE "^<PSP:.*ACCEPT .* via $c>" "$srv" || why+="server: no ACCEPT via $c"$'\n'
		grep -qE "^New connection from .* via $c$" "$srv" || why+="server: pscom_pp saw no connection via $c"$'\n'
		grep -qE "^<PSP:.*CONNECT .* via $c>" "$cli" || why+="client: no CONNECT via $c"$'\n'
		grep -hE ' via [a-z]+>?$' "$srv" "$cli" | grep -vqE " via $c>?$" &&
			why+="a connection not via $c: $(grep -hE ' via [a-z]+>?$' "$srv" "$cli" | grep -vE " via $c>?$" | head -1)"$'\n'
		;;
	verify)	# every size visited, each verified byte for byte
		exp=$(sizes "$min" "$max" | tr '\n' ' ')
		got=$(grep -E "$SIZE_RE" "$cli" | awk '{ printf "%s ", $1 }')
		[ "$got" = "$exp" ] || why+="client: sizes [${got% }], expected [${exp% }]"$'\n'
		bad=$(grep -E "$SIZE_RE" "$cli" | grep -vc ' ok$')
		[ "$bad" -eq 0 ] || why+="client: $bad size lines not verified ok"$'\n'
		bad=$(grep -cE 'Corrupted|Error in communication' "$cli")
		[ "$bad" -eq 0 ] || why+="client: $bad Corrupted/Error lines: $(grep -m1 -E 'Corrupted|Error in communication' "$cli")"$'\n'
		[ "$cli_rc" = 0 ] || why+="client: exit status $cli_rc"$'\n'
		[ "$srv_rc" = 0 ] || [ "$srv_rc" = waiting ] || why+="server: exit status $srv_rc"$'\n'
		;;
	prov=*)	# the IA named, opened by both sides
		p=${c#prov=}
		for r in "$srv" "$cli"; do
			grep -qF "dat_ia_open(\"$p\", ...) success" "$r" ||
				why+="$(basename "$r" .log): no dat_ia_open(\"$p\") success"$'\n'
		done
		;;
	badprov=*)	# the IA named tried, and its failure told
		p=${c#badprov=}
		for r in "$srv" "$cli"; do
			grep -qF "dat_ia_open(\"$p\", ...) failed" "$r" ||
				why+="$(basename "$r" .log): no dat_ia_open(\"$p\") failed"$'\n'
		done
		;;
	rdma | rndv)	# rendezvous requests made (rdma: none fell back to eager)
		st=$(grep -oE 'RndvReqs:[0-9]+ EagerFallback:[0-9]+ swRndvFallback:[0-9]+' "$cli" | tail -1)
		r=$(sed -n 's/^RndvReqs:\([0-9]*\).*/\1/p' <<<"$st")
		[ -n "$r" ] && [ "$r" -gt 0 ] || why+="client: no rendezvous requests (${st:-no statistics})"$'\n'
		if [ "$c" = rdma ]; then
			grep -q 'EagerFallback:0 swRndvFallback:0' <<<"$st" || why+="client: fallbacks: $st"$'\n'
		fi
		info+="#   $st"$'\n'
		;;
	noconn)	# no plugin can connect: pscom_pp must not claim a message
		grep -qE "^<PSP:.*\(type:none,state:closed\) : connect : " "$cli" ||
			why+="client: no failed connect logged"$'\n'
		grep -qE ' via [a-z]+>?$' "$srv" "$cli" && why+="a connection was made: $(grep -hE ' via [a-z]+>?$' "$srv" "$cli" | head -1)"$'\n'
		exp=$(sizes "$min" "$max" | wc -l)
		got=$(grep -cE '^ *[0-9]+ Error in communication\.\.\.$' "$cli")
		[ "$got" -eq "$exp" ] || why+="client: $got of $exp sizes reported 'Error in communication'"$'\n'
		grep -qE "$SIZE_RE" "$cli" && why+="client: a size line claims success: $(grep -m1 -E "$SIZE_RE" "$cli")"$'\n'
		if [ "$cli_rc" = - ] || [ "$cli_rc" -ge 124 ]; then
			why+="client: did not exit by itself (status $cli_rc)"$'\n'
		fi
		[ "$srv_rc" = waiting ] || why+="server: exited (status $srv_rc), expected it still waiting for a client"$'\n'
		info+="#   client exit status $cli_rc; $(grep -m1 -E 'connect : ' "$cli" | sed 's/^<PSP:[^:]*:[0-9]*://; s/>$//')"$'\n'
		;;
	*) why+="unknown check $c"$'\n' ;;
	esac
}

# run_case NAME CHECKS "ENV ..." MIN MAX "CLIENT ARGS"
#   CHECKS: comma list (see check above); ENV: VAR=VALUE words for both sides.
# The server is `pscom_pp -1` (one client), the client `pscom_pp -c`, both
# with PSP_DEBUG=3 (the IA opened) and PSP_DEBUG_CONTYPE=1 (each connection's
# plugin), the shared memory plugin off and only pscom4dapl to load.
N=1
run_case() {
	local name=$1 checks=$2 envs=$3 min=$4 max=$5 cargs=$6
	local srv=$W/logs/case$((N + 1))_srv.log cli=$W/logs/case$((N + 1))_cli.log
	local why="" info="" spid port tries ready srv_rc=- cli_rc=- t0 tc c allowed grace=$GRACE
	# a server that must outlive its client: looked at after a second
	[[ $checks == *noconn* ]] && grace=1
	N=$((N + 1))
	now_ms
	tc=$NOW
	# shellcheck disable=SC2086
	set -- env DAT_OVERRIDE="$DATCONF" PSP_PLUGINDIR="$OBJ/lib/pscom4dapl/" \
		PSP_SHM=0 PSP_DEBUG=3 PSP_DEBUG_CONTYPE=1 $envs stdbuf -oL "$PP"
	for ((tries = 0; tries < 5; tries++)); do
		port=$(pick_port) || { why+="no free port in $PORT_LO..$PORT_HI"$'\n'; break; }
		"$@" -1 -l "$port" >"$srv" 2>&1 </dev/null &
		spid=$!
		LIVE+=("$spid")
		ready=0
		now_ms
		t0=$NOW
		while [ $((NOW - t0)) -lt $((READY_LIMIT * 1000)) ]; do
			grep -q '^Waiting for client' "$srv" && { ready=1; break; }
			alive "$spid" || break
			sleep 0.05
			now_ms
		done
		[ "$ready" = 1 ] && break
		kill_wait "$spid"
		grep -q 'Address already in use' "$srv" && continue
		why+="server: not listening within ${READY_LIMIT}s"$'\n'
		break
	done
	if [ "$ready" = 1 ]; then
		# --foreground: the client stays in this script's process group,
		# which tests/run.sh's timeout signals as a whole
		# shellcheck disable=SC2086
		timeout --foreground -s KILL "$LIMIT" "$@" -c "127.0.0.1:$port" --minsize="$min" \
			--maxsize="$max" $cargs >"$cli" 2>&1 </dev/null
		cli_rc=$?
		[ "$cli_rc" = 137 ] && why+="client: killed after ${LIMIT}s (PSCOM_TIMEOUT)"$'\n'
		# the server ends when its one client has gone
		now_ms
		t0=$NOW
		while alive "$spid" && [ $((NOW - t0)) -lt $((grace * 1000)) ]; do
			sleep 0.05
			now_ms
		done
		if alive "$spid"; then
			srv_rc=waiting
			kill_wait "$spid"
		else
			wait "$spid"
			srv_rc=$?
		fi
		for c in ${checks//,/ }; do check "$c"; done
		[ "$srv_rc" = waiting ] && [[ $checks != *noconn* ]] &&
			why+="server: still running ${grace}s after its client exited"$'\n'
	fi
	# no crash, and dapl-ofi's errors only about an entry meant to fail
	grep -hE "$CRASH_RE" "$srv" "$cli" 2>/dev/null | head -3 | sed 's/^/crash: /' >"$W/logs/crash"
	[ -s "$W/logs/crash" ] && why+="$(cat "$W/logs/crash")"$'\n'
	allowed=$(sed -n 's/.*badprov=\([^,]*\).*/\1/p' <<<"$checks")
	grep -hE '^dapl-ofi\[[0-9]+\] error' "$srv" "$cli" 2>/dev/null |
		grep -vF "IA '${allowed:-/}'" | head -3 | sed 's/^/dapl-ofi: /' >"$W/logs/crash"
	[ -s "$W/logs/crash" ] && why+="$(cat "$W/logs/crash")"$'\n'
	rm -f "$W/logs/crash"
	now_ms
	if [ -z "$why" ]; then
		echo "ok $N $name"
	else
		echo "not ok $N $name"
		printf '%s' "$why" | sed -e '/^$/d' -e 's/^/#   /'
		echo "#   ---- server (exit $srv_rc), last $TAIL lines of $srv:"
		grep -vE '^Corrupted' "$srv" 2>/dev/null | tail -n "$TAIL" | sed 's/^/#   | /'
		echo "#   ---- client (exit $cli_rc), last $TAIL lines of $cli:"
		grep -vE '^Corrupted' "$cli" 2>/dev/null | tail -n "$TAIL" | sed 's/^/#   | /'
	fi
	printf '%s' "$info"
	if [[ $checks == *verify* ]]; then
		grep -E "$SIZE_RE" "$cli" 2>/dev/null | tail -1 |
			awk '{ printf "#   last: %s B x%s, %s us one way, %s MB/s\n", $1, $2, $3, $4 }'
	fi
	echo "#   $(secs "$tc" "$NOW")s"
	[ -n "$why" ] && FAILED=$((FAILED + 1))
	return 0
}
FAILED=0

# ---- the cases -------------------------------------------------------------------
D="PSP_TCP=0 PSP_DAPL_PROVIDER=ofi-lo"	# DAPL or nothing: no tcp fallback
R="$D PSP_DAPL_RENDEZVOUS=4096"		# from 4 KiB: RDMA-read rendezvous
E=dapl,verify,prov=ofi-lo
MiB=1048576

# Eager: RDMA writes into the peer's ring (16 KiB slots, 16376 B of payload
# each), the default (no rendezvous threshold).
run_case "pscom pp 0 B eager verify"              $E "$D" 0 0 "-V -n 200"
run_case "pscom pp 1 B eager verify"              $E "$D" 1 1 "-V -n 200"
run_case "pscom pp 4096 B eager verify"           $E "$D" 4096 4096 "-V -n 200"
run_case "pscom pp 16376 B eager verify (one ring slot)"  $E "$D" 16376 16376 "-V -n 200"
run_case "pscom pp 16377 B eager verify (two ring slots)" $E "$D" 16377 16377 "-V -n 200"
run_case "pscom pp 65536 B eager verify"          $E "$D" 65536 65536 "-V -n 100"
run_case "pscom pp 4194304 B eager verify"        $E "$D" $((4 * MiB)) $((4 * MiB)) "-V -n 3"
run_case "pscom pp 0 B to 4194304 B eager verify (45 sizes)" $E "$D" 0 $((4 * MiB)) "-V -n 20 -t 20"
# Rendezvous: the receiver reads the registered send buffer (RDMA read);
# one buffer per run, so pscom's registration cache holds it (no fallback).
run_case "pscom pp 1 B rendezvous verify (threshold 1)" $E,rdma "$D PSP_DAPL_RENDEZVOUS=1" 1 1 "-V -v -n 100"
run_case "pscom pp 4096 B rendezvous verify"      $E,rdma "$R" 4096 4096 "-V -v -n 100"
run_case "pscom pp 100001 B rendezvous verify (odd size)" $E,rdma "$R" 100001 100001 "-V -v -n 50"
run_case "pscom pp 1048576 B rendezvous verify (page-aligned buffers)" $E,rdma "$R" $MiB $MiB "-V -v -n 8 --valloc"
run_case "pscom pp 4194304 B rendezvous verify"   $E,rdma "$R" $((4 * MiB)) $((4 * MiB)) "-V -v -n 3"
# every size a new buffer: pscom never deregisters its send buffers
# (pscom_io.c), so its cache fills and later sizes fall back to eager
run_case "pscom pp 4096 B to 4194304 B rendezvous verify (21 sizes)" $E,rndv "$R" 4096 $((4 * MiB)) "-V -v -n 10 -t 20"
# The RDM backend (docs/rdm.md): shm between the two processes, whose CQs
# are polled, and tcp;ofi_rxm, which completes large messages out of order;
# eager writes into the polled ring and the RDMA-read rendezvous on each.
for ia in ofi-shm ofi-rxm-lo; do
	run_case "pscom pp 0 B to 4194304 B eager verify over $ia (RDM backend)" \
		dapl,verify,prov=$ia "PSP_TCP=0 PSP_DAPL_PROVIDER=$ia" 0 $((4 * MiB)) "-V -n 20 -t 20"
	run_case "pscom pp 4096 B to 4194304 B rendezvous verify over $ia (RDM backend)" \
		dapl,verify,rndv,prov=$ia "PSP_TCP=0 PSP_DAPL_PROVIDER=$ia PSP_DAPL_RENDEZVOUS=4096" \
		4096 $((4 * MiB)) "-V -v -n 10 -t 20"
done
# The IA: by name, and by the registry's list (the first entry that opens).
run_case "pscom provider by name: ofi-lo-rr" dapl,verify,prov=ofi-lo-rr \
	"PSP_TCP=0 PSP_DAPL_PROVIDER=ofi-lo-rr" 64 65536 "-V -n 30 -t 20"
qconf=$W/dat-query.conf
{
	echo "# tests/apps/pscom.sh: an entry that cannot open first, then $DATCONF's"
	grep -E '^ofi-bad-if[[:space:]]' "$DATCONF"
	grep -E '^ofi-lo[[:space:]]' "$DATCONF"
} >"$qconf"
DATCONF=$qconf run_case "pscom provider by registry query: skips ofi-bad-if, opens ofi-lo" \
	dapl,verify,badprov=ofi-bad-if,prov=ofi-lo "PSP_TCP=0" 64 64 "-V -n 200"
rm -f "$qconf"
# An IA that cannot open (ofi-bad-if: no such interface): with pscom's tcp
# plugin allowed, the connection falls back to it; without, no plugin
# connects, and pscom_pp reports every message failed and exits (after
# PSP_SHUTDOWN_TIMEOUT; pscom_connect itself returns success, and the
# default timeout 0 waits forever in pscom_close_socket) while the server
# keeps waiting for a client.
run_case "pscom ofi-bad-if falls back to pscom's tcp plugin" tcp,verify,badprov=ofi-bad-if \
	"PSP_TCP=1 PSP_DAPL_PROVIDER=ofi-bad-if" 64 64 "-V -n 200"
run_case "pscom ofi-bad-if without fallback: every message fails, nothing hangs" \
	noconn,badprov=ofi-bad-if "PSP_TCP=0 PSP_DAPL_PROVIDER=ofi-bad-if PSP_SHUTDOWN_TIMEOUT=2" \
	0 4 "-V -n 3"
# Control: pscom's own tcp plugin (the "via" checks tell the two apart).
run_case "pscom pp control: pscom's tcp plugin" tcp,verify "PSP_DAPL=0 PSP_TCP=1" 0 65536 "-V -n 30 -t 20"

now_ms
echo "# pscom: $((N - FAILED)) ok, $FAILED not ok, of $N, in $(secs "$T_ALL" "$NOW")s"
[ "$N" -eq "$PLAN" ] || { echo "# plan mismatch: $N lines, planned $PLAN"; exit 1; }
[ "$FAILED" -eq 0 ]
