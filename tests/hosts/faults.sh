#!/bin/bash
# The fault matrix across two test hosts (tests/hosts/lib.sh): what each side
# of a DAT connection sees when the network or the peer fails, and that
# every message it reports received is whole and in order.
#
#   tests/hosts/faults.sh [CASE...]      (from the repo root, after make; root)
#
# Each case starts tests/hosts/fault_peer on both hosts (b serves, a
# connects), injects one fault and asserts on both sides' reports: the
# connection event and how long after the fault it came, the receiver's
# "bad 0", that traffic went on where it should.  A peer that vanishes is
# given DAPL_OFI_PEER_TIMEOUT_MS=$T (3 s here; 10 s by default): the cases
# that wait for it cost about T + 3 s each, about 90 s in all.
# Prints TAP; "1..0 # SKIP" where the hosts cannot be made (not root, no nft).
set -u
[ -n "${FAULTS_TRACE:-}" ] && set -x
B=${B:-build}
T=3000			# the peer timeout of the cases that wait for it (ms)
SLACK=${FAULTS_SLACK:-2500}	# how much later than T an end may come (ms): a
			# keepalive interval (1 s), a scheduler and a busy machine
EARLY=1500		# how much earlier: an idle connection's silence began
			# at its last packet, up to a second before the fault
PORT=18700
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
PEER=$PWD/$B/tests/fault_peer
IA=${FAULTS_IA:-ofi-host}	# ofi-host-rdm: the same cases on the RDM backend
# dtest's own flags across the hosts (its defaults: 2000 RDMA writes of 4 MiB)
DTEST_FLAGS=${FAULTS_DTEST_FLAGS:-}
[ -x "$PEER" ] || { echo "faults.sh: $PEER missing: run make tests" >&2; exit 2; }
work=$(mktemp -d)
trap 'hosts_down; rm -rf "$work"' EXIT
HOSTS_DIR=$work
hosts_up_tap "$PWD/$B/libdaplofi.so.2"

n=0 nfail=0
now_ms() { date +%s%3N; }
# pass/fail of one case: its problems, one per line, or none
report() {
	local name=$1 problems=$2
	local seen="" s ev at
	n=$((n + 1))
	for s in a b; do
		grep -qE 'Sanitizer|runtime error:|terminated with signal' "$work/$s.log" 2>/dev/null &&
			problems+="$s: a sanitizer or crash report: $(grep -m1 -E 'Sanitizer|runtime error:|terminated with signal' "$work/$s.log")"$'\n'
	done
	for s in a b; do
		ev=$(field "$s" event 3) at=$(field "$s" event 2)
		[ -n "$ev" ] && [ -n "${fault_t0:-}" ] && seen+=" $s: $ev $((at - fault_t0)) ms after the fault;"
	done
	fault_t0=""
	if [ -z "$problems" ]; then
		echo "ok $n - $name"
		[ -n "$seen" ] && echo "#$seen"
		return
	fi
	nfail=$((nfail + 1))
	echo "not ok $n - $name"
	[ -n "$seen" ] && echo "#$seen"
	printf '%s' "$problems" | sed 's/^/#   /'
	for s in a b; do
		[ -f "$work/$s.log" ] && sed "s/^/#   $s| /" "$work/$s.log" | tail -n 12
	done
}

# start_peers ENV -- A_ARGS -- B_ARGS: b serves, a connects; returns once
# both are connected (pids in $pa, $pb), or fails
start_peers() {
	local env=() aargs=() bargs=()
	while [ "$1" != -- ]; do env+=("$1"); shift; done
	shift
	while [ "$1" != -- ]; do aargs+=("$1"); shift; done
	shift
	bargs=("$@")
	rm -f "$work/a.log" "$work/b.log"
	hosts_spawn b "$work/b.log" "${env[@]}" "$PEER" -n "$IA" -s -p $PORT "${bargs[@]}"
	pb=$HOSTS_PID
	for _ in $(seq 100); do
		grep -q '^listening' "$work/b.log" 2>/dev/null && break
		sleep 0.05
	done
	hosts_spawn a "$work/a.log" "${env[@]}" "$PEER" -n "$IA" -c "$HOSTS_ADDR_B" -p $PORT \
		"${aargs[@]}"
	pa=$HOSTS_PID
	for _ in $(seq 200); do
		grep -q '^ready' "$work/a.log" 2>/dev/null && grep -q '^ready' "$work/b.log" 2>/dev/null &&
			return 0
		grep -q '^end' "$work/a.log" "$work/b.log" 2>/dev/null && break
		sleep 0.05
	done
	return 1
}

