# bench/lib.sh: the server start-up shared by bench/compare, bench/pairs,
# bench/calls and bench/instr (sourced; needs ss, from iproute2).

# bench_port_free PORT: 0 once nothing listens on PORT (checked every
# 50 ms, at most 100 times), 1 if something still does: a listener left by
# someone else would take our client.
bench_port_free() {
	local i
	for ((i = 0; i < 100; i++)); do
		ss -Hltn "sport = :$1" 2>/dev/null | grep -q . || return 0
		sleep 0.05
	done
	return 1
}

# bench_await_listen PORT PID: 0 once PORT listens (checked every 20 ms, at
# most 750 times: 15 s), 1 if process PID exited first, 2 if time ran out.
bench_await_listen() {
	local i
	for ((i = 0; i < 750; i++)); do
		ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.02
	done
	return 2
}

# bench_serve NAME PORT OUT ERR CMD...: start the server command CMD in
# the background once nothing listens on PORT (stdout to OUT, stderr to ERR,
# or to OUT too if ERR is empty), its pid in SRV, and wait until it listens.
# 0 then; 1 with the reason in BENCH_WHY (NAME names the server in it; SRV
# is left set, for the caller's clean-up to kill).
bench_serve() {
	local name=$1 port=$2 out=$3 err=$4
	shift 4
	SRV=
	BENCH_WHY=
	if ! bench_port_free "$port"; then
		BENCH_WHY="TCP port $port is taken by another program (choose others with -n)"
		return 1
	fi
	if [ -n "$err" ]; then
		"$@" > "$out" 2> "$err" &
	else
		"$@" > "$out" 2>&1 &
	fi
	SRV=$!
	bench_await_listen "$port" "$SRV"
	case $? in
	0) return 0 ;;
	1) BENCH_WHY="$name server exited: $(tail -n 3 "${err:-$out}" | tr '\n' ' ')" ;;
	*) BENCH_WHY="$name server did not listen on port $port" ;;
	esac
	return 1
}

# bench_place_cpus: the first two CPUs this process may run on ("a b"), or
# nothing (status 1) with fewer than two or without taskset (util-linux).
# Streams run placed (bench_place): on the 2-vCPU VMs these figures are
# taken on, a loopback stream whose sender runs on one vCPU is about 15 %
# slower than with the sender on the other, whichever program it is, and
# the scheduler puts two programs' processes on different vCPUs by
# heuristics of their wake-ups: left to it, a pair compares placements,
# not programs (bench/RESULTS.md, "streams measured placed").
bench_place_cpus() {
	local cpus
	command -v taskset >/dev/null || return 1
	cpus=$(awk '/^Cpus_allowed_list:/ {
		n = split($2, r, ",")
		for (i = 1; i <= n && k < 2; i++) {
			m = split(r[i], e, "-"); hi = m > 1 ? e[2] : e[1]
			for (c = e[1]; c <= hi && k < 2; c++) out[++k] = c
		}
		if (k == 2) print out[1], out[2]
	}' /proc/self/status)
	[ -n "$cpus" ] || return 1
	echo "$cpus"
}

# bench_place CPUS K: sets PLACE_S and PLACE_C, the command prefixes that
# put the server and the client of a run on a CPU each (taskset -c; the
# process's threads go with it): with K even the client gets the first CPU
# of CPUS ("a b") and the server the second, with K odd the other way
# round, so that alternating K gives both placements equal weight.  Both
# programs of a pair must be run with the same K.  Empty CPUS: no placing.
bench_place() {
	local a b
	PLACE_S=() PLACE_C=()
	[ -n "$1" ] || return 0
	read -r a b <<< "$1"
	if (($2 % 2)); then
		PLACE_S=(taskset -c "$a") PLACE_C=(taskset -c "$b")
	else
		PLACE_S=(taskset -c "$b") PLACE_C=(taskset -c "$a")
	fi
}
