#!/bin/bash
# The RPM packages (rpm/dapl-ofi.spec, `make rpm`), built on this Debian
# machine with Debian's rpm, linted, and installed and erased in scratch
# roots (rpm --root, --nodeps: their dependencies are Debian packages here):
#   - make rpm builds dapl-ofi, dapl-ofi-devel and dapl-ofi-utils from the
#     make dist tarball (rpmbuild -ta), with the Debian packages' split;
#   - rpmlint (with rpm/dapl-ofi.rpmlintrc, each filter explained there)
#     reports no error;
#   - the Lua scriptlets, run by rpm itself in the scratch root, on the
#     /etc/dat.conf cases of debian/libdaplofi2.postinst/.postrm: libdapl2's
#     own file (OFA's ofa-v2-* entries, no final newline), no file, a file
#     ending in a newline behind a symlink with mode 0600, a BEGIN without
#     END; a reinstall (rpm -U --replacepkgs: the old package's %postun runs
#     with 1) leaves the block alone; after rpm -e the file is byte for byte
#     as before (or absent again), and no file of the packages is left.
#
#   tests/package/rpm.sh           (from anywhere; as root)
#
# Prints TAP, the plan last; one "ok 1 # SKIP why" when it cannot run (not
# root: rpm --root chroots to run the scriptlets).  Exit status 0 if nothing
# failed.  It touches nothing outside build/rpm and its temporary directory
# (about 15 s, most of it rpmbuild).
set -u
cd "$(dirname "$0")/../.." || exit 2
RPMDIR=build/rpm/RPMS
PKGS=(dapl-ofi dapl-ofi-devel dapl-ofi-utils)
OFA_CONF=tests/package/libdapl2-dat.conf	# Debian libdapl2 2.1.10's /etc/dat.conf
BEGIN_RE='^# BEGIN libdaplofi2'

n=0 nfail=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); nfail=$((nfail + 1)); echo "not ok $n - $*"; }
check() {
	local name=$1
	shift
	if "$@"; then ok "$name"; else notok "$name"; fi
}
comment() { sed -e 's/^/#   /'; }
skip_all() { echo "ok 1 # SKIP $*"; echo "1..1"; exit 0; }
finish() { echo "1..$n"; [ "$nfail" -eq 0 ]; exit; }

[ "$(id -u)" = 0 ] || skip_all "not root: rpm --root chroots into the scratch root for the scriptlets"
t0=$SECONDS
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'echo "# interrupted"; exit 130' INT TERM HUP

if ! scripts/deps.sh rpm >"$tmp/deps.log" 2>&1; then
	notok "rpmbuild and rpmlint (scripts/deps.sh rpm)"
	comment <"$tmp/deps.log"
	finish
fi

# ---- build and lint ------------------------------------------------------
ts=$SECONDS
if make -s rpm >"$tmp/build.log" 2>&1; then
	ok "make rpm (make dist, rpmbuild -ta) builds ${PKGS[*]} and the source RPM ($((SECONDS - ts))s)"
else
	notok "make rpm (make dist, rpmbuild -ta) builds ${PKGS[*]} and the source RPM"
	tail -n 30 "$tmp/build.log" | comment
	finish
