#!/bin/bash
# clients.sh never runs dtestcm with a -b that does not divide -c (the stock
# program then overruns its h_ep[] array: README.md): a case defined that way
# makes the whole script refuse to run, with the reason, before any program
# starts; a sound one is listed.  Runs nothing but clients.sh's list mode
# (well under a second).  TAP.
set -u
here=$(dirname "$0")
n=0 bad=0
check() {	# WANT(refused|listed) CLIENTS_EXTRA
	local want=$1 extra=$2 out rc
	n=$((n + 1))
	out=$(CLIENTS_EXTRA="$extra" CLIENTS_CASES=list "$here/clients.sh" 2>&1)
	rc=$?
	if [ "$want" = refused ] && [ "$rc" -eq 2 ] &&
	   grep -q "^Bail out! .*does not divide -c.*h_ep" <<<"$out"; then
		echo "ok $n - refused: $extra"
	elif [ "$want" = listed ] && [ "$rc" -eq 0 ] && grep -q "^${extra%% *} " <<<"$out"; then
		echo "ok $n - listed: $extra"
	else
		echo "not ok $n - $want: $extra (exit $rc)"
		sed 's/^/#   | /' <<<"$out" | tail -5
		bad=1
	fi
}
echo "1..6"
check refused "x dtestcm -c 10 -b 3"
check refused "x dtestcm -c 7"			# -b defaults to 100
check refused "x dtestcm -c 1000 -b 0"
check refused "x dtestcm -c10 -b4 -w"
check listed "x dtestcm -c 10 -b 5 -w"
check listed "x dtestcm -b 10"			# -c defaults to 1000
exit $bad
