#!/bin/bash
# model/check.sh: check the Promela model of the kDAT upcall protocol
# (model/upcall.pml) with spin, exhaustively, in every configuration below.
#
# A "pass" configuration is the protocol as it must be (src/event/evd_core.c
# and src/event/upcall.c): pan must search the whole state space and find no
# error.  A "fail" configuration injects one defect: pan must find an error,
# and the expected one (the pattern: which assertion, an invalid end state, a
# non-progress cycle) - so CI proves both that the protocol holds and that the
# model can see it break.
#
# Prints "ok - <config>" or "not ok - <config>" per configuration, then one
# summary line "RESULT <as expected> <not> 0 - ..." (the format of
# tests/run.sh, so scripts/check.sh can tally it); exits non-zero on any
# unexpected result.
#
# Usage: model/check.sh [-j N] [-k] [config-name-substring ...]
#   -j N  parallel jobs (default: the number of CPUs, at least 2)
#   -k    keep the work directory (pan output, trails) and print its path
# Needs: spin (Debian package spin), gcc.
set -u

here=$(cd "$(dirname "$0")" && pwd)
model="$here/upcall.pml"
jobs=$(nproc 2>/dev/null || echo 2)
[ "$jobs" -gt 2 ] || jobs=2
keep=0
while getopts "j:k" o; do
	case $o in
	j) jobs=$OPTARG ;;
	k) keep=1 ;;
	*) echo "usage: $0 [-j N] [-k] [filter ...]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))

for tool in spin gcc; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "not ok - $tool not installed (apt-get install spin gcc)"
		echo "RESULT 0 1 0 - model: $tool missing"
		exit 1
	}
done

# name | expect (pass / fail:<pattern in pan's "pan:1:" line>) | mode (safety / np) | -D flags
# bug-*: a defect injected on purpose; src-*: the protocol as src/event/evd_core.c
# had it when the model was written (two lost wake-ups, see model/README.md):
# they stay as regression configurations once the C code is fixed.
configs=$(cat <<'EOF'
single-newpoll          |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_NEW_POLL
single-newpoll-qlen1    |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_NEW_POLL -DNPOST=0 -DNCQ=3 -DQLEN=1
single-newpoll-spurious |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_NEW_POLL -DSPURIOUS=1 -DNPOST=0
single-npending         |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_NPENDING
single-npending-qlen1   |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_NPENDING -DNPOST=0 -DNCQ=3 -DQLEN=1
single-any-budget2      |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_ANY -DBUDGET=2
notify-newpoll          |pass|safety|-DPOLICY=P_NOTIFY -DCONSUMER=C_NEW_POLL
notify-any              |pass|safety|-DPOLICY=P_NOTIFY -DCONSUMER=C_ANY
many-newpoll            |pass|safety|-DPOLICY=P_MANY -DCONSUMER=C_NEW_POLL
many-any-budget2        |pass|safety|-DPOLICY=P_MANY -DCONSUMER=C_ANY -DBUDGET=2
many-npending           |pass|safety|-DPOLICY=P_MANY -DCONSUMER=C_NPENDING
single-disable          |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_DISABLE
many-disable            |pass|safety|-DPOLICY=P_MANY -DCONSUMER=C_DISABLE
single-rearm            |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_REARM -DNPOST=1 -DNCQ=1
many-rearm              |pass|safety|-DPOLICY=P_MANY -DCONSUMER=C_REARM -DNPOST=1 -DNCQ=1
single-teardown-self    |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_TEARDOWN -DUPCALL_SELF_TEARDOWN
many-teardown           |pass|safety|-DPOLICY=P_MANY -DCONSUMER=C_TEARDOWN
single-free             |pass|safety|-DPOLICY=P_SINGLE -DCONSUMER=C_FREE
many-free               |pass|safety|-DPOLICY=P_MANY -DCONSUMER=C_FREE
np-single-newpoll       |pass|np    |-DPOLICY=P_SINGLE -DCONSUMER=C_NEW_POLL
np-many-any             |pass|np    |-DPOLICY=P_MANY -DCONSUMER=C_ANY -DBUDGET=2
np-notify-newpoll       |pass|np    |-DPOLICY=P_NOTIFY -DCONSUMER=C_NEW_POLL -DNPOST=0
bug-count-then-arm      |fail:assertion violated ((produced[e]==1)&&(delivered[e]==1))|safety|-DCONSUMER=C_NEW_POLL -DBUG_COUNT_THEN_ARM
bug-check-unlocked      |fail:assertion violated (!(disable_returned)&&!(teardown_returned))|safety|-DCONSUMER=C_DISABLE -DBUG_CHECK_UNLOCKED
bug-check-unlocked-td   |fail:teardown_returned|safety|-DCONSUMER=C_TEARDOWN -DBUG_CHECK_UNLOCKED
bug-no-recheck          |fail:assertion violated ((produced[e]==1)&&(delivered[e]==1))|safety|-DCONSUMER=C_NEW_POLL -DBUG_NO_RECHECK
bug-teardown-no-wait    |fail:assertion violated (!(teardown_returned)&&!(freed))|safety|-DCONSUMER=C_TEARDOWN -DBUG_TEARDOWN_NO_WAIT
bug-forget-no-wait      |fail:assertion violated !(freed)|safety|-DPOLICY=P_MANY -DCONSUMER=C_FREE -DBUG_FORGET_NO_WAIT
bug-trywait-no-recheck  |fail:assertion violated ((produced[e]==1)&&(delivered[e]==1))|safety|-DCONSUMER=C_NEW_POLL -DBUG_TRYWAIT_NO_RECHECK
bug-no-running-check    |fail:(in_upcall==1)|safety|-DCONSUMER=C_NEW_POLL -DBUG_NO_RUNNING_CHECK
bug-self-teardown-waits |fail:invalid end state|safety|-DCONSUMER=C_TEARDOWN -DUPCALL_SELF_TEARDOWN -DBUG_SELF_TEARDOWN_WAITS
bug-spin-requeue        |fail:non-progress cycle|np|-DCONSUMER=C_NEW_POLL -DBUG_SPIN_REQUEUE
src-tail-no-kick-any    |fail:assertion violated ((produced[e]==1)&&(delivered[e]==1))|safety|-DCONSUMER=C_ANY -DBUG_TAIL_NO_KICK
src-tail-no-kick-qlen1  |fail:assertion violated ((produced[e]==1)&&(delivered[e]==1))|safety|-DCONSUMER=C_NEW_POLL -DNPOST=0 -DNCQ=3 -DQLEN=1 -DBUG_TAIL_NO_KICK
src-deq-no-arm-npending |fail:assertion violated ((produced[e]==1)&&(delivered[e]==1))|safety|-DCONSUMER=C_NPENDING -DBUG_DEQ_NO_ARM
EOF
)

