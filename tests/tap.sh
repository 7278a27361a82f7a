# What the shell tests that print TAP share (sourced after `set -u`):
# n and failed, the counts; bail, which ends a test that cannot run (exit
# 2); ok STATUS TEXT [DETAIL], one TAP line, the detail as "#" comments
# under a failure; and work, a temporary directory removed at exit, after
# the script's own tap_cleanup if it has one.  Programs run under an ASan
# build get LeakSanitizer's suppression for what the libraries dlopen pulls
# in keep from their constructors (as tests/examples.sh).
n=0 failed=0

bail() { echo "Bail out! $*"; exit 2; }

work=$(mktemp -d)
trap 'if declare -F tap_cleanup >/dev/null; then tap_cleanup; fi; rm -rf "$work"' EXIT
printf 'leak:_dl_init\n' >"$work/lsan.supp"
export LSAN_OPTIONS="suppressions=$work/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"

ok() {
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		failed=$((failed + 1))
		[ -n "${3:-}" ] && printf '%s\n' "$3" | sed 's/^/#   /'
	fi
}
