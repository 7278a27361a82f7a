# Two test hosts for the tests that cross a network (source this file).
#
# hosts_up makes two network namespaces, "a" and "b", joined by a veth
# pair: a's veth0 is 198.18.0.1/24, b's is 198.18.0.2/24 (198.18.0.0/15 is
# set aside for network tests, RFC 2544), each with its own loopback.  Both
# read the same dat.conf ($HOSTS_DATCONF), whose entry "ofi-host" is the
# library under test over "tcp veth0": the same name on each host, its own
# interface.  Nothing outside the two namespaces is touched, and
# hosts_down (an EXIT trap) removes them and every process in them, even
# when a test fails.  Root only: hosts_up fails (status 77) otherwise.
#
#   hosts_up_tap LIBRARY          hosts_up, or the TAP plan that says why not
#   hosts_run a|b CMD...          run CMD on a host
#   hosts_spawn a|b LOG CMD...    start CMD on a host in the background,
#                                 its output to LOG; HOSTS_PID is CMD's own
#                                 pid (to signal it: no shell in between)
#   hosts_drop a|b in|out|both [PCT]
#                                 drop PCT % (default all) of the host's
#                                 packets in that direction (nftables)
#   hosts_heal a|b                drop nothing again
#   hosts_link a|b up|down        the host's veth0
#
# HOSTS_ID names this run's namespaces (dfi-<id>-a, dfi-<id>-b): several
# runs can have hosts at once.

HOSTS_ID=${HOSTS_ID:-$$}
HOSTS_A=dfi-$HOSTS_ID-a HOSTS_B=dfi-$HOSTS_ID-b
HOSTS_ADDR_A=198.18.0.1 HOSTS_ADDR_B=198.18.0.2

hosts_ns() {
	case $1 in
	a) echo "$HOSTS_A" ;;
	b) echo "$HOSTS_B" ;;
	*) echo "hosts: no host '$1' (a or b)" >&2; return 1 ;;
	esac
}

hosts_down() {
	local ns pid
	for ns in "$HOSTS_A" "$HOSTS_B"; do
		ip netns list 2>/dev/null | grep -qw "^$ns" || continue
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -CONT "$pid" 2>/dev/null
			kill -KILL "$pid" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
	return 0
}

# hosts_up LIBRARY: the hosts, and a dat.conf for them in $HOSTS_DIR
hosts_up() {
	local lib=$1 ns
	[ "$(id -u)" = 0 ] || { echo "hosts: network namespaces need root" >&2; return 77; }
	command -v nft >/dev/null || { echo "hosts: nft (Debian nftables) is missing" >&2; return 77; }
	HOSTS_DIR=${HOSTS_DIR:-$(mktemp -d)}
	HOSTS_DATCONF=$HOSTS_DIR/dat.conf
	# ofi-host-net: net's connected endpoints; ofi-host-rdm: the RDM
	# backend on net's reliable-datagram endpoints; ofi-host-rxm: on
	# tcp;ofi_rxm's; ofi-host-rxd: on udp;ofi_rxd's, which retransmit
	# over UDP themselves
	{ echo "ofi-host u2.0 nonthreadsafe default $lib dapl.2.0 \"tcp veth0\" \"\""
	  echo "ofi-host-net u2.0 nonthreadsafe default $lib dapl.2.0 \"net veth0\" \"\""
	  echo "ofi-host-rdm u2.0 nonthreadsafe default $lib dapl.2.0 \"net veth0 ep=rdm\" \"\""
	  echo "ofi-host-rxm u2.0 nonthreadsafe default $lib dapl.2.0 \"tcp;ofi_rxm veth0\" \"\""
	  echo "ofi-host-rxd u2.0 nonthreadsafe default $lib dapl.2.0 \"udp;ofi_rxd veth0\" \"\""
	} > "$HOSTS_DATCONF"
	hosts_down
	ip netns add "$HOSTS_A" && ip netns add "$HOSTS_B" &&
	ip link add veth0 netns "$HOSTS_A" type veth peer name veth0 netns "$HOSTS_B" &&
	ip -n "$HOSTS_A" addr add "$HOSTS_ADDR_A/24" dev veth0 &&
	ip -n "$HOSTS_B" addr add "$HOSTS_ADDR_B/24" dev veth0 || { hosts_down; return 1; }
	for ns in "$HOSTS_A" "$HOSTS_B"; do
		ip -n "$ns" link set lo up && ip -n "$ns" link set veth0 up &&
		ip netns exec "$ns" nft -f - <<-EOF || { hosts_down; return 1; }
		table inet faults {
			chain in { type filter hook input priority 0; }
			chain out { type filter hook output priority 0; }
		}
		EOF
	done
	# the link is up once a packet crosses it (a veth is, within ms)
	for _ in $(seq 50); do
		ip netns exec "$HOSTS_A" bash -c "exec 3<>/dev/tcp/$HOSTS_ADDR_B/9" 2>&1 |
			grep -q refused && return 0
		sleep 0.1
	done
	echo "hosts: $HOSTS_ADDR_A cannot reach $HOSTS_ADDR_B" >&2
	hosts_down
	return 1
}

# hosts_up_tap LIBRARY: hosts_up for a TAP script.  Where the hosts cannot
# be made it prints the plan (a skip when not root or without nft, else a
# failure) and exits; then it works in $HOSTS_DIR, where the programs leave
# what they leave (libinfinipath's *.btr on a crash).
hosts_up_tap() {
	hosts_up "$1"
	case $? in
	0) ;;
	77) echo "1..0 # SKIP test hosts need root and nft"; exit 0 ;;
	*) echo "not ok 1 - test hosts could not be made"; exit 1 ;;
	esac
	cd "$HOSTS_DIR" || exit 1
}

hosts_run() {
	local ns
	ns=$(hosts_ns "$1") || return 1
	shift
	ip netns exec "$ns" env DAT_OVERRIDE="$HOSTS_DATCONF" "$@"
}

hosts_spawn() {
	local ns log=$2
	ns=$(hosts_ns "$1") || return 1
	shift 2
	ip netns exec "$ns" env DAT_OVERRIDE="$HOSTS_DATCONF" "$@" >"$log" 2>&1 &
	HOSTS_PID=$!
}

hosts_drop() {
	local ns dirs pct=${3:-100} d rule
	ns=$(hosts_ns "$1") || return 1
	case $2 in
	in) dirs=in ;; out) dirs=out ;; both) dirs="in out" ;;
	*) echo "hosts_drop: direction in, out or both" >&2; return 1 ;;
	esac
	rule=drop
	[ "$pct" -lt 100 ] && rule="numgen random mod 100 < $pct drop"
	for d in $dirs; do
		if [ "$d" = in ]; then
			ip netns exec "$ns" nft add rule inet faults in iifname veth0 $rule || return 1
		else
			ip netns exec "$ns" nft add rule inet faults out oifname veth0 $rule || return 1
		fi
	done
}

hosts_heal() {
	local ns d
	ns=$(hosts_ns "$1") || return 1
	for d in in out; do
		ip netns exec "$ns" nft flush chain inet faults "$d" || return 1
	done
}

hosts_link() {
	local ns
	ns=$(hosts_ns "$1") || return 1
	ip -n "$ns" link set veth0 "$2"
}
