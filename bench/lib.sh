# bench/lib.sh: the server start-up checks shared by bench/compare,
# bench/pairs and bench/calls (sourced; needs ss, from iproute2).

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