# wait_pid PID SECONDS: 0 once it exited, 1 if it had to be killed
wait_pid() {
	local end=$(($(date +%s) + $2))
	while kill -0 "$1" 2>/dev/null; do
		if [ "$(date +%s)" -ge "$end" ]; then
			kill -CONT "$1" 2>/dev/null
			kill -KILL "$1" 2>/dev/null
			wait "$1" 2>/dev/null
			return 1
		fi
		sleep 0.1
	done
	wait "$1" 2>/dev/null
	return 0
}

# end_case NAME PROBLEMS: the peers stopped, the hosts healed, the case
# reported (its problems, if any, end with a newline)
end_case() {
	local p=$2
	[ -n "$p" ] && p+=$'\n'
	stop_peers
	report "$1" "$p"
}

stop_peers() {
	local pid
	for pid in ${pa:-} ${pb:-}; do
		kill -CONT "$pid" 2>/dev/null
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	hosts_heal a; hosts_heal b; hosts_link a up; hosts_link b up
	pa="" pb=""
}

field() { awk -v k="$2" '$1 == k { print $'"$3"'; exit }' "$work/$1.log" 2>/dev/null; }
last_tick() { awk '$1 == "tick" { v = $3 } END { print v + 0 }' "$work/$1.log"; }
# the receiver's verified count at the first tick at or after ms
tick_at() { awk -v t="$2" '$1 == "tick" && $2 >= t { print $3; exit }' "$work/$1.log"; }

# expect_end SIDE EVENTS FAULT_MS LO_MS HI_MS: SIDE reported one of EVENTS
# ("BROKEN|DISCONNECTED") between LO and HI ms after the fault
expect_end() {
	local s=$1 want=$2 t0=$3 lo=$4 hi=$5 ev at
	ev=$(field "$s" event 3) at=$(field "$s" event 2)
	if [ -z "$ev" ]; then
		echo "$s: no connection event"
		return
	fi
	[[ "|$want|" == *"|$ev|"* ]] || echo "$s: event $ev, expected $want"
	[ $((at - t0)) -ge "$lo" ] && [ $((at - t0)) -le "$hi" ] ||
		echo "$s: event $((at - t0)) ms after the fault, expected $lo..$hi"
}

expect_clean() {	# SIDE: every message received was whole and in order
	local bad
	bad=$(field "$1" verified 4)
	[ "${bad:-x}" = 0 ] || echo "$1: ${bad:-no} bad messages"
}

# expect_no_event SIDE [AFTER_MS]: no end, but a DISCONNECTED at or after
# AFTER_MS (the other side's own disconnect at its deadline)
expect_no_event() {
	local ev at
	ev=$(field "$1" event 3) at=$(field "$1" event 2)
	[ -z "$ev" ] && return
	[ "$ev" = DISCONNECTED ] && [ -n "${2:-}" ] && [ "$at" -ge "$2" ] && return
	echo "$1: connection ended ($ev), expected it to survive"
}

