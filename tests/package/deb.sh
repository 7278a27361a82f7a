#!/bin/bash
# The Debian packages (debian/, `make deb`), built, linted and installed for
# real, then purged:
#   - make deb builds libdaplofi2, libdaplofi-dev and daplofi-utils, and
#     lintian finds no error and no warning that is not overridden;
#   - the maintainer scripts, run from the built package in a scratch root
#     ($DPKG_ROOT), on the /etc/dat.conf cases README.Debian promises: no
#     final newline, none at all, no file, the admin's edits, a lone BEGIN,
#     a symlink, the file's mode;
#   - on this system: /etc/dat.conf saved (a copy, its sha256), the three
#     packages installed (apt-get install ./x.deb), the entries there once,
#     the rest of the file untouched, daplofi-info and the stock dtest
#     (tests/stock/clients.sh) through /etc/dat.conf with NO DAT_OVERRIDE,
#     two reinstalls (no change), remove (the file as it was), install again,
#     purge (the file byte for byte as it was).
# Whatever happens, the exit trap purges the packages and puts the saved
# /etc/dat.conf back (or deletes one that was not there).
#
#   tests/package/deb.sh           (from anywhere; as root)
#
# Prints TAP ("ok N - ..." / "not ok N - ..."), the plan last; one
# "ok 1 # SKIP why" when it cannot run: not root, no dpkg, or one of the
# packages is on this system already (it is left alone).  Exit status 0 if
# nothing failed.  It installs system-wide and its dtest pair uses the fixed
# ports 15828 and 45248 on 127.0.0.1: run it where nothing else does (CI, or
# a network namespace of your own).
set -u
cd "$(dirname "$0")/../.." || exit 2
top=$PWD
PKGS=(libdaplofi2 libdaplofi-dev daplofi-utils)
CONF=/etc/dat.conf
DEBDIR=build/deb
BEGIN_RE='^# BEGIN libdaplofi2'

n=0 nfail=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); nfail=$((nfail + 1)); echo "not ok $n - $*"; }
# check NAME CMD...: one TAP line from CMD's status
check() {
	local name=$1
	shift
	if "$@"; then ok "$name"; else notok "$name"; fi
}
comment() { sed -e 's/^/#   /'; }
skip_all() { echo "ok 1 # SKIP $*"; echo "1..1"; exit 0; }
finish() { echo "1..$n"; [ "$nfail" -eq 0 ]; exit; }

[ "$(id -u)" = 0 ] || skip_all "not root: the test installs packages system-wide"
command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
	skip_all "dpkg or apt-get not found: not a Debian system"
for p in "${PKGS[@]}"; do
	st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)
	case $st in
	"" | un*) ;;
	*) skip_all "$p is on this system already (dpkg state '${st% }'): left alone; purge it to run this test" ;;
	esac
done
unset DAT_OVERRIDE
export DEBIAN_FRONTEND=noninteractive

t0=$SECONDS
tmp=$(mktemp -d) || exit 2
had_conf=0
if [ -e "$CONF" ]; then
	cp -p "$CONF" "$tmp/dat.conf.orig" || { echo "Bail out! cannot copy $CONF"; exit 2; }
	had_conf=1
	orig_sum=$(sha256sum <"$CONF")