if [ $# -gt 0 ]; then
	sel=""
	while IFS= read -r line; do
		name=$(echo "${line%%|*}" | tr -d ' ')
		for f in "$@"; do
			case $name in *"$f"*) sel+="$line"$'\n'; break ;; esac
		done
	done <<<"$configs"
	configs=${sel%$'\n'}
	[ -n "$configs" ] || { echo "no configuration matches: $*" >&2; exit 2; }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/upcall-model.XXXXXX") || exit 1
cleanup() {
	if [ "$keep" = 1 ]; then
		echo "# work directory kept: $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_one <index> <config line>: writes $work/<index>.res ("ok - ..." or
# "not ok - ..."), keeps pan's output in $work/<name>/pan.out
run_one() {
	local idx=$1 line=$2 name expect mode flags dir ccflags panflags t0 t1 out
	local errs states pat verdict detail
	IFS='|' read -r name expect mode flags <<<"$line"
	name=$(echo "$name" | tr -d ' ')
	mode=$(echo "$mode" | tr -d ' ')
	dir="$work/$name"
	if ! { mkdir -p "$dir" && cp "$model" "$dir/"; }; then
		echo "not ok - $name # setup" >"$work/$idx.res"
		return
	fi
	if [ "$mode" = np ]; then
		ccflags="-DNP -DNOFAIR"; panflags="-l"	# non-progress cycles (livelock)
	else
		ccflags="-DSAFETY"; panflags=""	# assertions + invalid end states
	fi
	t0=$(date +%s.%N)
	# shellcheck disable=SC2086
	if ! (cd "$dir" && spin -a $flags upcall.pml >spin.out 2>&1); then
		echo "not ok - $name # spin -a failed: $(head -c 200 "$dir/spin.out")" >"$work/$idx.res"
		return
	fi
	# -O0: pan.c compiles in ~1 s instead of ~7 s at -O2, and these state
	# spaces are small enough that the search itself is not slower
	# shellcheck disable=SC2086
	if ! (cd "$dir" && gcc -O0 $ccflags -o pan pan.c >gcc.out 2>&1); then
		echo "not ok - $name # gcc failed: $(head -c 200 "$dir/gcc.out")" >"$work/$idx.res"
		return
	fi
	# shellcheck disable=SC2086
	(cd "$dir" && ./pan -m100000 -w22 $panflags >pan.out 2>&1)
	t1=$(date +%s.%N)
	out="$dir/pan.out"
	errs=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -n 1)
	states=$(awk '/states, stored/ { print $1; exit }' "$out")
	detail="$mode, ${states:-?} states, $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1fs", b - a }')"
	if [ -z "$errs" ]; then
		verdict="not ok"; detail="$detail; pan did not finish: $(tail -n 1 "$out")"
	elif [ "$expect" = pass ]; then
		if [ "$errs" -eq 0 ] && ! grep -q 'max search depth too small' "$out"; then
			verdict="ok"
		else
			verdict="not ok"
			detail="$detail; expected no error, got: $(grep -m1 -E 'pan:1:|too small' "$out")"
		fi
	else
		pat=${expect#fail:}
		# compare without blanks: spin's spacing of expressions varies
		if [ "$errs" -gt 0 ] && grep -E '^pan:1:' "$out" | tr -d ' \t' |
			grep -qF -- "$(printf '%s' "$pat" | tr -d ' \t')"; then
			verdict="ok"; detail="$detail; caught: $(grep -m1 -E '^pan:1:' "$out" | sed 's/ (at depth.*//')"
		elif [ "$errs" -gt 0 ]; then
			verdict="not ok"; detail="$detail; failed, but not with '$pat': $(grep -m1 -E '^pan:1:' "$out")"
		else
			verdict="not ok"; detail="$detail; the injected defect was NOT caught"
		fi
	fi
	echo "$verdict - $name # $detail" >"$work/$idx.res"
}

start=$(date +%s)
i=0
while IFS= read -r line; do
	[ -n "$line" ] || continue
	i=$((i + 1))
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n 2>/dev/null || sleep 0.2
	done
	run_one "$i" "$line" &
done <<<"$configs"
wait

pass=0 fail=0
for j in $(seq 1 "$i"); do
	if [ -f "$work/$j.res" ]; then
		cat "$work/$j.res"
		case $(cat "$work/$j.res") in ok*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)) ;; esac
	else
		echo "not ok - configuration $j # no result"
		fail=$((fail + 1))
	fi
done
echo "RESULT $pass $fail 0 - model/upcall.pml: $i configurations, $pass as expected, $fail not ($(( $(date +%s) - start ))s)"
[ "$fail" -eq 0 ]