# partition NAME A_MODE B_MODE WHERE DIR: a silent network while the
# connection is up; both sides must end with BROKEN within T (+slack)
partition() {
	local name=$1 am=$2 bm=$3 host=$4 dir=$5 p="" t0
	if start_peers DAPL_OFI_PEER_TIMEOUT_MS=$T -- -m "$am" -t 30 -- -m "$bm" -t 30; then
		sleep 1
		t0=$(now_ms) fault_t0=$(now_ms)
		hosts_drop "$host" "$dir"
		wait_pid "$pa" 20 || p+="a: still running 20 s after the fault"$'\n'
		wait_pid "$pb" 20 || p+="b: still running 20 s after the fault"$'\n'
		p+=$(expect_end a BROKEN "$t0" $((T - EARLY)) $((T + SLACK)))
		p+=$(expect_end b "${6:-BROKEN}" "$t0" $((T - EARLY)) $((T + SLACK)))
		[ -n "$p" ] && p+=$'\n'
		p+=$(expect_clean b)
	else
		p="the peers did not connect"
	fi
	end_case "$name" "$p"
}

# survive NAME ENV FAULT HEAL SECONDS [A_MODE B_MODE]: a fault the
# connection must outlive: no event on either side (but b's DISCONNECTED
# once a ended at its deadline), no bad message, and, when a streams to b,
# messages arriving again after the heal
survive() {
	local name=$1 env=$2 fault=$3 heal=$4 hold=$5 am=${6:-send} bm=${7:-recv} p="" t1 before after
	if start_peers "$env" -- -m "$am" -t $((hold + 5)) -- -m "$bm" -t $((hold + 9)); then
		sleep 1
		eval "$fault"
		sleep "$hold"
		eval "$heal"
		t1=$(now_ms)
		wait_pid "$pa" $((hold + 15)) || p+="a: did not end by its deadline"$'\n'
		wait_pid "$pb" $((hold + 15)) || p+="b: did not end by its deadline"$'\n'
		p+=$(expect_no_event a)$(expect_no_event b "$(field a end 2)")
		[ -n "$p" ] && p+=$'\n'
		p+=$(expect_clean b)
		before=$(tick_at b "$t1") after=$(field b verified 2)
		[ "$am" != send ] || [ "${after:-0}" -gt "${before:-0}" ] ||
			p+=$'\n'"b: nothing arrived after the heal (${before:-?} then ${after:-?})"
	else
		p="the peers did not connect"
	fi
	end_case "$name" "$p"
}

# killed NAME A_MODE B_MODE VICTIM: the survivor ends within 2 s
killed() {
	local name=$1 am=$2 bm=$3 v=$4 s p="" t0 pid
	if start_peers DAPL_OFI_PEER_TIMEOUT_MS=$T -- -m "$am" -t 30 -- -m "$bm" -t 30; then
		sleep 1
		if [ "$v" = a ]; then pid=$pa s=b; else pid=$pb s=a; fi
		t0=$(now_ms) fault_t0=$(now_ms)
		kill -KILL "$pid"
		wait "$pid" 2>/dev/null
		if [ "$s" = a ]; then pid=$pa; else pid=$pb; fi
		wait_pid "$pid" 15 || p+="$s: still running 15 s after its peer died"$'\n'
		p+=$(expect_end "$s" "DISCONNECTED|BROKEN" "$t0" 0 2000)
		[ -n "$p" ] && p+=$'\n'
		[ "$s" = b ] && p+=$(expect_clean b)
	else
		p="the peers did not connect"
	fi
	end_case "$name" "$p"
}

# b stops reading (SIGSTOP) while a streams to it: b's kernel acknowledges,
# but its window shuts once its buffer is full, and Linux (5.11 on) ends a
# connection whose window stays shut for the whole user timeout: a sees
# BROKEN, as IB with a finite RNR retry count would.  b, continued, finds
# its connection gone.
stopped() {
	local p="" t0
	if start_peers DAPL_OFI_PEER_TIMEOUT_MS=$T -- -m send -t 30 -- -m recv -t 30; then
		sleep 1
		t0=$(now_ms) fault_t0=$(now_ms)
		kill -STOP "$pb"
		wait_pid "$pa" 20 || p+="a: still running 20 s after b stopped"$'\n'
		kill -CONT "$pb"
		wait_pid "$pb" 20 || p+="b: still running 20 s after it was continued"$'\n'
		p+=$(expect_end a BROKEN "$t0" $((T - EARLY)) $((T + SLACK + 1000)))
		p+=$(expect_end b "BROKEN|DISCONNECTED" "$t0" $((T - EARLY)) 30000)
		[ -n "$p" ] && p+=$'\n'
		p+=$(expect_clean b)
	else
		p="the peers did not connect"
	fi
	end_case "$1" "$p"
}

