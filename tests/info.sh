#!/bin/bash
# daplofi-info, run on the build tree's dat.conf (whose last four entries are
# broken on purpose) and on dat.conf files made here: each entry must report
# what man/daplofi-info.1 says, the reason and the fix of each broken one,
# and the documented exit status.
#
#   tests/info.sh            (from the repo root, after `make`; B=build dir)
#
# Prints TAP; exit 0 if every case passed, 1 otherwise, 2 if it cannot run.
# Each run of daplofi-info takes about half a second (it opens each IA and
# runs its self-test: a connection to itself and a message over it).
set -u

B=${B:-build}
INFO=$B/daplofi-info
. tests/tap.sh
[ -x "$INFO" ] || bail "$INFO not found: run make first (or set B)"
[ -r "$B/dat.conf" ] || bail "$B/dat.conf not found: run make first (or set B)"
LIB=$(cd "$B" && pwd)/libdaplofi.so.2
CONF=$(cd "$B" && pwd)/dat.conf

# info NAME ARGS...: run daplofi-info; $NAME.out, $NAME.err, $rc
info() {
	local name=$1
	shift
	timeout 60 "$INFO" "$@" >"$work/$name.out" 2>"$work/$name.err"
	rc=$?
}

# problem FILE IA: the reason and fix of IA, folded lines joined
problem() {
	awk -v ia="$2" '
		$0 ~ "^  " ia " \\(line [0-9]+\\): " { on = 1; sub("^  " ia " \\(line [0-9]+\\): ", ""); printf "%s", $0; next }
		on && /^  [^ ]/ { on = 0 }
		on && /^$/ { on = 0 }
		on { sub(/^ +/, " "); printf "%s", $0 }
		END { print "" }' "$1"
}

