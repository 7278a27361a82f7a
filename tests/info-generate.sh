#!/bin/bash
# daplofi-info --generate: the entries it writes for 127.0.0.1 (lo) go into
# a temporary dat.conf, and each one opens through the STOCK registry
# (libdat2, DAT_OVERRIDE naming that file) in dapl-ofi's own DAT programs,
# which link only -ldat2: daplofi-demo opens, queries and closes every
# entry; a daplofi-perf server and client move a 64 B send/recv ping-pong
# over each entry of the fabrics README's Status table tests (tcp, rxm,
# net-rdm, shm).  Then the comments it writes for entries that do not open,
# its filters, and its errors for bad arguments.
#
#   tests/info-generate.sh     (from the repo root, after `make`; B=build dir)
#
# Prints TAP; exit 0 if every case passed, 1 otherwise, 2 if it cannot run.
# Traffic stays on 127.0.0.1; about 10 s.
set -u

B=${B:-build}
INFO=$B/daplofi-info
DEMO=$B/daplofi-demo
PERF=$B/daplofi-perf
. tests/tap.sh
for p in "$INFO" "$DEMO" "$PERF"; do
	[ -x "$p" ] || bail "$p not found: run make first (or set B)"
done
command -v ss >/dev/null || bail "ss not found: install iproute2 (scripts/deps.sh)"
LIB=$(cd "$B" && pwd)/libdaplofi.so.2
. bench/lib.sh