# connect_dropped NAME TIMEOUT_MS: a's connect to a host that drops
# everything ends at its timeout, or (0: infinite) at the peer timeout
connect_dropped() {
	local p="" t0 end=${2:-$T}
	[ "$end" = 0 ] && end=$T
	hosts_drop b in
	rm -f "$work/b.log"
	t0=$(now_ms) fault_t0=$(now_ms)
	hosts_spawn a "$work/a.log" DAPL_OFI_PEER_TIMEOUT_MS=$T "$PEER" -n "$IA" \
		-c "$HOSTS_ADDR_B" -p $PORT -T "$2" -t 20
	pa=$HOSTS_PID
	wait_pid "$pa" 15 || p+="a: still running 15 s after it connected"$'\n'
	p+=$(expect_end a TIMED_OUT "$t0" $((end - 100)) $((end + SLACK)))
	end_case "$1" "$p"
}

# connect_nolink NAME: a connect from a host whose link is down (no route
# at all) is refused at once with DAT_INVALID_ADDRESS_UNREACHABLE, not an
# internal error (under a second)
connect_nolink() {
	local p="" line
	hosts_link a down
	hosts_spawn a "$work/a.log" "$PEER" -n "$IA" -c "$HOSTS_ADDR_B" -p $PORT -T 2000 -t 10
	pa=$HOSTS_PID
	wait_pid "$pa" 10 || p+="a: still running 10 s after its connect"$'\n'
	line=$(grep -m1 '^end' "$work/a.log")
	[[ "$line" == *"error dat_ep_connect: DAT_INVALID_ADDRESS DAT_INVALID_ADDRESS_UNREACHABLE"* ]] ||
		p+="a: expected dat_ep_connect to fail with DAT_INVALID_ADDRESS_UNREACHABLE: ${line:-no end line}"$'\n'
	stop_peers
	report "$1" "$p"
}

# listener_gone NAME kill|drop|drop-infinite: b holds a's request
# unanswered, then dies or goes silent; a's connect timeout is 4 s, or
# infinite (drop-infinite: the peer timeout ends it)
listener_gone() {
	local p="" t0 tmo=4000
	[ "$2" = drop-infinite ] && tmo=0
	rm -f "$work/a.log" "$work/b.log"
	hosts_spawn b "$work/b.log" "$PEER" -n "$IA" -s -p $PORT -H -t 30
	pb=$HOSTS_PID
	for _ in $(seq 100); do grep -q '^listening' "$work/b.log" && break; sleep 0.05; done
	hosts_spawn a "$work/a.log" DAPL_OFI_PEER_TIMEOUT_MS=$T "$PEER" -n "$IA" -c "$HOSTS_ADDR_B" \
		-p $PORT -T $tmo -t 30
	pa=$HOSTS_PID
	for _ in $(seq 100); do grep -q '^held' "$work/b.log" && break; sleep 0.05; done
	grep -q '^held' "$work/b.log" || p+="b: no request arrived"$'\n'
	t0=$(now_ms) fault_t0=$(now_ms)
	if [ "$2" = kill ]; then
		kill -KILL "$pb"
		wait_pid "$pa" 10 || p+="a: still running 10 s after the listener died"$'\n'
		p+=$(expect_end a "NON_PEER_REJECTED|PEER_REJECTED|UNREACHABLE|DISCONNECTED|BROKEN" \
			"$t0" 0 2000)
	elif [ "$2" = drop ]; then
		hosts_drop b both
		wait_pid "$pa" 10 || p+="a: still running 10 s after its connect timed out"$'\n'
		p+=$(expect_end a TIMED_OUT "$t0" 0 $((4000 + SLACK)))
	else
		hosts_drop b both
		wait_pid "$pa" 10 || p+="a: still running 10 s after the listener went silent"$'\n'
		p+=$(expect_end a "TIMED_OUT|UNREACHABLE|NON_PEER_REJECTED" "$t0" $((T - EARLY)) $((T + SLACK)))
	fi
	end_case "$1" "$p"
}