fi
# same_as_orig: /etc/dat.conf is byte for byte what it was (or still absent)
same_as_orig() {
	if [ "$had_conf" -eq 1 ]; then
		[ -e "$CONF" ] && [ "$(sha256sum <"$CONF")" = "$orig_sum" ] &&
			cmp -s "$tmp/dat.conf.orig" "$CONF"
	else
		[ ! -e "$CONF" ]
	fi
}
installed_any() {
	local p
	for p in "${PKGS[@]}"; do
		case $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) in
		"" | un*) ;;
		*) return 0 ;;
		esac
	done
	return 1
}
cleanup() {
	trap - EXIT INT TERM HUP
	if installed_any; then
		echo "# cleanup: purging ${PKGS[*]}"
		dpkg --purge "${PKGS[@]}" 2>&1 | comment
	fi
	if ! same_as_orig; then
		if [ "$had_conf" -eq 1 ]; then
			echo "# cleanup: $CONF differs from the copy saved at the start: put back"
			cat "$tmp/dat.conf.orig" >"$CONF"
		else
			echo "# cleanup: $CONF was not there at the start: deleted"
			rm -f "$CONF"
		fi
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "# interrupted"; exit 130' INT TERM HUP

# ---- build and lint ------------------------------------------------------
if ! scripts/deps.sh deb lint >"$tmp/deps.log" 2>&1; then
	notok "build dependencies (scripts/deps.sh deb lint)"
	comment <"$tmp/deps.log"
	finish
fi
ts=$SECONDS
if make -s deb >"$tmp/build.log" 2>&1; then
	ok "make deb builds ${PKGS[*]} into $DEBDIR/ ($((SECONDS - ts))s)"
else
	notok "make deb builds ${PKGS[*]} into $DEBDIR/"
	tail -n 30 "$tmp/build.log" | comment
	finish
fi
debs=()
for p in "${PKGS[@]}"; do
	f=$(ls "$DEBDIR/${p}_"*.deb 2>/dev/null | head -n 1)
	[ -n "$f" ] || { notok "$p's .deb is in $DEBDIR/"; finish; }
	debs+=("$top/$f")
done
changes=$(ls "$DEBDIR"/*.changes | head -n 1)
ts=$SECONDS
# lintian warns that it runs as root: that line is not a finding
if lintian --fail-on error,warning "$changes" >"$tmp/lintian.log" 2>&1; then
	ok "lintian $(basename "$changes"): no error, no warning ($((SECONDS - ts))s)"
else
	notok "lintian $(basename "$changes"): no error, no warning"
fi
grep -v 'running with root privileges' "$tmp/lintian.log" | comment

# ---- the maintainer scripts in a scratch root ----------------------------
root=$tmp/root
dpkg-deb -x "${debs[0]}" "$root" && dpkg-deb -e "${debs[0]}" "$tmp/ctrl" &&
	mkdir -p "$root/etc" || { notok "libdaplofi2's files and scripts unpack"; finish; }
sconf=$root/etc/dat.conf
snippet=$root/usr/share/dapl-ofi/dat.conf
mapfile -t ENTRIES < <(grep -vE '^[[:space:]]*(#|$)' "$snippet")
[ "${#ENTRIES[@]}" -ge 1 ] || { notok "the snippet $snippet has entries"; finish; }
postinst() { DPKG_ROOT=$root sh "$tmp/ctrl/postinst" configure "$@" 2>>"$tmp/scripts.err"; }
postrm() { DPKG_ROOT=$root sh "$tmp/ctrl/postrm" "${1:-remove}" 2>>"$tmp/scripts.err"; }
# block_ok FILE: one BEGIN, one END, each entry of the snippet once
block_ok() {
	local e
	[ "$(grep -c "$BEGIN_RE" "$1")" -eq 1 ] && [ "$(grep -c '^# END libdaplofi2' "$1")" -eq 1 ] ||
		return 1
	for e in "${ENTRIES[@]}"; do
		[ "$(grep -cxF -- "$e" "$1")" -eq 1 ] || return 1
	done
}

# like libdapl2's file: no newline at the end
printf '# DAT v2.0\nofa-v2-ib0 u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "ib0 0" ""' >"$tmp/a"
cp "$tmp/a" "$sconf"
postinst && block_ok "$sconf" && grep -q "$BEGIN_RE.* newline" "$sconf" &&
	cmp -s -n "$(stat -c %s "$tmp/a")" "$tmp/a" "$sconf" &&
	[ "$(sed -n 2p "$sconf")" = "$(sed -n 2p "$tmp/a")" ]
check "scripts: a file without a final newline gets the block after one, its lines untouched" [ $? -eq 0 ]
cp "$sconf" "$tmp/a.inst"
postinst 0.1.0-1 && postinst 0.1.0-1
check "scripts: configure again (upgrade, reinstall) changes nothing" cmp -s "$tmp/a.inst" "$sconf"
postrm remove && postrm purge
check "scripts: remove, then purge, give that file back byte for byte" cmp -s "$tmp/a" "$sconf"

printf '# a comment\nx u2.0 nonthreadsafe default libx.so.2 dapl.2.0 "x" ""\n' >"$tmp/b"
cp "$tmp/b" "$sconf"
postinst && block_ok "$sconf" && ! grep -q "$BEGIN_RE.* newline" "$sconf" && postrm
check "scripts: a file ending in a newline: nothing added before the block, back byte for byte" \
	cmp -s "$tmp/b" "$sconf"

: >"$sconf"
postinst && block_ok "$sconf" && postrm
check "scripts: an empty file stays (empty)" [ $? -eq 0 -a -e "$sconf" -a ! -s "$sconf" ]

rm -f "$sconf"
postinst && block_ok "$sconf" && grep -q "$BEGIN_RE.* created" "$sconf" &&
	[ "$(stat -c %a "$sconf")" = 644 ] && postrm
check "scripts: no file: created with the block (0644), deleted again on remove" [ $? -eq 0 -a ! -e "$sconf" ]

rm -f "$sconf"
postinst && echo 'mine u2.0 nonthreadsafe default libm.so.2 dapl.2.0 "m" ""' >>"$sconf" && postrm
check "scripts: a created file the admin added to: only the admin's line stays" \
	[ "$(cat "$sconf" 2>/dev/null)" = 'mine u2.0 nonthreadsafe default libm.so.2 dapl.2.0 "m" ""' ]

# the admin comments out an entry of the block and adds one after it
cp "$tmp/a" "$sconf"
postinst && sed -i "s/^${ENTRIES[0]%% *} /#&/" "$sconf" &&
	echo 'later u2.0 nonthreadsafe default libl.so.2 dapl.2.0 "l" ""' >>"$sconf" &&
	cp "$sconf" "$tmp/c.edited" && postinst 0.1.0-1 && cmp -s "$tmp/c.edited" "$sconf"
r1=$?
postrm
printf '%s\n%s\n' "$(cat "$tmp/a")" 'later u2.0 nonthreadsafe default libl.so.2 dapl.2.0 "l" ""' >"$tmp/c.want"
[ "$r1" -eq 0 ] && cmp -s "$tmp/c.want" "$sconf"
check "scripts: the admin's edits: kept on reinstall; on remove the whole block goes, the line after it stays whole" \
	[ $? -eq 0 ]

printf 'a u2.0 nonthreadsafe default liba.so.2 dapl.2.0 "a" ""\n# BEGIN libdaplofi2: dapl-ofi entries\nb u2.0 x\n' >"$tmp/d"
cp "$tmp/d" "$sconf"
: >"$tmp/scripts.err"
postrm && cmp -s "$tmp/d" "$sconf" && grep -q 'no .# END libdaplofi2' "$tmp/scripts.err"
check "scripts: a BEGIN line without END: the file left alone, with a warning" [ $? -eq 0 ]

cp "$tmp/b" "$root/etc/dat.conf.real" && rm -f "$sconf" && ln -s dat.conf.real "$sconf" &&
	chmod 600 "$root/etc/dat.conf.real" && postinst && [ -L "$sconf" ] &&
	block_ok "$root/etc/dat.conf.real" && [ "$(stat -c %a "$root/etc/dat.conf.real")" = 600 ] &&
	postrm && [ -L "$sconf" ] && cmp -s "$tmp/b" "$root/etc/dat.conf.real" &&
	[ "$(stat -c %a "$root/etc/dat.conf.real")" = 600 ]
check "scripts: a symlinked dat.conf stays a link, its target keeps its mode (0600)" [ $? -eq 0 ]
rm -f "$sconf" "$root/etc/dat.conf.real"
[ -s "$tmp/scripts.err" ] && grep -v 'no .# END' "$tmp/scripts.err" | comment

# ---- installed on this system --------------------------------------------
[ "$had_conf" -eq 1 ] && echo "# $CONF saved: $(stat -c %s "$CONF") bytes, sha256 ${orig_sum%% *}" ||
	echo "# $CONF is not there: the package will create it"
ts=$SECONDS
if apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "${debs[@]}" \
	>"$tmp/install.log" 2>&1; then
	ok "apt-get install ./${PKGS[0]}_*.deb ./${PKGS[1]}_*.deb ./${PKGS[2]}_*.deb ($((SECONDS - ts))s)"
else
	notok "apt-get install ./${PKGS[0]}_*.deb ./${PKGS[1]}_*.deb ./${PKGS[2]}_*.deb"
	tail -n 20 "$tmp/install.log" | comment
	finish
fi
check "$CONF has the block once, each entry once: ${ENTRIES[*]%% *}" block_ok "$CONF"
grep -A "${#ENTRIES[@]}" "$BEGIN_RE" "$CONF" | comment
if [ "$had_conf" -eq 1 ]; then
	check "$CONF: its $(stat -c %s "$tmp/dat.conf.orig") bytes from before untouched" \
		cmp -s -n "$(stat -c %s "$tmp/dat.conf.orig")" "$tmp/dat.conf.orig" "$CONF"
fi
inst_sum=$(sha256sum <"$CONF")

# daplofi-info opens every dapl-ofi entry of /etc/dat.conf (exit 0)
if timeout 60 /usr/bin/daplofi-info >"$tmp/info.log" 2>&1; then
	ok "daplofi-info (installed) opens every dapl-ofi entry of $CONF"
else
	notok "daplofi-info (installed) opens every dapl-ofi entry of $CONF"
	sed -n '/^IAs in/,$p' "$tmp/info.log" | comment
fi

# a program built against libdaplofi-dev (its pkg-config file, its headers)
# opens ofi-lo through /etc/dat.conf and finds the upcall extension
cat >"$tmp/devtest.c" <<'EOF'
#include <stdio.h>
#include <dat2/udat.h>
#include <dat2/dapl_ofi.h>
#include <dat2/dat_ofi_extensions.h>

int main(void)
{
	DAT_IA_HANDLE ia;
	DAT_EVD_HANDLE async = DAT_HANDLE_NULL;
	DAT_IA_ATTR ia_attr;
	DAT_PROVIDER_ATTR pr_attr;

	if (dat_ia_open("ofi-lo", 8, &async, &ia) != DAT_SUCCESS ||
	    dat_ia_query(ia, NULL, DAT_IA_ALL, &ia_attr, DAT_PROVIDER_FIELD_ALL, &pr_attr) != DAT_SUCCESS)
		return 1;
	printf("%s %s, extension %s%s\n", ia_attr.adapter_name, pr_attr.provider_name,
	       ia_attr.extension_supported == DAT_EXTENSION_IB ? "DAT_EXTENSION_IB" : "none",
	       dat_ofi_upcall_supported(ia, 1) ? " and the upcall extension" : "");
	return !dat_ofi_upcall_supported(ia, 1) ||
	       dat_ia_close(ia, DAT_CLOSE_GRACEFUL_FLAG) != DAT_SUCCESS ||
	       ia_attr.extension_supported != DAT_EXTENSION_IB;
}
EOF
# shellcheck disable=SC2046
if cc -Wall -Werror -o "$tmp/devtest" "$tmp/devtest.c" $(pkg-config --cflags --libs dapl-ofi) \
	>"$tmp/devtest.log" 2>&1 && timeout 60 "$tmp/devtest" >>"$tmp/devtest.log" 2>&1; then
	ok "libdaplofi-dev: cc \$(pkg-config --cflags --libs dapl-ofi) builds a program that opens ofi-lo: $(tail -n 1 "$tmp/devtest.log")"
else
	notok "libdaplofi-dev: cc \$(pkg-config --cflags --libs dapl-ofi) builds a program that opens ofi-lo"
	comment <"$tmp/devtest.log"
fi

# the stock dtest pair, through /etc/dat.conf (no DAT_OVERRIDE); judged by
# tests/stock/clients.sh, whose TAP lines are numbered again here
relay() {
	local line desc rc
	"$@" >"$tmp/clients.log" 2>&1
	rc=$?
	while IFS= read -r line; do
		case $line in
		"ok "*) ok "registry: $(sed -E 's/^ok [0-9]+ - //' <<<"$line")" ;;
		"not ok "*) notok "registry: $(sed -E 's/^not ok [0-9]+ - //' <<<"$line")" ;;
		"#"* | "Bail out!"*) echo "$line" ;;
		esac
	done <"$tmp/clients.log"
	if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$tmp/clients.log"; then
		notok "registry: tests/stock/clients.sh ran (exit $rc)"
	fi
}
relay env CLIENTS_REGISTRY=system CLIENTS_CASES="dtest-default dtest-rr" tests/stock/clients.sh

ts=$SECONDS
r=0
for i in 1 2; do
	dpkg -i "${debs[@]}" >"$tmp/reinstall.log" 2>&1 || r=1
	[ "$(sha256sum <"$CONF")" = "$inst_sum" ] || r=1
done
check "dpkg -i the same packages twice more: $CONF unchanged ($((SECONDS - ts))s)" [ "$r" -eq 0 ]
[ "$r" -eq 0 ] || tail -n 20 "$tmp/reinstall.log" | comment

dpkg -r "${PKGS[2]}" "${PKGS[1]}" "${PKGS[0]}" >"$tmp/remove.log" 2>&1 && same_as_orig
check "dpkg -r: $CONF byte for byte as before the install" [ $? -eq 0 ]
dpkg -i "${debs[@]}" >"$tmp/reinstall.log" 2>&1 && block_ok "$CONF"
check "dpkg -i after dpkg -r: the block is back, once" [ $? -eq 0 ]

dpkg --purge "${PKGS[@]}" >"$tmp/purge.log" 2>&1 && ! installed_any && same_as_orig
check "dpkg --purge: packages gone, $CONF byte for byte as before (sha256)" [ $? -eq 0 ]

echo "# package test: $((SECONDS - t0))s"
finish
