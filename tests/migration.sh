#!/bin/bash
# Replacing OFA uDAPL (man/dapl-ofi.7, MIGRATING FROM OFA uDAPL): the
# dat.conf Debian's libdapl2 ships (OFA's ofa-v2-* entries, no final
# newline: tests/package/libdapl2-dat.conf) with dapl-ofi's block after it,
# as the packages write it, read by the stock registry (libdat2) in
# dapl-ofi's own DAT programs (they link only -ldat2):
#   - dapl-ofi's entries open and move data though OFA's come first, and an
#     OFA entry whose device is not here fails on its own without taking
#     them down;
#   - an entry that keeps an OFA name (ofa-v2-ib0) for job scripts, served
#     by dapl-ofi, opens under that name;
#   - DAPL_IB_MTU changes what an IA reports (DAT_IB_TRANSPORT_MTU), and
#     DAPL_OFI_MTU wins over it;
#   - an OFA launch file's variables: one line each at start-up, a warning
#     for each ignored one even at the default log level, and the IA opens.
#
#   tests/migration.sh        (from the repo root, after `make`; B=build dir)
#
# Prints TAP; exit 0 if every case passed, 1 otherwise, 2 if it cannot run.
# Traffic stays on 127.0.0.1; about 5 s.
set -u

B=${B:-build}
INFO=$B/daplofi-info
DEMO=$B/daplofi-demo
PERF=$B/daplofi-perf
OFA_CONF=tests/package/libdapl2-dat.conf
. tests/tap.sh
for p in "$INFO" "$DEMO" "$PERF"; do
	[ -x "$p" ] || bail "$p not found: run make first (or set B)"
done
[ -r "$OFA_CONF" ] || bail "$OFA_CONF not found"
command -v ss >/dev/null || bail "ss not found: install iproute2 (scripts/deps.sh)"
LIB=$(cd "$B" && pwd)/libdaplofi.so.2
. bench/lib.sh

SRV=
tap_cleanup() {
	[ -n "$SRV" ] && kill "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
}
trap 'exit 130' INT TERM
export FI_TCP_IFACE=lo
# the runner's log level would hide the lines this test counts
unset DAPL_OFI_LOG_LEVEL

# OFA's file as its package writes it, then dapl-ofi's block as the
# packages' scripts append it (a newline first: OFA's file has none)
block() {
	printf '# BEGIN libdaplofi2 newline: dapl-ofi entries, removed with the package\n'
	printf 'ofi-lo u2.0 nonthreadsafe default %s dapl.2.0 "tcp lo" ""\n' "$LIB"
	printf 'ofi-rxm-lo u2.0 nonthreadsafe default %s dapl.2.0 "tcp;ofi_rxm lo" ""\n' "$LIB"
	printf 'ofi-shm u2.0 nonthreadsafe default %s dapl.2.0 "shm lo" ""\n' "$LIB"
	printf '# END libdaplofi2\n'
}
{ cat "$OFA_CONF"; printf '\n'; block; } >"$work/both.conf"
export DAT_OVERRIDE=$work/both.conf

# ---- the stock registry on OFA's file plus dapl-ofi's block ----------------
for ia in ofi-lo ofi-rxm-lo ofi-shm; do
	timeout 60 "$DEMO" -P "$ia" -n 1000 >"$work/demo-$ia.out" 2>&1
	rc=$?
	[ "$rc" = 0 ] && grep -q "IA '$ia' of .* opened through the stock DAT registry" "$work/demo-$ia.out"
	ok $? "$ia opens through the stock registry after OFA's $(grep -c '^ofa-v2-' "$OFA_CONF") entries" \
		"exit $rc: $(head -n 5 "$work/demo-$ia.out")"
done
# libdaplofa.so.2 loads here (libdapl2 is installed) but there is no ib0:
# the open fails with a DAT error, not a crash
timeout 60 "$DEMO" -P ofa-v2-ib0 -n 10 >"$work/demo-ofa.out" 2>&1
rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -lt 128 ] && grep -qi 'DAT_' "$work/demo-ofa.out"
ok $? "ofa-v2-ib0 (OFA's, no device here) fails with a DAT error, exit $rc, not a signal" \
	"$(tail -n 3 "$work/demo-ofa.out")"
timeout 60 "$INFO" >"$work/info.out" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -qE '^ofi-lo +opens' "$work/info.out" &&
	grep -qE "^$(grep -c '^ofa-v2-' "$OFA_CONF") entries of other providers, not tried" "$work/info.out"
ok $? "daplofi-info on that file: dapl-ofi's 3 entries open (exit 0), OFA's counted apart" \
	"exit $rc: $(cat "$work/info.out")"