# 1000 idle connections between the hosts, then a partition: every one of
# them ends, on both sides, within the timeout
thousand() {
	local p="" t0 s
	if start_peers DAPL_OFI_PEER_TIMEOUT_MS=$T -- -m idle -C 1000 -t 60 -- -m idle -C 1000 -t 60; then
		sleep 1
		t0=$(now_ms) fault_t0=$(now_ms)
		hosts_drop a both
		wait_pid "$pa" 30 || p+="a: still running 30 s after the fault"$'\n'
		wait_pid "$pb" 30 || p+="b: still running 30 s after the fault"$'\n'
		p+=$(expect_end a BROKEN "$t0" $((T - EARLY)) $((T + SLACK)))
		p+=$(expect_end b BROKEN "$t0" $((T - EARLY)) $((T + SLACK)))
		for s in a b; do
			grep -q '^ended 1000, 1000 of them BROKEN' "$work/$s.log" ||
				p+=$'\n'"$s: not all 1000 connections ended BROKEN: $(grep '^ended' "$work/$s.log")"
		done
	else
		p="the peers did not connect 1000 connections"
	fi
	end_case "$1" "$p"
}

# the stock dtest across the hosts, with LOSS % of a's packets lost
dtest_across() {
	local p="" s
	[ "$1" -gt 0 ] && hosts_drop a both "$1"
	# shellcheck disable=SC2086
	hosts_spawn b "$work/b.log" timeout 60 stdbuf -oL dtest -P "$IA" $DTEST_FLAGS -s
	pb=$HOSTS_PID
	for _ in $(seq 100); do grep -q 'waiting for client' "$work/b.log" && break; sleep 0.05; done
	# shellcheck disable=SC2086
	hosts_run a timeout 60 stdbuf -oL dtest -P "$IA" $DTEST_FLAGS -h "$HOSTS_ADDR_B" \
		>"$work/a.log" 2>&1
	wait_pid "$pb" 30 || p+="b: dtest server still running 30 s after the client"$'\n'
	for s in a b; do
		{ grep -q 'DAPL Test Complete\. PASSED' "$work/$s.log" &&
			! grep -q FAILED "$work/$s.log"; } || p+="$s: dtest did not pass"$'\n'
	done
	stop_peers
	report "dtest across the hosts, $1 % of a's packets lost: PASSED on both" "$p"
}

# the stock dapltest across the hosts: a validated transaction mix (sends
# both ways, RDMA read and write, 4 segments), with LOSS % of a's packets
# lost; its server stops on -T Q
dapltest_across() {
	local p="" s
	[ "$1" -gt 0 ] && hosts_drop a both "$1"
	hosts_spawn b "$work/b.log" timeout 90 dapltest -T S -D "$IA"
	pb=$HOSTS_PID
	sleep 1
	hosts_run a timeout 60 dapltest -T T -s "$HOSTS_ADDR_B" -D "$IA" -i 100 -V \
		client SR 1024 4 server SR 1024 4 client RR 8192 2 server RW 2048 4 >"$work/a.log" 2>&1
	hosts_run a timeout 20 dapltest -T Q -s "$HOSTS_ADDR_B" -D "$IA" >>"$work/a.log" 2>&1
	wait_pid "$pb" 30 || p+="b: the dapltest server did not stop on -T Q"$'\n'
	grep -q 'Total WQE' "$work/a.log" || p+="a: no 'Total WQE' statistics"$'\n'
	for s in a b; do
		grep -v '^dapl-ofi\[' "$work/$s.log" | grep -qiE 'error|fail|mismatch' &&
			p+="$s: $(grep -v '^dapl-ofi\[' "$work/$s.log" | grep -m1 -iE 'error|fail|mismatch')"$'\n'
	done
	stop_peers
	report "dapltest -T T -V across the hosts, $1 % of a's packets lost: validated" "$p"
}