SRV=
tap_cleanup() {
	[ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
}
trap 'exit 130' INT TERM
export FI_TCP_IFACE=lo

# entries FILE: the IA names of the entries that are not commented out
entries() { awk '!/^[[:space:]]*(#|$)/ { print $1 }' "$1"; }

# ---- generate for lo, with the library of this build -----------------------
timeout 120 "$INFO" --generate --lib "$LIB" --interface lo >"$work/gen.conf" 2>"$work/gen.err"
rc=$?
ok $rc "--generate --lib $B/libdaplofi.so.2 --interface lo: exit status 0" \
	"exit $rc: $(cat "$work/gen.err")"
sed 's/^/# /' "$work/gen.conf"
mapfile -t IAS < <(entries "$work/gen.conf")
want="ofi-tcp-lo ofi-rxm-lo ofi-net-rdm-lo ofi-shm"
missing=
for ia in $want; do
	printf '%s\n' "${IAS[@]}" | grep -qx "$ia" || missing="$missing $ia"
done
[ -z "$missing" ]
ok $? "the fabrics dapl-ofi is tested on are there, not commented out: $want" "missing:$missing"
bad=$(awk '!/^[[:space:]]*(#|$)/ && !($2 == "u2.0" && $3 == "nonthreadsafe" && $4 == "default" &&
	$5 == lib && $6 == "dapl.2.0" && NF >= 8)' lib="$LIB" "$work/gen.conf")
[ -z "$bad" ]
ok $? "every entry: u2.0 nonthreadsafe default, the library given, dapl.2.0" "$bad"
! grep -qE '^[^#].*(eth|en|ib)[0-9a-z]*" ""$' "$work/gen.conf" &&
	! awk '!/^#/ && $1 !~ /-lo$/ && $1 != "ofi-shm"' "$work/gen.conf" | grep -q .
ok $? "--interface lo: only lo's entries (and shm's, which serves the host)" \
	"$(awk '!/^#/ && $1 !~ /-lo$/' "$work/gen.conf")"
grep -qE "^daplofi-info: ${#IAS[@]} of ${#IAS[@]} entries open$" "$work/gen.err"
ok $? "stderr: every one of the ${#IAS[@]} entries opened" "$(cat "$work/gen.err")"

# ---- each entry through the stock registry: open, query, close -------------
export DAT_OVERRIDE=$work/gen.conf
for ia in "${IAS[@]}"; do
	timeout 60 "$DEMO" -P "$ia" -n 1000 >"$work/demo-$ia.out" 2>&1
	rc=$?
	[ "$rc" = 0 ] && grep -q "IA '$ia' of .* opened through the stock DAT registry" "$work/demo-$ia.out" &&
		grep -q '^IA closed' "$work/demo-$ia.out"
	ok $? "daplofi-demo -P $ia (stock libdat2, DAT_OVERRIDE=the generated file): opens, closes" \
		"exit $rc: $(head -n 5 "$work/demo-$ia.out")"
done

# ---- data over the tested fabrics: a 64 B ping-pong on 127.0.0.1 -----------
pick_port() {
	local i p
	for ((i = 0; i < 50; i++)); do
		p=$((18700 + RANDOM % 100))
		ss -Hltn "sport = :$p" 2>/dev/null | grep -q . || { echo "$p"; return 0; }
	done
	return 1
}
for ia in $want; do
	# libfabric 1.17 net leaks endpoint and connection objects of its own
	# (as tests/run.sh says): no leak check where net EPs connect
	leakok=
	[ "$ia" = ofi-net-rdm-lo ] && leakok="env ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	port=$(pick_port) || { ok 1 "$ia: a free port in 18700..18799"; continue; }
	if ! bench_serve "$ia" "$port" "$work/srv-$ia.out" "" $leakok timeout 60 "$PERF" -P "$ia" -n "$port" -T 20; then
		ok 1 "daplofi-perf server on $ia" "$BENCH_WHY"
		[ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
		SRV=
		continue
	fi
	$leakok timeout 60 "$PERF" -P "$ia" -h 127.0.0.1 -n "$port" -T 20 -q --csv -t send_lat -S 64 \
		-I 200 -w 20 >"$work/cli-$ia.csv" 2>"$work/cli-$ia.err"
	crc=$?
	wait "$SRV"
	src=$?
	SRV=
	[ "$crc" = 0 ] && [ "$src" = 0 ] && grep -q ',send_lat,' "$work/cli-$ia.csv"
	ok $? "daplofi-perf server and client on $ia: a 64 B send/recv ping-pong, both exit 0" \
		"client exit $crc, server exit $src: $(tail -n 3 "$work/cli-$ia.err" "$work/srv-$ia.out")"
done
unset DAT_OVERRIDE

# ---- what it writes for entries that do not open --------------------------
timeout 60 "$INFO" --generate --lib /nonexistent/libdaplofi.so.2 -i lo -F tcp,shm \
	>"$work/nolib.conf" 2>"$work/nolib.err"
rc=$?
[ "$rc" = 2 ] && [ -z "$(entries "$work/nolib.conf")" ] &&
	[ "$(grep -c '^# ofi-[a-z-]* does not open: library does not load: /nonexistent/libdaplofi.so.2' \
		"$work/nolib.conf")" = 2 ] &&
	grep -qx '#ofi-tcp-lo u2.0 nonthreadsafe default /nonexistent/libdaplofi.so.2 dapl.2.0 "tcp lo" ""' \
		"$work/nolib.conf" &&
	grep -q '0 of 2 entries open; the others are commented out' "$work/nolib.err"
ok $? "a library that does not load: exit status 2, each entry commented out after its reason" \
	"exit $rc: $(cat "$work/nolib.conf" "$work/nolib.err")"
# what it writes is still a dat.conf the registry reads: no entry, no complaint
DAT_OVERRIDE=$work/nolib.conf timeout 60 "$INFO" >"$work/nolib.info" 2>&1
ok $(( $? != 3 )) "daplofi-info on that file: no dapl-ofi entry in it (exit status 3)" \
	"$(cat "$work/nolib.info")"

timeout 60 "$INFO" --generate --lib "$LIB" --interface lo --fabric tcp,shm -q \
	>"$work/q.conf" 2>"$work/q.err"
rc=$?
[ "$rc" = 0 ] && [ "$(entries "$work/q.conf" | tr '\n' ' ')" = "ofi-tcp-lo ofi-shm " ] &&
	grep -q '^# not opened (-q)' "$work/q.conf"
ok $? "--fabric tcp,shm -q: exactly ofi-tcp-lo and ofi-shm, marked as not opened" \
	"exit $rc: $(cat "$work/q.conf" "$work/q.err")"

# ---- bad arguments: a clear error, exit status 1 ---------------------------
# args_fail WHAT ARGS...: exit 1 and a message on stderr that contains WHAT
args_fail() {
	local what=$1 out rc
	shift
	out=$(timeout 60 "$INFO" "$@" 2>&1 >/dev/null)
	rc=$?
	[ "$rc" = 1 ] && [[ $out == *"$what"* ]]
	ok $? "daplofi-info $*: exit status 1, says '$what'" "exit $rc: $out"
}
args_fail "no interface 'nosuch0' that is up with an IPv4 address (here: " --generate -i nosuch0
args_fail "no fabric 'bogus' here (here: tcp" --generate --fabric bogus
args_fail "has no blank, quote" --generate --lib 'a b.so'
args_fail "go with --generate" --interface lo
args_fail "takes no -a, -c, -f or -v" --generate -f /etc/dat.conf

echo "1..$n"
echo "# info-generate: $((n - failed)) ok, $failed not ok, of $n"
[ "$failed" -eq 0 ]
