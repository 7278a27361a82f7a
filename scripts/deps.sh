#!/bin/sh
# Install the Debian 12 packages dapl-ofi needs to build and test, when
# missing.  As root: apt-get installs them.  Otherwise: say which (and fail
# when a needed one is missing).
#   scripts/deps.sh [deb] [lint] [rpm]
# deb: also what `make deb` needs; lint: also lintian (tests/package/deb.sh);
# rpm: rpmbuild and rpmlint (`make rpm`, tests/package/rpm.sh).
# cmake and patch: tests/apps/pscom.sh builds pscom.  iproute2 and nftables:
# the test hosts of tests/hosts/ and their faults.
#
# OPT_PKGS are wanted, not needed: gnuplot-nox draws bench/plot's pictures
# (make bench, make demo; make check's bench-smoke draws one to test the
# script).  Without it make demo prints its table only and bench/compare
# skips its plots, each saying how to get them.  libclang-rt-14-dev is
# clang's libFuzzer runtime (make fuzz, and make check's fuzz step, which
# skip their targets without it; clang only recommends it).
set -e
PKGS="make gcc clang pkg-config libdapl-dev dapl2-utils libfabric-dev libfabric-bin \
libcmocka-dev spin valgrind iproute2 nftables procps cmake patch"
OPT_PKGS="gnuplot-nox libclang-rt-14-dev"
for set in "$@"; do
	case $set in
	deb) PKGS="$PKGS build-essential debhelper dpkg-dev" ;;
	lint) PKGS="$PKGS lintian" ;;
	rpm) PKGS="$PKGS rpm rpmlint" ;;
	*) echo "deps.sh: unknown set '$set' (deb, lint, rpm)" >&2; exit 2 ;;
	esac
done
installed() { dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
missing="" opt_missing=""
for p in $PKGS; do
	installed "$p" || missing="$missing $p"
done
for p in $OPT_PKGS; do
	installed "$p" || opt_missing="$opt_missing $p"
done
[ -z "$missing$opt_missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
	echo "dapl-ofi: installing missing packages:$missing$opt_missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends \
		$missing $opt_missing >/dev/null
elif [ -n "$missing" ]; then
	echo "dapl-ofi: missing packages:$missing$opt_missing" >&2
	echo "dapl-ofi: run:  sudo apt-get install$missing$opt_missing" >&2
	exit 1
else
	echo "dapl-ofi: not installed:$opt_missing (gnuplot-nox: no plots; libclang-rt-14-dev:" \
	     "no fuzz targets): sudo apt-get install$opt_missing" >&2
fi