cases=${*:-partition-streaming partition-idle partition-a-out partition-a-in \
flap loss-3 loss-20 kill-sender kill-receiver kill-idle stop-idle stop-streaming connect-dropped connect-nolink \
listener-killed listener-partitioned listener-partitioned-inf thousand dtest dapltest}
for c in $cases; do
	case $c in
	partition-streaming)
		partition "$c: both ways, a streaming to b: both BROKEN after ${T} ms" send recv a both ;;
	partition-idle)
		partition "$c: both ways, an idle connection: both BROKEN after ${T} ms" idle idle a both ;;
	partition-a-out)
		partition "$c: a's packets lost, a streaming: both BROKEN after ${T} ms" send recv a out ;;
	partition-a-in)
		partition "$c: a's incoming lost, a streaming: both end after ${T} ms" send recv a in \
			"BROKEN|DISCONNECTED" ;;
	flap)
		survive "$c: a's link down for 1 s (timeout ${T} ms): the connection lives" \
			DAPL_OFI_PEER_TIMEOUT_MS=$T "hosts_link a down" "hosts_link a up" 1 ;;
	loss-3)
		survive "$c: 3 % of packets lost both ways for 4 s: nothing breaks, nothing lost" \
			DAPL_OFI_LOG_LEVEL=error "hosts_drop a both 3" "hosts_heal a" 4 ;;
	loss-20)
		survive "$c: 20 % of a's packets lost for 4 s: nothing breaks, nothing lost" \
			DAPL_OFI_LOG_LEVEL=error "hosts_drop a out 20" "hosts_heal a" 4 ;;
	kill-sender)
		killed "$c: a SIGKILLed while streaming: b ends within 2 s" send recv a ;;
	kill-receiver)
		killed "$c: b SIGKILLed while receiving: a ends within 2 s" send recv b ;;
	kill-idle)
		killed "$c: b SIGKILLed, the connection idle: a ends within 2 s" idle idle b ;;
	stop-idle)
		# an IB HCA acknowledges for a stopped process, and so does its
		# kernel here: an idle connection outlives the timeout
		survive "$c: b SIGSTOPped for $((T / 1000 + 2)) s (timeout ${T} ms), then SIGCONT, the connection idle: it lives" \
			DAPL_OFI_PEER_TIMEOUT_MS=$T 'kill -STOP $pb' 'kill -CONT $pb' $((T / 1000 + 2)) idle idle ;;
	stop-streaming)
		stopped "$c: b SIGSTOPped while a streams to it: a BROKEN ${T} ms after b's window shut" ;;
	connect-dropped)
		connect_dropped "$c: a connect (timeout 2 s) to a host that drops everything: TIMED_OUT" 2000 ;;
	connect-nolink)
		connect_nolink "$c: a connect from a host whose link is down: DAT_INVALID_ADDRESS_UNREACHABLE at once" ;;
	connect-dropped-inf)
		connect_dropped "$c: the same, the connect timeout infinite: TIMED_OUT after ${T} ms" 0 ;;
	listener-killed)
		listener_gone "$c: the listener SIGKILLed before it accepts: a's connect ends within 2 s" kill ;;
	listener-partitioned)
		listener_gone "$c: the listener's host silent before it accepts: a's connect (timeout 4 s) TIMED_OUT" drop ;;
	listener-partitioned-inf)
		listener_gone "$c: the same, a's connect timeout infinite: it ends ${T} ms after the silence" drop-infinite ;;
	thousand)
		thousand "$c: 1000 idle connections, then a partition: all BROKEN on both sides after ${T} ms" ;;
	dtest)
		dtest_across 0; dtest_across 3 ;;
	dapltest)
		dapltest_across 0; dapltest_across 3 ;;
	dtest-noloss)
		dtest_across 0 ;;
	dapltest-noloss)
		dapltest_across 0 ;;
	*) echo "faults.sh: no case '$c'" >&2; exit 2 ;;
	esac
done
echo "1..$n"
[ "$nfail" -eq 0 ]