# expect_problem FILE IA REASON FIX: fixed strings, in the reason and the fix
expect_problem() {
	local all reason fix
	all=$(problem "$1" "$2")
	reason=${all%% fix: *}
	fix=${all#* fix: }
	[[ $all == *" fix: "* && $reason == *"$3"* && $fix == *"$4"* ]]
	ok $? "$2: reason '$3', fix '$4'" "$all"
}

# row FILE IA: the table row of IA
row() { grep -E "^$2 " "$1"; }

# ---- the build tree's dat.conf ---------------------------------------------
info build -f "$CONF"
ok $(( rc != 2 )) "build dat.conf: exit status 2 (a dapl-ofi entry does not open)" "exit $rc"
for ia in ofi-lo ofi-net-lo ofi-lo-rr; do
	row "$work/build.out" $ia | grep -qE "^$ia +opens "
	ok $? "$ia opens" "$(row "$work/build.out" $ia)"
done
row "$work/build.out" ofi-lo | grep -qE "^ofi-lo +opens +tcp +msg +lo +127\.0\.0\.1 +[^ ]+ +lo$"
ok $? "ofi-lo: provider tcp, backend msg, interface lo, 127.0.0.1, fabric, domain lo" \
	"$(row "$work/build.out" ofi-lo)"
row "$work/build.out" ofi-net-lo | grep -qE "^ofi-net-lo +opens +net +msg "
ok $? "ofi-net-lo: provider net, backend msg" "$(row "$work/build.out" ofi-net-lo)"
for ia in ofi-bad-params ofi-bad-prov ofi-bad-if ofi-bad-key; do
	row "$work/build.out" $ia | grep -qE "^$ia +FAILS "
	ok $? "$ia FAILS" "$(row "$work/build.out" $ia)"
done
expect_problem "$work/build.out" ofi-bad-params \
	'ia_params "tcp" name no interface, IPv4 address or host name' 'for example "tcp lo"'
expect_problem "$work/build.out" ofi-bad-prov \
	"libfabric has no provider 'nosuchprov'" "that dapl-ofi serves here: "
problem "$work/build.out" ofi-bad-prov | grep -qE 'fix: .*here: ([a-z_]+, )*tcp'
ok $? "ofi-bad-prov: the fix names tcp among the providers" "$(problem "$work/build.out" ofi-bad-prov)"
expect_problem "$work/build.out" ofi-bad-if \
	"no interface, IPv4 address or host name 'nosuchif0'" "name one that exists in ia_params: "
problem "$work/build.out" ofi-bad-if | grep -qE 'fix: .*(: |, )lo 127\.0\.0\.1'
ok $? "ofi-bad-if: the fix lists lo 127.0.0.1" "$(problem "$work/build.out" ofi-bad-if)"
expect_problem "$work/build.out" ofi-bad-key \
	"unknown option 'frobnicate'" "the options are mtu=<bytes>, rdma_read=0|1, domain="
long=$(awk 'length($0) > 100' "$work/build.out")
[ -z "$long" ]
ok $? "every line fits 100 columns" "$long"
[ ! -s "$work/build.err" ]
ok $? "nothing on stderr (the library's log lines are captured)" \
	"$(head -5 "$work/build.err")"

# ---- -v: the attributes, and the library's own log line -------------------
info verbose -v -f "$CONF"
ok $(( rc != 2 )) "-v: exit status 2" "exit $rc"
grep -q 'DAPL_OFI_LOG_LEVEL' "$work/verbose.out" &&
	sed -n '/^ofi-lo  opens$/,/^$/p' "$work/verbose.out" | grep -q 'max_eps' &&
	sed -n '/^ofi-lo  opens$/,/^$/p' "$work/verbose.out" | grep -q 'provider    dapl-ofi' &&
	sed -n '/^ofi-lo  opens$/,/^$/p' "$work/verbose.out" | grep -q 'DAPL_OFI_FABRIC_PROVIDER = tcp'
ok $? "-v: the configuration table, and ofi-lo's IA and provider attributes"
sed -n '/^ofi-bad-if  FAILS$/,/^$/p' "$work/verbose.out" | grep -q "log .*nosuchif0"
ok $? "-v: ofi-bad-if shows dapl-ofi's own log line"
sed -n '/^ofi-lo  opens$/,/^$/p' "$work/verbose.out" |
	grep -qE 'self-test   passed in [0-9]+ ms: an EP connected to another through 127\.0\.0\.1 port'
ok $? "-v: ofi-lo's self-test passed" "$(sed -n '/^ofi-lo  opens$/,/^$/p' "$work/verbose.out" | tail -4)"

# ---- the self-test: an IA that opens but cannot carry a connection ---------
# DAPL_OFI_FAULT_CQ_OPEN=1 makes every completion queue fail to open, as
# fi_cq_open of udp;ofi_rxd once did: dat_ia_open succeeds, the first call
# that needs the queues fails.  "opens" must not be said of such an entry.
grep -E '^(#|ofi-lo )' "$CONF" >"$work/lo.conf"
info lo -f "$work/lo.conf"
[ "$rc" = 0 ] && row "$work/lo.out" ofi-lo | grep -qE "^ofi-lo +opens "
ok $? "ofi-lo alone: opens (its self-test passes), exit status 0" \
	"exit $rc: $(row "$work/lo.out" ofi-lo)"
grep -q '^  ofi-lo (line' "$work/lo.out"
ok $(( ! $? )) "ofi-lo alone: no problem reported" "$(cat "$work/lo.out")"
DAPL_OFI_FAULT_CQ_OPEN=1 info cqfault -f "$work/lo.conf"
ok $(( rc != 2 )) "DAPL_OFI_FAULT_CQ_OPEN=1: exit status 2 (a dapl-ofi entry does not open)" \
	"exit $rc"
row "$work/cqfault.out" ofi-lo | grep -qE "^ofi-lo +FAILS "
ok $? "DAPL_OFI_FAULT_CQ_OPEN=1: ofi-lo FAILS, though dat_ia_open succeeds" \
	"$(row "$work/cqfault.out" ofi-lo)"
expect_problem "$work/cqfault.out" ofi-lo \
	"dat_ia_open succeeds, but the self-test fails: dat_" "cannot carry a DAT connection"
problem "$work/cqfault.out" ofi-lo | grep -qE 'self-test fails: dat_[a-z_]+( \([^)]*\))?: DAT_[A-Z_]+'
ok $? "DAPL_OFI_FAULT_CQ_OPEN=1: the reason names the DAT call that failed and its DAT error" \
	"$(problem "$work/cqfault.out" ofi-lo)"
all=$(problem "$work/cqfault.out" ofi-lo)
[[ ${all%% fix: *} == *"dapl-ofi["*"] error fabric: dfi_cq_open: fi_cq_open("*"): Function not implemented"* ]]
ok $? "DAPL_OFI_FAULT_CQ_OPEN=1: the reason quotes dapl-ofi's log line about fi_cq_open" "$all"
[[ ${all#* fix: } == *"DAPL_OFI_FAULT_CQ_OPEN=1 is set"* && ${all#* fix: } == *"DAPL_OFI_LOG_LEVEL=debug"* &&
   ${all#* fix: } == *"report it"* ]]
ok $? "DAPL_OFI_FAULT_CQ_OPEN=1: the fix names the switch, DAPL_OFI_LOG_LEVEL=debug, and to report it" \
	"$all"
[ ! -s "$work/cqfault.err" ]
ok $? "DAPL_OFI_FAULT_CQ_OPEN=1: nothing on stderr (the library's log lines are captured)" \
	"$(head -5 "$work/cqfault.err")"
DAPL_OFI_FAULT_CQ_OPEN=1 info cqfault-v -v -f "$work/lo.conf"
sed -n '/^ofi-lo  FAILS$/,/^$/p' "$work/cqfault-v.out" | grep -q 'self-test   failed at dat_' &&
	sed -n '/^ofi-lo  FAILS$/,/^$/p' "$work/cqfault-v.out" | grep -q 'max_eps'
ok $? "DAPL_OFI_FAULT_CQ_OPEN=1 -v: ofi-lo's IA attributes (it opened), then the failed self-test" \
	"$(sed -n '/^ofi-lo  FAILS$/,/^$/p' "$work/cqfault-v.out" | tail -8)"
DAPL_OFI_FAULT_CQ_OPEN=1 info cqfault-q -q -f "$work/lo.conf"
[ "$rc" = 0 ] && row "$work/cqfault-q.out" ofi-lo | grep -qE "^ofi-lo +- "
ok $? "DAPL_OFI_FAULT_CQ_OPEN=1 -q: nothing opened or tested, exit status 0" "exit $rc"

# ---- a dat.conf made here: registry-level mistakes -------------------------
cat >"$work/mixed.conf" <<EOF
# made by tests/info.sh
good u2.0 nonthreadsafe default $LIB dapl.2.0 "tcp lo" ""
nolib u2.0 nonthreadsafe default /nonexistent/dir/libdaplofi.so.2 dapl.2.0 "tcp lo" ""
ts u2.0 threadsafe default $LIB dapl.2.0 "tcp lo" ""
v12 u1.2 nonthreadsafe default $LIB dapl.2.0 "tcp lo" ""
nd u2.0 nonthreadsafe nondefault $LIB dapl.2.0 "tcp lo" ""
short u2.0 nonthreadsafe default $LIB dapl.2.0 "tcp lo"
other u2.0 nonthreadsafe default libdaplsomethingelse.so.2 dapl.2.0 "mlx4_0 1" ""
EOF
info mixed -f "$work/mixed.conf"
ok $(( rc != 2 )) "made-up dat.conf: exit status 2" "exit $rc"
row "$work/mixed.out" good | grep -qE "^good +opens "
ok $? "an entry with the library's absolute path opens" "$(row "$work/mixed.out" good)"
row "$work/mixed.out" nolib | grep -qE "^nolib +FAILS "
ok $? "a library path that does not exist: FAILS" "$(row "$work/mixed.out" nolib)"
expect_problem "$work/mixed.out" nolib \
	"library does not load: /nonexistent/dir/libdaplofi.so.2: cannot open shared object file: No such file or directory" \
	"correct the path"
expect_problem "$work/mixed.out" ts "'threadsafe'" "write nonthreadsafe"
expect_problem "$work/mixed.out" v12 "DAT version 1.2" "write u2.0"
row "$work/mixed.out" nd | grep -qE "^nd +ignored "
ok $? "a nondefault entry is ignored" "$(row "$work/mixed.out" nd)"
expect_problem "$work/mixed.out" nd "'nondefault'" "write default"
expect_problem "$work/mixed.out" short "7 fields where the registry needs 8" "write all 8"
grep -q '^1 entry of other providers, not tried (-a tries them): libdaplsomethingelse.so.2 (1)' \
	"$work/mixed.out"
ok $? "another provider's entry is named, not tried" "$(grep -A1 'other providers' "$work/mixed.out")"
row "$work/mixed.out" other >/dev/null
ok $(( ! $? )) "another provider's entry has no row without -a"

# ---- a quote left open: libdat2 2.1.10 may crash reading the lines after it
printf 'open u2.0 nonthreadsafe default %s dapl.2.0 "tcp lo ""\ngood u2.0 nonthreadsafe default %s dapl.2.0 "tcp lo" ""\nw u2.0 nonthreadsafe default %s dapl.2.0 "tcp lo mtu=12" ""\n' \
	"$LIB" "$LIB" "$LIB" >"$work/quote.conf"
info quote -f "$work/quote.conf"
case $rc in
4) grep -q '^daplofi-info: killed by signal' "$work/quote.out" ;;
2) true ;;
*) false ;;
esac
ok $? "a quote left open: exit status 4 (the registry crashed) or 2" "exit $rc: $(head -3 "$work/quote.out")"
expect_problem "$work/quote.out" open "a quote is not closed" "close it"

# ---- exit statuses ------------------------------------------------------------
grep -E '^(#|ofi-lo |ofi-net-lo |ofi-lo-rr )' "$CONF" >"$work/good.conf"
info good -f "$work/good.conf"
ok $rc "only good entries: exit status 0" "exit $rc: $(cat "$work/good.out")"
grep -E '^other ' "$work/mixed.conf" >"$work/none.conf"
info none -f "$work/none.conf"
ok $(( rc != 3 )) "no dapl-ofi entry: exit status 3" "exit $rc"
grep -q '^No dapl-ofi entry' "$work/none.out" && grep -q 'To add one' "$work/none.out"
ok $? "no dapl-ofi entry: says so, and how to add one"
info missing -f "$work/does-not-exist.conf"
ok $(( rc != 1 )) "a dat.conf that does not exist: exit status 1" "exit $rc"
grep -q 'does-not-exist.conf: No such file or directory' "$work/missing.err"
ok $? "a dat.conf that does not exist: named on stderr" "$(cat "$work/missing.err")"
info quick -q -f "$CONF"
ok $rc "-q: exit status 0" "exit $rc"
row "$work/quick.out" ofi-bad-if | grep -qE "^ofi-bad-if +- "
ok $? "-q: nothing opened" "$(row "$work/quick.out" ofi-bad-if)"
info conf -c -f "$CONF"
[ "$rc" = 0 ] && grep -q '^ .*DAPL_OFI_LOG_LEVEL' "$work/conf.out" && ! grep -q 'ofi-lo' "$work/conf.out"
ok $? "-c: the configuration table only, exit status 0" "exit $rc"
info usage -x
ok $(( rc != 1 )) "a wrong option: exit status 1" "exit $rc"
DAT_OVERRIDE=$work/none.conf timeout 60 "$INFO" -f "$work/good.conf" >"$work/over.out" 2>&1
rc=$?
[ "$rc" = 0 ] && grep -qE '^ofi-lo +opens' "$work/over.out"
ok $? "-f wins over DAT_OVERRIDE" "exit $rc"

# ---- the simulated hardware providers (fabsim/) --------------------------------
# psm3's opens (contexts it writes in, one receive segment); opx's and cxi's
# are refused, each with what dapl-ofi does not serve yet
if [ -f "$B/fabsim/libsim_psm3-fi.so" ]; then
	FI_PROVIDER_PATH=$(cd "$B/fabsim" && pwd) info sim -f "$CONF"
	row "$work/sim.out" ofi-sim-psm3 | grep -qE "^ofi-sim-psm3 +opens +sim_psm3 +rdm "
	ok $? "ofi-sim-psm3 opens, on the RDM backend" "$(row "$work/sim.out" ofi-sim-psm3)"
	for want in "ofi-sim-opx:FI_ORDER_SAS" "ofi-sim-opx:FI_MR_SCALABLE" \
		"ofi-sim-opx:FI_ASYNC_IOV" "ofi-sim-cxi:FI_MR_ENDPOINT"; do
		ia=${want%%:*}
		problem "$work/sim.out" "$ia" | grep -q "${want#*:}.*not served yet"
		ok $? "$ia FAILS, naming ${want#*:}" "$(problem "$work/sim.out" "$ia")"
	done
	problem "$work/sim.out" ofi-sim-cxi | grep -q "fix: .*sim_psm3 (rdm)"
	ok $? "the fix names sim_psm3 among the providers served" \
		"$(problem "$work/sim.out" ofi-sim-cxi)"
fi

echo "1..$n"
echo "# info: $((n - failed)) ok, $failed not ok, of $n"
[ "$failed" -eq 0 ]
