#!/bin/sh
# fabsim rule tests, for every profile: the whole program must pass with
# every rule on; then each rule's own test must FAIL with that rule switched
# off (FABSIM_OFF), or the test does not detect what it claims to.  A rule
# a profile does not have (not even with FABSIM_ON) is not in its list: its
# test skips.  TAP output.
#   B=build tests/fabsim/run.sh
B=${B:-build}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROG=$ROOT/$B/tests/fabsim_rules
export FI_PROVIDER_PATH=$ROOT/$B/fabsim
TMO=${FABSIM_TEST_TIMEOUT:-120}
PROFILES="efa psm3 opx cxi"
# the rules each profile's tests can prove (fabsim/README.md, rules table)
rules_efa="wait mr_local inject msg_size cq_data comp_order saw eagain manual ctx"
rules_psm3="inject msg_size cq_data comp_order saw eagain manual ctx offset"
rules_opx="wait inject msg_size cq_data comp_order saw eagain manual ctx offset"
rules_cxi="inject msg_size cq_data comp_order saw eagain manual ctx mr_endpoint offset"

plan=0
for p in $PROFILES; do
	if [ ! -f "$FI_PROVIDER_PATH/libsim_$p-fi.so" ]; then
		echo "Bail out! build first: make -f fabsim/fabsim.mk B=$B fabsim-tests"
		exit 1
	fi
	eval "rules=\$rules_$p"
	set -- $rules
	plan=$((plan + 1 + $#))
done
if [ ! -x "$PROG" ]; then
	echo "Bail out! build first: make -f fabsim/fabsim.mk B=$B fabsim-tests"
	exit 1
fi
# (cmocka's own output, which the checks below read: tests/run.sh asks
# for TAP)
unset FABSIM_OFF FABSIM_ON FABSIM_CQ_DATA_SIZE FABSIM_MAX_MSG_SIZE CMOCKA_MESSAGE_OUTPUT
n=0; fail=0
echo "1..$plan"

for p in $PROFILES; do
	export FABSIM_TEST_PROFILE=$p
	eval "rules=\$rules_$p"
	n=$((n + 1))
	if timeout "$TMO" "$PROG" >"$ROOT/$B/tests/fabsim_rules_$p.log" 2>&1; then
		echo "ok $n - $p: all rule tests pass with every rule on"
	else
		echo "not ok $n - $p: rule tests with every rule on (see $B/tests/fabsim_rules_$p.log)"
		fail=$((fail + 1))
	fi

	for r in $rules; do
		n=$((n + 1))
		log=$ROOT/$B/tests/fabsim_off_${p}_$r.log
		if ! timeout "$TMO" "$PROG" "test_$r" >"$log.on" 2>&1; then
			echo "not ok $n - $p rule $r: its test fails with the rule on"
			fail=$((fail + 1))
			continue
		fi
		FABSIM_OFF=$r timeout "$TMO" "$PROG" "test_$r" >"$log" 2>&1
		rc=$?
		if [ $rc -eq 1 ] && grep -q "FAILED  ] test_$r" "$log"; then
			echo "ok $n - $p rule $r: caught with the rule on, missed with it off"
		elif [ $rc -eq 0 ]; then
			echo "not ok $n - $p rule $r: its test passes with the rule off"
			fail=$((fail + 1))
		else
			echo "not ok $n - $p rule $r: with the rule off its test ended with status $rc," \
			     "not its own failure (see $log)"
			fail=$((fail + 1))
		fi
	done
done
[ $fail -eq 0 ]