port=$((18800 + RANDOM % 100))
if bench_serve ofi-lo "$port" "$work/srv.out" "" timeout 60 "$PERF" -P ofi-lo -n "$port" -T 20; then
	timeout 60 "$PERF" -P ofi-lo -h 127.0.0.1 -n "$port" -T 20 -q --csv -t send_lat -S 64 \
		-I 200 -w 20 >"$work/cli.csv" 2>"$work/cli.err"
	crc=$?
	wait "$SRV"
	src=$?
	SRV=
	[ "$crc" = 0 ] && [ "$src" = 0 ] && grep -q ',send_lat,' "$work/cli.csv"
	ok $? "daplofi-perf server and client on ofi-lo of that file: a 64 B ping-pong" \
		"client exit $crc, server exit $src: $(tail -n 3 "$work/cli.err" "$work/srv.out")"
else
	ok 1 "daplofi-perf server on ofi-lo of that file" "$BENCH_WHY"
fi

# ---- an OFA name kept for job scripts, served by dapl-ofi -----------------
sed "s|^ofa-v2-ib0 .*|ofa-v2-ib0 u2.0 nonthreadsafe default $LIB dapl.2.0 \"tcp lo\" \"\"|" \
	"$OFA_CONF" >"$work/keep.conf"
DAT_OVERRIDE=$work/keep.conf timeout 60 "$DEMO" -P ofa-v2-ib0 -n 10 >"$work/keep.out" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -q "IA 'ofa-v2-ib0' of .* opened through the stock DAT registry" "$work/keep.out" &&
	grep -qE 'adapter +ofa-v2-ib0 \(libfabric tcp on lo\)' "$work/keep.out"
ok $? "OFA's ofa-v2-ib0 line given dapl-ofi's library: the job script's name opens on libfabric tcp" \
	"exit $rc: $(head -n 6 "$work/keep.out")"

# ---- DAPL_IB_MTU: what the IA reports -------------------------------------
mtu_of() { timeout 60 "$INFO" -v 2>/dev/null | sed -n '/^ofi-lo  opens$/,/^$/p' |
	sed -n 's/.*DAT_IB_TRANSPORT_MTU = \([0-9]*\).*/\1/p' | head -n 1; }
m0=$(mtu_of)
m1=$(DAPL_IB_MTU=4096 mtu_of)
m2=$(DAPL_IB_MTU=4096 DAPL_OFI_MTU=1024 mtu_of)
[ "$m0" = 2048 ] && [ "$m1" = 4096 ] && [ "$m2" = 1024 ]
ok $? "DAT_IB_TRANSPORT_MTU of ofi-lo: 2048, 4096 with DAPL_IB_MTU=4096, 1024 with DAPL_OFI_MTU=1024 too" \
	"got '$m0', '$m1', '$m2'"

# ---- an OFA launch file's variables ---------------------------------------
ofa_env=(DAPL_IB_SL=0 DAPL_UCM_QP_SIZE=8 DAPL_SCM_NETDEV=eth0 DAPL_ACK_TIMER=14 DAPL_MAX_INLINE=64)
env "${ofa_env[@]}" DAPL_OFI_LOG_LEVEL=info timeout 60 "$DEMO" -P ofi-lo -n 10 >"$work/env.out" 2>&1
rc=$?
lines=$(grep -cE '^dapl-ofi\[[0-9]+\] .*check_ofa: ' "$work/env.out")
r=0
for v in DAPL_IB_SL=0 DAPL_UCM_QP_SIZE=8 DAPL_SCM_NETDEV=eth0; do
	[ "$(grep -c "warn  ia: check_ofa: $v ignored (OFA uDAPL: " "$work/env.out")" = 1 ] || r=1
done
[ "$(grep -c 'info  ia: check_ofa: DAPL_ACK_TIMER=14 (OFA uDAPL: .*) honoured as DAPL_OFI_PEER_TIMEOUT_MS=537$' \
	"$work/env.out")" = 1 ] || r=1
[ "$(grep -c 'info  ia: check_ofa: DAPL_MAX_INLINE=64 (OFA uDAPL: .*) honoured as DAPL_OFI_INJECT=1$' \
	"$work/env.out")" = 1 ] || r=1
[ "$rc" = 0 ] && [ "$lines" = 5 ] && [ "$r" = 0 ]
ok $? "${ofa_env[*]}: exactly one line each (3 ignored, 2 honoured), the IA opens" \
	"exit $rc, $lines lines: $(grep 'check_ofa' "$work/env.out")"
env "${ofa_env[@]}" timeout 60 "$DEMO" -P ofi-lo -n 10 >"$work/env2.out" 2>&1
rc=$?
lines=$(grep -cE '^dapl-ofi\[[0-9]+\] warn  ia: check_ofa: ' "$work/env2.out")
[ "$rc" = 0 ] && [ "$lines" = 3 ] && ! grep -q 'info  ' "$work/env2.out"
ok $? "the same at the default log level (warn): the 3 ignored ones still show, nothing else" \
	"exit $rc, $lines lines: $(grep 'dapl-ofi\[' "$work/env2.out")"

echo "1..$n"
echo "# migration: $((n - failed)) ok, $failed not ok, of $n"
[ "$failed" -eq 0 ]
