#!/bin/bash
# Passive RDMA targets across two processes: daplofi-perf's server is a
# target that calls nothing (write_idle: a stream; write_idle_lat: a
# ping-pong where both sides spin on memory), so only dapl-ofi's progress
# thread can place the data.  Each case must complete within its bound,
# and neither process may take its provider's wait fds for ones that
# never settle (the progress thread's switch to polling, progress.c: one
# warn line) - a stream into a passive target keeps a CQ readable with no
# event to show for it, which is no such evidence.  Latency is printed,
# not judged (make bench judges it).
#
#   tests/passive.sh          (from the repo root, after `make`; B: build dir)
#
# Prints TAP; exit 0 if every case passed.
set -u
B=${B:-build}
IA=${PASSIVE_IA:-ofi-lo}
PERF=$B/daplofi-perf
export DAT_OVERRIDE=${DAT_OVERRIDE:-$PWD/$B/dat.conf}
export DAPL_OFI_LOG_LEVEL=warn
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dapl-ofi-passive.XXXXXX") || exit 2
SRV=
cleanup() {
	[ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT

[ -x "$PERF" ] || { echo "Bail out! $PERF is not built"; exit 2; }

free_port() {
	local p
	for p in $(seq 18800 18899); do
		ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
	done
	return 1
}

n=0 fails=0
# case NAME ARGS...: a daplofi-perf pair, the client given ARGS
case_run() {
	local name=$1 port rc why=""
	shift
	n=$((n + 1))
	port=$(free_port) || { echo "not ok $n - $name # no free port in 18800-18899"; fails=$((fails + 1)); return; }
	timeout -s KILL 120 "$PERF" -P "$IA" -n "$port" -T 20 > "$WORK/srv" 2>&1 &
	SRV=$!
	for _ in $(seq 250); do
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
		sleep 0.02
	done
	timeout -s KILL 120 "$PERF" -P "$IA" -h 127.0.0.1 -n "$port" -T 20 -q --csv --no-header \
		"$@" > "$WORK/cli" 2>&1
	rc=$?
	wait "$SRV"
	SRV=
	[ "$rc" = 0 ] || why="client exit $rc;"
	grep -q "polls instead" "$WORK/srv" "$WORK/cli" &&
		why="$why the progress thread went polling on $IA;"
	grep -qiE "error|sanitizer|runtime error" "$WORK/srv" && why="$why server: $(grep -iE "error|sanitizer" "$WORK/srv" | head -1);"
	awk -F, 'NF > 10 { print "# " $2 " " $4 " B: " ($8 != "" ? "p50 " $8 " us, " : "") $11 " MB/s" }' \
		"$WORK/cli"
	if [ -z "$why" ]; then
		echo "ok $n - $name"
	else
		echo "not ok $n - $name # $why"
		sed 's/^/#   client: /' "$WORK/cli" | tail -5
		sed 's/^/#   server: /' "$WORK/srv" | tail -5
		fails=$((fails + 1))
	fi
}

echo "1..3"
case_run "write_idle: 16384 RDMA writes of 64 KiB into a target calling nothing" \
	-t write_idle -S 64k -I 16384 -m poll
case_run "write_idle_lat: 64 B and 64 KiB ping-pongs, both sides spinning on memory" \
	-t write_idle_lat -S 64,64k -I 2000 -m poll
case_run "write_idle: 1 MiB writes into a target calling nothing" \
	-t write_idle -S 1m -I 512 -m poll
[ "$fails" = 0 ]