fi
rpms=()
for p in "${PKGS[@]}"; do
	f=$(ls "$RPMDIR"/*/"$p"-[0-9]*.rpm 2>/dev/null | head -n 1)
	[ -n "$f" ] || { notok "$p's .rpm is in $RPMDIR/"; finish; }
	rpms+=("$PWD/$f")
done
srpm=$(ls build/rpm/SRPMS/*.src.rpm 2>/dev/null | head -n 1)
[ -n "$srpm" ] || { notok "the source RPM is in build/rpm/SRPMS/"; finish; }

# rpmlint exits non-zero on errors; count them too, in case it does not
rpmlint -r rpm/dapl-ofi.rpmlintrc "${rpms[@]}" "$srpm" >"$tmp/lint.log" 2>&1
rc=$?
errs=$(grep -c ': E: ' "$tmp/lint.log")
[ "$rc" -eq 0 ] && [ "$errs" -eq 0 ]
check "rpmlint (rpm/dapl-ofi.rpmlintrc): no error in the 3 RPMs and the source RPM ($(tail -n 1 "$tmp/lint.log" | sed 's/^ *//'))" [ $? -eq 0 ]
grep -E ': [EW]: ' "$tmp/lint.log" | comment

# the Debian split: library and snippet; headers, .pc, man3; tools, man1/7
rpm -qlp "${rpms[0]}" >"$tmp/l0" 2>/dev/null
rpm -qlp "${rpms[1]}" >"$tmp/l1" 2>/dev/null
rpm -qlp "${rpms[2]}" >"$tmp/l2" 2>/dev/null
grep -qx '/usr/lib64/libdaplofi.so.2' "$tmp/l0" && grep -qx '/usr/share/dapl-ofi/dat.conf' "$tmp/l0" &&
	grep -q 'LICENSE$' "$tmp/l0" && ! grep -qE '/usr/bin/|/usr/include/|libdaplofi\.so$' "$tmp/l0" &&
	grep -qx '/usr/include/dat2/dapl_ofi.h' "$tmp/l1" && grep -qx '/usr/lib64/pkgconfig/dapl-ofi.pc' "$tmp/l1" &&
	grep -q '/man3/dat_evd_modify_upcall.3' "$tmp/l1" &&
	grep -qx '/usr/bin/daplofi-info' "$tmp/l2" && grep -q '/man7/dapl-ofi.7' "$tmp/l2" &&
	grep -q '/man1/daplofi-info.1' "$tmp/l2"
check "the packages split as the Debian ones: library + snippet + license, devel, utils" [ $? -eq 0 ]
rpm -qp --qf '%{LICENSE}\n' "${rpms[0]}" 2>/dev/null | grep -qx 'BSD-2-Clause OR GPL-2.0-only'
check "License: BSD-2-Clause OR GPL-2.0-only (as LICENSE and debian/copyright)" [ $? -eq 0 ]

# ---- installed and erased in scratch roots -------------------------------
# rpm: run it on a scratch root with its own database.  Debian's rpm warns
# that it is not dpkg: that line is not a finding.
rpmr() {
	local rc
	rpm --root "$root" --dbpath /var/lib/rpm --nodeps "$@" >"$tmp/rpm.out" 2>&1
	rc=$?
	grep -vE 'should not be used directly|assuming you know what you are doing' "$tmp/rpm.out"
	return $rc
}
newroot() {
	root=$tmp/root.$1
	mkdir -p "$root/etc" "$root/var/lib/rpm"
	sconf=$root/etc/dat.conf
}
snippet=$tmp/snippet
rpm2cpio "${rpms[0]}" 2>/dev/null | (cd "$tmp" && cpio -i --quiet --to-stdout ./usr/share/dapl-ofi/dat.conf) >"$snippet"
mapfile -t ENTRIES < <(grep -vE '^[[:space:]]*(#|$)' "$snippet")
[ "${#ENTRIES[@]}" -ge 1 ] || { notok "the snippet /usr/share/dapl-ofi/dat.conf has entries"; finish; }
# block_ok FILE: one BEGIN, one END, each entry of the snippet once
block_ok() {
	local e
	[ "$(grep -c "$BEGIN_RE" "$1")" -eq 1 ] && [ "$(grep -c '^# END libdaplofi2' "$1")" -eq 1 ] ||
		return 1
	for e in "${ENTRIES[@]}"; do
		[ "$(grep -cxF -- "$e" "$1")" -eq 1 ] || return 1
	done
}
# packages_gone: rpm knows none of them, and none of their files is left
packages_gone() {
	local f
	for p in "${PKGS[@]}"; do
		rpm --root "$root" --dbpath /var/lib/rpm -q "$p" >/dev/null 2>&1 && return 1
	done
	for f in $(cat "$tmp/l0" "$tmp/l1" "$tmp/l2"); do
		[ -f "$root$f" ] && return 1
	done
	return 0
}

# 1. OFA uDAPL's dat.conf, as Debian's libdapl2 ships it (no final newline)
newroot ofa
cp "$OFA_CONF" "$sconf"
ts=$SECONDS
rpmr -i "${rpms[@]}" >"$tmp/i.log"
[ -f "$root/usr/lib64/libdaplofi.so.2" ] && [ -x "$root/usr/bin/daplofi-info" ] && block_ok "$sconf"
check "rpm -i --root: the 3 packages installed, the block in $OFA_CONF's copy once ($((SECONDS - ts))s)" [ $? -eq 0 ]
comment <"$tmp/i.log"
cmp -s -n "$(stat -c %s "$OFA_CONF")" "$OFA_CONF" "$sconf" && grep -q "$BEGIN_RE newline" "$sconf" &&
	[ "$(grep -c '^ofa-v2-' "$sconf")" = "$(grep -c '^ofa-v2-' "$OFA_CONF")" ]
check "OFA's $(grep -c '^ofa-v2-' "$OFA_CONF") ofa-v2-* entries untouched; a newline added before the block (flag 'newline')" [ $? -eq 0 ]
grep -A "${#ENTRIES[@]}" "$BEGIN_RE" "$sconf" | comment
cp "$sconf" "$tmp/ofa.inst"
rpmr -U --replacepkgs "${rpms[@]}" >"$tmp/u.log" && rpmr -U --replacepkgs "${rpms[@]}" >>"$tmp/u.log"
check "rpm -U --replacepkgs twice (the old %postun runs with 1): dat.conf unchanged" cmp -s "$tmp/ofa.inst" "$sconf"
rpmr -e "${PKGS[@]}" >"$tmp/e.log"
cmp -s "$OFA_CONF" "$sconf" && packages_gone
check "rpm -e: dat.conf byte for byte libdapl2's again, no file of the packages left" [ $? -eq 0 ]
comment <"$tmp/e.log"

# 2. no dat.conf at all
newroot none
rm -f "$sconf"
rpmr -i "${rpms[@]}" >/dev/null
block_ok "$sconf" && grep -q "$BEGIN_RE created" "$sconf" && [ "$(stat -c %a "$sconf")" = 644 ] &&
	[ "$(grep -vcE '^#' "$sconf")" = "${#ENTRIES[@]}" ]
r1=$?
rpmr -e "${PKGS[@]}" >/dev/null
[ "$r1" -eq 0 ] && [ ! -e "$sconf" ] && packages_gone
check "no dat.conf: created (0644) with the block only, deleted again by rpm -e" [ $? -eq 0 ]

# 3. a file ending in a newline, behind a relative symlink, mode 0600
newroot link
printf '# a comment\nx u2.0 nonthreadsafe default libx.so.2 dapl.2.0 "x" ""\n' >"$tmp/b"
cp "$tmp/b" "$root/etc/dat.conf.real" && chmod 600 "$root/etc/dat.conf.real" &&
	ln -s dat.conf.real "$sconf" && rpmr -i "${rpms[@]}" >/dev/null && [ -L "$sconf" ] &&
	block_ok "$root/etc/dat.conf.real" && ! grep -q "$BEGIN_RE.*newline" "$sconf" &&
	[ "$(stat -c %a "$root/etc/dat.conf.real")" = 600 ] &&
	rpmr -e "${PKGS[@]}" >/dev/null && [ -L "$sconf" ] && cmp -s "$tmp/b" "$root/etc/dat.conf.real" &&
	[ "$(stat -c %a "$root/etc/dat.conf.real")" = 600 ]
check "a symlinked dat.conf ending in a newline: stays a link, its target keeps mode 0600, back byte for byte" [ $? -eq 0 ]

# 4. the admin removed the END line: erase leaves the file alone, and says so
newroot noend
cp "$tmp/b" "$sconf"
rpmr -i "${rpms[@]}" >/dev/null && sed -i '/^# END libdaplofi2/d' "$sconf" && cp "$sconf" "$tmp/noend"
rpmr -e "${PKGS[@]}" >"$tmp/noend.log"
cmp -s "$tmp/noend" "$sconf" && grep -q "no '# END libdaplofi2' after it" "$tmp/noend.log" && packages_gone
check "a BEGIN line without END: rpm -e leaves dat.conf alone, with a warning" [ $? -eq 0 ]

echo "# rpm package test: $((SECONDS - t0))s"
finish
