#!/bin/bash
# A bounded soak across the two test hosts (tests/hosts/lib.sh): tests/hosts/soak
# keeps SOAK_CONNS connections (256) between host a (client) and host b
# (server) moving verified sends, RDMA writes and RDMA reads while this
# script breaks the network under them at random: 3 % loss for a few
# seconds, a link flap shorter than the peer timeout, a partition longer
# than it (every connection breaks and the client connects them all
# again); the client also disconnects a random few of its own every few
# seconds.  Both sides check that nothing received is duplicated or
# corrupted, and that after the soak their open files, RSS, LMRs and RMRs
# are back to what they were after a warm-up, and that the IA closes.
#
#   tests/hosts/soak.sh        (from the repo root, after make all tests; root)
#   SOAK_SECONDS=300 (the soak's length; a warm-up and the teardown add
#   about 10 s), SOAK_SEED (the faults and the client's disconnects; printed,
#   random by default), SOAK_CONNS=256, SOAK_ARGS (more options for both
#   programs, see tests/hosts/soak.c), SOAK_RSS_KB (how much RSS may grow,
#   8192 KiB, see soak.c; a build with ASan gets 512 MiB: its allocator
#   holds 256 MiB of freed memory in quarantine, and LeakSanitizer checks
#   for leaks at exit instead), SOAK_KEEP=1 keeps the logs, SOAK_IA the
#   fabric (an entry of lib.sh's dat.conf: ofi-host, tcp's connected
#   endpoints, by default; ofi-host-net, ofi-host-rxm, ofi-host-rdm),
#   SOAK_LEDGER=FILE appends one line for the run to FILE (when, commit,
#   fabric, seconds, seed, faults, result: ok, violation, resources or
#   failed; tests/hosts/soak-hours sums it).
# The test hosts load the library of $B (B=build/asan: the ASan one).
# Prints TAP; "1..0 # SKIP" where the hosts cannot be made (not root, no nft).
set -u
B=${B:-build}
SECS=${SOAK_SECONDS:-300}
SEED=${SOAK_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
CONNS=${SOAK_CONNS:-256}
IA=${SOAK_IA:-ofi-host}
T=3000			# the peer timeout (ms), as in faults.sh
# soak.c's violations that are about resources back at their start, not
# about completions (the last test below, and the ledger's "resources")
RESOURCE_RE='^violation [0-9]+ (open files|RSS|[0-9]+ LMRs|dat_ia_close|teardown)'
PORT=18800
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
PROG=$PWD/$B/tests/soak
# the ledger's path from here: the hosts move the shell elsewhere
case ${SOAK_LEDGER:-} in ''|/*) ;; *) SOAK_LEDGER=$PWD/$SOAK_LEDGER ;; esac
[ -x "$PROG" ] || { echo "soak.sh: $PROG missing: run make tests" >&2; exit 2; }
RSS_KB=${SOAK_RSS_KB:-8192}
ldd "$PROG" | grep -q libasan && RSS_KB=${SOAK_RSS_KB:-524288}
work=$(mktemp -d)
commit=$(git describe --always --dirty 2>/dev/null || echo -)	# (hosts_up leaves the tree)
pa="" pb=""
cleanup() {
	local pid
	for pid in $pa $pb; do kill -KILL "$pid" 2>/dev/null; done
	hosts_down
	if [ -n "${SOAK_KEEP:-}" ]; then echo "# logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
HOSTS_DIR=$work
hosts_up_tap "$PWD/$B/libdaplofi.so.2"

now_ms() { date +%s%3N; }
echo "# seed $SEED (SOAK_SEED=$SEED repeats these faults and the client's own disconnects)"
echo "# $IA: $CONNS connections, $SECS s, peer timeout $T ms, RSS may grow by $RSS_KB KiB"
RANDOM=$SEED
args=(-n "$IA" -p $PORT -C "$CONNS" -t "$SECS" -S "$SEED" -R "$RSS_KB" ${SOAK_ARGS:-})
hosts_spawn b "$work/b.log" env DAPL_OFI_PEER_TIMEOUT_MS=$T "$PROG" -s "${args[@]}"
pb=$HOSTS_PID
for _ in $(seq 200); do grep -q '^phase 0' "$work/b.log" 2>/dev/null && break; sleep 0.05; done
hosts_spawn a "$work/a.log" env DAPL_OFI_PEER_TIMEOUT_MS=$T "$PROG" -c "$HOSTS_ADDR_B" "${args[@]}"
pa=$HOSTS_PID
for _ in $(seq 600); do
	grep -q '^phase 1' "$work/a.log" 2>/dev/null && break
	kill -0 "$pa" 2>/dev/null || break
	sleep 0.1
done

# The faults, from the seed: none in the last T + 5 s, so that the soak
# ends on a quiet network; at least one partition.
t0=$(now_ms)
stop=$((t0 + SECS * 1000 - T - 5000))
: > "$work/faults"
nparts=0 nfaults=0
# RANDOM only in this shell: bash reseeds it in every subshell, so a
# draw inside $(...) would not come from the seed
rand_s() { R=$(( $1 + RANDOM % ($2 - $1 + 1) )); }	# R: LO..HI tenths
tenths() { printf '%d.%d' $(($1 / 10)) $(($1 % 10)); }
while kill -0 "$pa" 2>/dev/null; do
	rand_s 20 60
	sleep "$(tenths $R)"
	left=$((stop - $(now_ms)))
	[ "$left" -lt 1000 ] && break
	if [ $((RANDOM % 2)) = 0 ]; then h=a; else h=b; fi
	f=$((RANDOM % 3))
	[ "$nparts" = 0 ] && [ "$left" -lt $((T + 15000)) ] && f=2
	case $f in
	0) rand_s 20 50; kind="loss 3 % both ways on $h" ;;
	1) rand_s 5 $((T / 100 - 10)); kind="link of $h down" ;;
	2) rand_s $((T / 100 + 15)) $((T / 100 + 30)); kind="partition of $h" ;;
	esac
	d=$R
	# a partition must fit before the stop, with time to connect again
	[ "$f" = 2 ] && [ "$left" -lt $((d * 100 + 2000)) ] && break
	s=$(now_ms)
	case $f in
	0) hosts_drop "$h" both 3 ;;
	1) hosts_link "$h" down ;;
	2) hosts_drop "$h" both ;;
	esac
	sleep "$(tenths "$d")"
	case $f in
	0|2) hosts_heal "$h" ;;
	1) hosts_link "$h" up ;;
	esac
	e=$(now_ms)
	echo "# +$(( (s - t0) / 1000 )) s: $kind for $((e - s)) ms"
	echo "$f $s $e" >> "$work/faults"
	nfaults=$((nfaults + 1))
	[ "$f" = 2 ] && nparts=$((nparts + 1))
done

# wait_pid PID SECONDS: 0 once it exited (its status in $rc), 1 if killed
wait_pid() {
	local end=$(($(date +%s) + $2))
	while kill -0 "$1" 2>/dev/null; do
		if [ "$(date +%s)" -ge "$end" ]; then
			kill -KILL "$1" 2>/dev/null
			wait "$1" 2>/dev/null
			rc=killed
			return 1
		fi
		sleep 0.2
	done
	wait "$1"
	rc=$?
	return 0
}
wait_pid "$pa" $((SECS + 120)); rca=$rc
wait_pid "$pb" 60; rcb=$rc
pa="" pb=""

n=0 nfail=0
ok() {	# NAME PROBLEMS
	n=$((n + 1))
	if [ -z "$2" ]; then
		echo "ok $n - $1"
	else
		nfail=$((nfail + 1))
		echo "not ok $n - $1"
		printf '%s' "$2" | sed 's/^/#   /'
	fi
}
field() { awk -v k="$2" -v k2="${3:-}" '$1 == k && (k2 == "" || $2 == k2)' "$work/$1.log"; }

for s in a b; do
	sed -n '/^made/,$p' "$work/$s.log" | sed "s/^/# $s: /"
done
p=""
for s in a b; do
	r=$rca; [ "$s" = b ] && r=$rcb
	[ "$r" = 0 ] || p+="$s: exit status $r"$'\n'
	grep -q '^violations 0$' "$work/$s.log" || p+="$s: $(grep '^violations' "$work/$s.log" || echo 'no summary')"$'\n'
	# (and a completion dapl-ofi dropped as a provider's second one:
	# the soak never sees it, but it would have been a duplicate)
	p+=$(grep -m 10 -E '^violation |^end [0-9]+ error|Sanitizer|runtime error:|completed it twice' \
		"$work/$s.log" | sed "s/^/$s: /")
	[ -n "$p" ] && p+=$'\n'
done
[ -n "$p" ] && for s in a b; do p+=$(tail -n 15 "$work/$s.log" | sed "s/^/$s| /")$'\n'; done
ok "soak on $IA: $CONNS connections, $SECS s, $nfaults faults (seed $SEED): no violation on either side" "$p"
soak_ok=$([ -z "$p" ] && echo ok || echo FAIL)

p=""
for w in "a send" "a read" "b send" "b write"; do
	set -- $w
	v=$(field "$1" verified "$2" | awk '{ print $3 }')
	[ "${v:-0}" -gt 0 ] || p+="$1: no $2 verified"$'\n'
done
ok "traffic verified in every DTO kind (send/recv both ways, RDMA write at b, RDMA read at a)" "$p"

# After each partition: every connection up again, and at least half of
# them ended BROKEN in between (the others were connecting).
p=""
while read -r f s e; do
	[ "$f" = 2 ] || continue
	before=$(awk -v t="$s" '$1 == "allup" && $2 < t { v = $3 } END { print v + 0 }' "$work/a.log")
	after=$(awk -v t="$e" '$1 == "allup" && $2 > t { print $2, $3; exit }' "$work/a.log")
	if [ -z "$after" ]; then
		p+="the partition at $s: the connections did not all come back"$'\n'
	elif [ $(( ${after#* } - before )) -lt $((CONNS / 2)) ]; then
		p+="the partition at $s: only $(( ${after#* } - before )) connections BROKEN"$'\n'
	else
		echo "# partition at +$(( (s - t0) / 1000 )) s: $(( ${after#* } - before )) BROKEN, all up again $(( ${after% *} - e )) ms after the heal"
	fi
done < "$work/faults"
[ "$nparts" -gt 0 ] || p+="no partition was injected"$'\n'
ok "after each of $nparts partitions the client connected every connection again" "$p"

p=""
for s in a b; do
	base=$(field "$s" baseline) fin=$(field "$s" final)
	[ -n "$base" ] && [ -n "$fin" ] || { p+="$s: no measurements"$'\n'; continue; }
	echo "# $s: after the warm-up: $base; after the soak: $fin"
	p+=$(grep -E "$RESOURCE_RE" "$work/$s.log" |
		sed "s/^/$s: /")
	[ -n "$p" ] && p+=$'\n'
done
ok "open files, RSS, LMRs and RMRs back to the warm-up's on both sides, the IA closes" "$p"
echo "1..$n"
if [ -n "${SOAK_LEDGER:-}" ]; then
	# "violation": a wrong, duplicate or lost-for-good completion, a
	# crash, an exit that is not 0; "resources": only what came back to
	# the warm-up's (open files, RSS, LMRs, RMRs, the IA's close);
	# "failed": only the harness's other checks (reconnection, traffic)
	r=ok
	[ "$nfail" -eq 0 ] || r=failed
	if [ "$soak_ok" != ok ]; then
		r=violation
		case $rca$rcb in
		00|01|10|11)
			grep -hE '^violation [0-9]+ ' "$work/a.log" "$work/b.log" |
				grep -qvE "$RESOURCE_RE" ||
				grep -qE 'Sanitizer|runtime error:|completed it twice' "$work/a.log" \
					"$work/b.log" || r=resources ;;
		esac
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" \
		"$commit" "$IA" "$SECS" "$SEED" "$nfaults" "$r" >> "$SOAK_LEDGER"
fi
[ "$nfail" -eq 0 ]
